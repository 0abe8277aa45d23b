# SPDX-License-Identifier: MIT
# int4-AWQ GEMM for AMD NPU2 (AIE2P): user entry points. See README.md.
#
#   make run8x4                    the main job: 8x4 herd, 64x64 tiles (NPU2 if present, else the emulator)
#   make test                      the tests that can run here (pytest + lit), within about 3 minutes
#   make test-all                  the same with the slow ones (whole designs, layers and sweeps)
#   make run_llama_qproj           Llama-3.2-1B q_proj at M = 2048 (M=N=K=2048); run_llama_down: K=8192
#   make run_llama_decode          q_proj at decode (M = 1) on the GEMV design, all 32 PEs
#   make run_llama_decode_layer AWQ=.. a layer's o_proj + FFN at decode as one module of 7 launches
#   make run_llama_head AWQ=..         the model's LM head on the GEMV at decode
#   make generate MODEL=.. PROMPT=..   text from a Llama GGUF file or checkpoint directory (TOKENS=N)
#   make compile print             aircc build for NPU2 / print the AIR module
#   make compile-kernel all        the Peano kernel object / build and run (mlir-air's Makefile names)
#   make aircc-check               every design through the real aircc + aiecc (no NPU needed)
#   make sim                       run8x4 through the simulator of the compiled design (BACKEND=sim: any run)
#   make sim-all                   every default design simulated from its compiled form, against the emulator
#   make fuzz-aircc N=1000         the compiler judges the emulator on N generated designs
#   make bench                     every Llama-3.2-1B projection: table, build/bench.csv, build/bench.png
#   make test-formats              the format tests that call torch / compressed-tensors / transformers live
#   make fixtures                  rewrite tests/fixtures/ with those libraries (tests/fixtures/PROVENANCE.md)
#   make bringup                   the hardware bring-up ladder, one risk per step (docs/bringup.md)
#   make upstream-check AIR_SRC=.. mlir-air's own examples on the emulator
#   make help                      this list
# Variables (command line overrides the target's own): M K N GS TILE_M TILE_N TILE_K_L1 TILE_K_L2
# HERD_M HERD_N STACK_SIZE N_PER_SEGMENT (given only: novel, docs/design.md) BACKEND=auto|npu|emu|sim PEANO_INSTALL_DIR, and RUN_ARGS for anything else host/run.py takes;
# PYTHON (default: python3 inside a virtualenv, else ./.venv/bin/python, which `make deps` creates).

# This file's directory: every path below is taken from it, so `make -f <checkout>/Makefile run2x4` works from
# any directory (mlir-air's examples' convention); a path you give (AWQ=...) is taken from where you are.
srcdir := $(patsubst %/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))

# The interpreter: PYTHON when given; else python3 when it runs in a virtualenv or conda environment;
# else .venv/bin/python, the virtualenv `make deps` creates here (stock Debian/Ubuntu python3 refuses pip
# installs outside one: PEP 668, externally-managed-environment).
VENV := $(srcdir)/.venv
ifndef PYTHON
  IN_ENV := $(shell python3 -c 'import os, sys; print(int(sys.prefix != sys.base_prefix or "CONDA_PREFIX" in os.environ))' 2>/dev/null)
  PYTHON := $(if $(filter 1,$(IN_ENV)),python3,$(VENV)/bin/python)
endif
BACKEND ?= auto
M ?= 512
K ?= 1024
N ?= 256
# The weights' format: awq (int4 q, z, bf16 s: AWQ, GPTQ, compressed-tensors int4), awq_f16 (the same with
# fp16 scales held exactly as bf16 pairs: GGUF Q4_0; GS 32 by default), mxfp4 (OCP MX, GS 32) or a GGUF
# block-integer format (int4awq/kernel/record.py FORMATS; GS 32, int8_triple's Q6_K 16).
FORMAT ?= awq
GS ?= $(if $(filter awq,$(FORMAT)),128,$(if $(filter int8_triple,$(FORMAT)),16,32))
TILE_M ?= 64
TILE_N ?= 64
TILE_K_L1 ?= 64
# At most 512: an A read stream chains one memtile BD per K-chunk of a refill, twice that when L2 is
# ping-ponged, and mlir-air's hardware-tested GEMMs chain at most 16 (docs/design.md#provenance).
TILE_K_L2 ?= $(shell echo $$(( $(K) < 512 ? $(K) : 512 )))
HERD_M ?= 8
HERD_N ?= 4
# The core's stack in L1, bytes; empty: derived from what the kernel keeps live (docs/kernel.md).
STACK_SIZE ?=
RUN_ARGS ?=
# A real int4 checkpoint (AutoAWQ, GPTQ, compressed-tensors): `make run_llama_qproj AWQ=path` runs its
# AWQ_LAYER instead of random weights; `make run_llama_layer AWQ=path LAYER=0` runs all seven projections.
AWQ ?=
AWQ_LAYER ?= model.layers.0.self_attn.q_proj
LAYER ?= 0

