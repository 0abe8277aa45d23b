# SPDX-License-Identifier: MIT
"""The NPU2 traffic model reproduces mlir-air's dense bf16 GEMM measurements (docs/performance.md#calibration-against-measured-dense-gemms)."""

import pytest

from int4awq.design.model import DENSE_BF16_FLOPS, dense_gemm_ddr_bytes, estimate

# (M, K, N, tile_m, tile_n, measured GFLOPS on NPU2, herd 8x4): mlir-air
# programming_examples/matrix_multiplication/bf16_in_fp32_out/README.md and kernel_registry GEMM notes.
MEASURED = [
    (2048, 2048, 2048, 64, 128, 8508),
    (2048, 2048, 512, 64, 128, 7342),
    (2048, 2048, 8192, 64, 128, 8278),
    (2048, 8192, 2048, 64, 128, 9797),
    (512, 512, 512, 32, 128, 1791),
    (1024, 1024, 1024, 64, 128, 6256),
    (4096, 4096, 4096, 64, 128, 9329),
    (2048, 2048, 2048, 64, 64, 6367),
    (2048, 8192, 2048, 64, 64, 6816),
    (4096, 4096, 4096, 64, 64, 6623),
]


@pytest.mark.parametrize("m, k, n, tm, tn, gflops", MEASURED)
def test_model_within_10_percent_of_each_measurement(m, k, n, tm, tn, gflops):
    est = estimate(dense_gemm_ddr_bytes(m, k, n, tm, tn), m, k, n, DENSE_BF16_FLOPS)
    assert est.tops * 1e3 == pytest.approx(gflops, rel=0.10)


def test_traffic_of_the_reference_point():
    # 2048^3 with 64x128 tiles: A and B each read 4 times, f32 C once = 83.9 MB (docs/performance.md#calibration-against-measured-dense-gemms).
    assert (
        dense_gemm_ddr_bytes(2048, 2048, 2048, 64, 128)
        == 4 * 2 * 2048**2 * 2 + 4 * 2048**2
    )
    est = estimate(83_886_080, 2048, 2048, 2048, DENSE_BF16_FLOPS)
    assert est.bound == "DDR" and est.seconds == pytest.approx(
        83_886_080 / 42.5e9 + 0.08e-3
    )


# int4awq's packages, lowest first: a module imports only from its own package or a lower one.
PACKAGE_ORDER = ("formats", "kernel", "design", "run")


def test_the_host_package_imports_in_one_direction():
    # The four concerns build on one another one way (formats, then the kernel's records and models, then
    # the designs and their performance models, then running), and no module reaches itself through its
    # imports (module-level or inside functions).
    import ast
    import os

    root = os.path.join(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
        "int4awq",
    )
    modules = _modules(root)
    deps = {}  # "package.module" (or "errors") -> the same for each int4awq import
    for name in modules:
        path = os.path.join(root, *name.split(".")) + ".py"
        package = ["int4awq"] + name.split(".")[:-1]
        found = set()
        for n in ast.walk(ast.parse(open(path).read())):
            if not isinstance(n, ast.ImportFrom):
                continue
            if n.level:
                parts = package[: len(package) - n.level + 1]
            else:
                parts = []
            parts = parts + (n.module.split(".") if n.module else [])
            if parts[:1] != ["int4awq"]:
                continue
            for a in n.names:
                for candidate in (parts[1:] + [a.name], parts[1:]):
                    if ".".join(candidate) in modules:
                        found.add(".".join(candidate))
                        break
        deps[name] = found - {name}

    def reaches(src, dst, seen=()):
        return any(
            d == dst or (d not in seen and reaches(d, dst, seen + (d,)))
            for d in deps.get(src, ())
        )

    def level(name):
        return PACKAGE_ORDER.index(name.split(".")[0]) if "." in name else -1

    assert deps["design.kernel_cost"] >= {"design.model"}
    assert "design.kernel_cost" in deps["design.sweep"]
    assert (
        "formats.quant" in deps["kernel.record"]
    )  # the walk sees imports across packages
    upward = [(m, d) for m in deps for d in deps[m] if level(d) > level(m)]
    assert upward == []
    assert [m for m in deps if reaches(m, m)] == []


def _modules(root: str) -> set[str]:
    """Every module of int4awq as "package.module" ("errors" at the top)."""
    import os

    out = set()
    for dirpath, _, files in os.walk(root):
        package = os.path.relpath(dirpath, root)
        for f in files:
            if f.endswith(".py") and f != "__init__.py":
                out.add(f[:-3] if package == "." else f"{package}.{f[:-3]}")
    return out
