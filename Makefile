# int4-AWQ GEMM for AMD NPU2 (AIE2P): user entry points.
PYTHON ?= python3

.PHONY: test deps clean

# Installs the Python dependencies once per requirements.txt change.
DEPS_STAMP := build/.deps-$(shell cksum < requirements.txt | cut -d' ' -f1)
$(DEPS_STAMP): requirements.txt
	$(PYTHON) -m pip install -q -r requirements.txt
	@mkdir -p build && touch $@
deps: $(DEPS_STAMP)

test: deps
	$(PYTHON) -m pytest -q tests

clean:
	rm -rf build kernels/build