DESIGN_ARGS = --format $(FORMAT) --m $(M) --k $(K) --n $(N) --gs $(GS) --tile-m $(TILE_M) --tile-n $(TILE_N) \
              --tile-k-l1 $(TILE_K_L1) --tile-k-l2 $(TILE_K_L2) --herd-m $(HERD_M) --herd-n $(HERD_N) \
              $(if $(STACK_SIZE),--stack-size $(STACK_SIZE)) $(call given,N_PER_SEGMENT)
# With AWQ, K, N and GS are the checkpoint's and the tiles its shape's default configuration: only M and
# what the command line sets explicitly (make ... AWQ=x TILE_M=32) are passed on.
given = $(if $(filter command line,$(origin $(1))),--$(subst _,-,$(shell echo $(1) | tr A-Z a-z)) $($(1)))
AWQ_DESIGN_ARGS = --m $(M) $(foreach v,K N GS TILE_M TILE_N TILE_K_L1 TILE_K_L2 HERD_M HERD_N STACK_SIZE N_PER_SEGMENT,$(call given,$(v)))
# host/run.py names `make <goal> BACKEND=emu` (not its own --backend emu) when a target runs it.
HOST = INT4AWQ_MAKE_TARGET='$(or $(filter-out compile deps,$(MAKECMDGOALS)),run)' $(PYTHON) $(srcdir)/host/run.py
KERNEL_ARGS = FORMAT=$(FORMAT) DIM_M=$(TILE_M) DIM_N=$(TILE_N) DIM_K_CHUNK=$(TILE_K_L1) DIM_GS=$(GS)


.PHONY: all compile-kernel help format format-check aircc-check fuzz-aircc sim sim-all upstream-check calibrate bringup run run1x1 run2x4 run8x4 run_llama_qproj run_llama_qproj_seq32 run_llama_down run_llama_layer run_llama_decode run_llama_decode_layer run_llama_head generate print compile bench test test-all deps dev-deps format-deps clean

run: deps
	$(HOST) $(if $(AWQ),$(AWQ_DESIGN_ARGS) --awq $(AWQ) --layer $(AWQ_LAYER),$(DESIGN_ARGS)) --backend $(BACKEND) $(RUN_ARGS)

# The targets with a line each (the comment block at the top of this file, printed).
help:
	@sed -n '4,/^$$/p' $(firstword $(MAKEFILE_LIST)) | sed -n 's/^#   //p'

# One decoder layer of a checkpoint, each projection with its default configuration (int4awq/design/configs.json;
# for M <= 8 the decode GEMV's, docs/decode.md).
run_llama_layer: M = 128
run_llama_layer: deps
	@test -n "$(AWQ)" || { echo "run_llama_layer: give AWQ=<checkpoint directory or .safetensors>"; exit 2; }
	$(HOST) --awq $(AWQ) --decoder-layer $(LAYER) --m $(M) --backend $(BACKEND) $(RUN_ARGS)

# Llama-3.2-1B q_proj at decode, M = 1: the GEMV design on all 32 PEs (matvec_int4_packed.py, docs/decode.md);
# AWQ=path runs the checkpoint's AWQ_LAYER instead of random weights.
run_llama_decode: M = 1
run_llama_decode: K = 2048
run_llama_decode: N = 2048
run_llama_decode: deps
	$(HOST) --design gemv --format $(FORMAT) --m $(M) $(if $(AWQ),--awq $(AWQ) --layer $(AWQ_LAYER),--k $(K) --n $(N) --gs $(GS)) \
	  --backend $(BACKEND) $(RUN_ARGS)

# A decoder layer's attention-free part at decode as one module of seven launches (o_gemv_ffn_int4.py): o_proj,
# residual, RMSNorm, gate and up fused, SwiGLU, down, residual; the attention from the host's reference. AWQ=path:
# a checkpoint directory (with its config.json) or a GGUF file (e.g. Q4_K_M); LAYER picks the layer.
run_llama_decode_layer: deps
	@test -n "$(AWQ)" || { echo "run_llama_decode_layer: give AWQ=<checkpoint directory or .gguf file> (LAYER=0)"; exit 2; }
	$(HOST) --weights $(AWQ) --decoder-layer $(LAYER) --layer-module --backend $(BACKEND) $(RUN_ARGS)

# The model's LM head on the GEMV at decode (M = 1): GGUF's output (or tied token_embd) in its own type; a
# checkpoint's float lm_head (or tied embed_tokens) needs RUN_ARGS="--head-format awq" (quantised at load)
run_llama_head: deps
	@test -n "$(AWQ)" || { echo "run_llama_head: give AWQ=<checkpoint directory or .gguf file>"; exit 2; }
	$(HOST) --weights $(AWQ) --layer lm_head --m 1 --backend $(BACKEND) $(RUN_ARGS)

# Text from a Llama checkpoint (host/generate.py, docs/decode.md): MODEL=<.gguf file or checkpoint directory>,
# PROMPT, TOKENS; RUN_ARGS for the rest (--chat, --check, --temperature, ...). BACKEND=auto is the kernels'
# numpy models, the one backend generate has so far.
TOKENS ?= 32
PROMPT ?= The capital of France is
generate: deps
	@test -n "$(MODEL)" || { echo "generate: give MODEL=<.gguf file or checkpoint directory> (PROMPT=..., TOKENS=N)"; exit 2; }
	$(PYTHON) $(srcdir)/host/generate.py --model $(MODEL) --prompt "$(PROMPT)" --tokens $(TOKENS) --backend $(BACKEND) $(RUN_ARGS)

run1x1: M = 64
run1x1: K = 512
run1x1: N = 64
run1x1: HERD_M = 1
run1x1: HERD_N = 1
run2x4: M = 128
run2x4: K = 512
run2x4: N = 256
run2x4: HERD_M = 2
run2x4: HERD_N = 4
run_llama_qproj: M = 2048
run_llama_qproj: K = 2048
run_llama_qproj: N = 2048
run_llama_qproj: TILE_M = 64
run_llama_qproj: TILE_N = 128
run_llama_qproj: TILE_K_L1 = 32
run_llama_qproj: TILE_K_L2 = 256
run_llama_qproj_seq32: M = 32
run_llama_qproj_seq32: K = 2048
run_llama_qproj_seq32: N = 2048
run_llama_qproj_seq32: TILE_M = 16
run_llama_qproj_seq32: HERD_M = 2
run_llama_down: M = 2048
run_llama_down: K = 8192
run_llama_down: N = 2048
run_llama_down: TILE_M = 64
run_llama_down: TILE_N = 128
run_llama_down: TILE_K_L1 = 32
run_llama_down: TILE_K_L2 = 256
run1x1 run2x4 run8x4 run_llama_qproj run_llama_qproj_seq32 run_llama_down: run

# run8x4 through the simulator of the design aircc + aiecc compile (emulator/aiesim, docs/verification.md);
# BACKEND=sim does the same for any run target. sim-all: every default design, compared with the emulator.
sim:
	$(MAKE) -f $(srcdir)/Makefile run8x4 BACKEND=sim
sim-all: deps
	$(PYTHON) $(srcdir)/host/sim_check.py $(RUN_ARGS)

# The hardware bring-up ladder, one risk per step (docs/bringup.md): BACKEND=npu on NPU2, the emulator elsewhere;
# RUN_ARGS=--keep-going runs every step after a FAIL, RUN_ARGS='--steps 2,3' only those.
bringup: deps
	$(PYTHON) $(srcdir)/host/bringup.py --backend $(BACKEND) $(RUN_ARGS)

print: deps
	$(HOST) $(DESIGN_ARGS) --design gemm -p

# Every Llama-3.2-1B projection: measured on NPU2, modelled (and labelled so) elsewhere; also build/bench.csv
# and the roofline build/bench.png.
bench: dev-deps
	$(PYTHON) $(srcdir)/host/bench.py $(RUN_ARGS)

compile: compile-kernel
	$(HOST) $(DESIGN_ARGS) --design gemm --compile-only

# The names mlir-air's example Makefiles use: compile-kernel (the Peano object of this configuration) and
# all (build and run it: on the NPU with the toolchain, on the emulator elsewhere).
compile-kernel: deps
	$(MAKE) -C $(srcdir)/kernels peano $(KERNEL_ARGS)
all: run

# Every design through the real compiler (docs/verification.md#the-real-compiler): aircc's AIR passes
# compared with the emulator's decisions, aircc + aiecc down to the NPU instructions, the runtime sequence
# against DDR. The tools: AIRCC_BIN / PATH / ../shared/tools/aircc; RUN_ARGS=--all adds configs.json.
aircc-check: deps
	$(PYTHON) $(srcdir)/host/aircc_check.py $(RUN_ARGS)

# The compiler judges the emulator on N generated designs (host/aircc_fuzz.py, docs/emulator.md#judged-by-the-compiler):
# each through the emulator, aircc's AIR passes and aircc + aiecc; prints every disagreement and the tally.
N ?= 1000
SEED ?= 0
fuzz-aircc: deps
	$(PYTHON) $(srcdir)/host/aircc_fuzz.py -n $(N) --seed $(SEED) $(RUN_ARGS)

# mlir-air's own hardware-tested examples, unchanged, on the emulator (docs/emulator.md#the-acceptance-corpus).
upstream-check: deps
	@test -n "$(AIR_SRC)" || { echo "upstream-check: give AIR_SRC=<a checkout of mlir-air> [AIE_SRC=<a checkout of mlir-aie>]"; exit 2; }
	$(PYTHON) $(srcdir)/host/upstream_check.py --air-src $(AIR_SRC) $(if $(AIE_SRC),--aie-src $(AIE_SRC))

# The kernel cost model's calibration: the public kernels measured on NPU2, profiled at their measured
# commits from your clones (full history, or the measured version checked out) into
# int4awq/design/kernel_calibration.json (docs/performance.md#the-kernel-cost-model).
calibrate: deps
	@test -n "$(AIR_SRC)" -a -n "$(AIE_SRC)" || { echo "calibrate: give AIR_SRC=<a clone of mlir-air> AIE_SRC=<a clone of mlir-aie>"; exit 2; }
	$(PYTHON) $(srcdir)/host/calibrate_kernels.py --air-src $(AIR_SRC) --aie-src $(AIE_SRC)

# Installs the Python dependencies once per requirements.txt change and interpreter (.venv first, if used).
# --system-site-packages: what the system python already has (e.g. mlir-air wheels) stays visible.
USES_VENV := $(filter $(VENV)/bin/python,$(PYTHON))
PYTHON_PREFIX := $(if $(USES_VENV),$(VENV),$(shell $(PYTHON) -c 'import sys; print(sys.prefix)'))
DEPS_STAMP := $(srcdir)/build/.deps-$(shell cat $(srcdir)/requirements.txt | cksum | cut -d' ' -f1)-$(shell echo '$(PYTHON_PREFIX)' | cksum | cut -d' ' -f1)
$(VENV)/bin/python:
	python3 -m venv --system-site-packages $(VENV) || { rm -rf $(VENV); echo "make: could not create $(VENV):" \
	  "install python3-venv (apt-get install python3-venv), or run make inside a virtualenv, or give PYTHON=..." >&2; exit 2; }
$(DEPS_STAMP): $(srcdir)/requirements.txt $(USES_VENV)
	@echo "make: installing requirements.txt into $(PYTHON_PREFIX) (once per change of that file; pip shows its progress)"
	$(PYTHON) -m pip install --disable-pip-version-check -r $(srcdir)/requirements.txt
	@mkdir -p $(dir $@) && touch $@
deps: $(DEPS_STAMP)
# The tests', the formatters' and the bench plot's tools (requirements-dev.txt), for the targets that use them.
DEV_DEPS_STAMP := $(srcdir)/build/.dev-deps-$(shell cat $(srcdir)/requirements-dev.txt | cksum | cut -d' ' -f1)-$(shell echo '$(PYTHON_PREFIX)' | cksum | cut -d' ' -f1)
$(DEV_DEPS_STAMP): $(srcdir)/requirements-dev.txt $(DEPS_STAMP)
	@echo "make: installing requirements-dev.txt into $(PYTHON_PREFIX) (once per change of that file)"
	$(PYTHON) -m pip install --disable-pip-version-check -r $(srcdir)/requirements-dev.txt
	@mkdir -p $(dir $@) && touch $@
dev-deps: $(DEV_DEPS_STAMP)
# The formats' own libraries (requirements-formats.txt: torch, compressed-tensors, transformers), installed by
# `make test-formats` and `make fixtures` only: `make test` reads the files they wrote (tests/fixtures/).
FORMAT_DEPS_STAMP := $(srcdir)/build/.format-deps-$(shell cat $(srcdir)/requirements-formats.txt | cksum | cut -d' ' -f1)-$(shell echo '$(PYTHON_PREFIX)' | cksum | cut -d' ' -f1)
$(FORMAT_DEPS_STAMP): $(srcdir)/requirements-formats.txt $(DEPS_STAMP)
	$(PYTHON) -m pip install -q -r $(srcdir)/requirements-formats.txt
	@mkdir -p $(dir $@) && touch $@
format-deps: $(FORMAT_DEPS_STAMP)

# Formatting as mlir-air's CI checks it: black (its defaults) for Python, clang-format (LLVM style,
# .clang-format) for C++.
tracked = $(addprefix $(srcdir)/,$(shell git -C $(srcdir) ls-files $(1) 2>/dev/null))
CXX_SOURCES = $(call tracked,'*.cc' '*.hpp' '*.h')
CLANG_FORMAT = $(PYTHON) -c 'import sys, clang_format; sys.argv[0] = "clang-format"; clang_format.clang_format()'
# (the commands name every file: not echoed)
format-check: dev-deps
	@echo "format-check: black and clang-format over the tracked sources"
	@$(PYTHON) -m black --check -q $(call tracked,'*.py') || { echo "format-check: run \`make format\`"; exit 1; }
	@$(CLANG_FORMAT) --dry-run --Werror $(CXX_SOURCES) || { echo "format-check: run \`make format\`"; exit 1; }
format: dev-deps
	@$(PYTHON) -m black -q $(call tracked,'*.py')
	@$(CLANG_FORMAT) -i $(CXX_SOURCES)

# The tests whose runs change with the compiler's presence (a run compiles first where it can) run a second
# time with it hidden (INT4AWQ_NO_COMPILER=1), as on a clone without ../shared or aircc.
WITHOUT_COMPILER_TESTS = tests/run/test_cli_run.py tests/test_cli_make.py tests/run/test_bringup.py
# make test: within about 3 minutes, the tests marked `slow` deselected (tests/conftest.py); make test-all: every test
PYTEST_SELECT = -m "not slow"
test-all: PYTEST_SELECT =
test test-all: dev-deps format-check
	$(PYTHON) -m pytest -q -n auto --dist loadfile $(PYTEST_SELECT) $(srcdir)/tests $(srcdir)/emulator/tests
	INT4AWQ_NO_COMPILER=1 $(PYTHON) -m pytest -q -n auto --dist loadfile $(addprefix $(srcdir)/,$(WITHOUT_COMPILER_TESTS))
	$(PYTHON) -c 'from lit.main import main; main()' -sv $(srcdir)/tests

# The tests marked `formats` (tests/conftest.py), with the formats' own libraries: they write and dequantise
# the checkpoints again, and check tests/fixtures/ is what they write.
.PHONY: test-formats fixtures
test-formats: dev-deps format-deps
	$(PYTHON) -m pytest -q --formats -m formats $(srcdir)/tests
# Rewrites tests/fixtures/ (checkpoints, the libraries' dequantisations, PROVENANCE.md) with those libraries.
fixtures: deps format-deps
	$(PYTHON) $(srcdir)/tests/fixtures/make_fixtures.py

clean:
	rm -rf $(srcdir)/build $(srcdir)/kernels/build
