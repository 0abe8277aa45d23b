# SPDX-License-Identifier: MIT
"""The NPU2 traffic model reproduces mlir-air's dense bf16 GEMM measurements (docs/performance.md#calibration-against-measured-dense-gemms)."""

import pytest

from int4awq.model import DENSE_BF16_FLOPS, dense_gemm_ddr_bytes, estimate

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


def test_the_host_package_imports_in_one_direction():
    # Performance models build on configurations and on one another one way: no module of int4awq reaches
    # itself through its imports (module-level or inside functions).
    import ast
    import os

    pkg = os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "int4awq"
    )
    deps = {}
    for f in os.listdir(pkg):
        if f.endswith(".py"):
            tree = ast.parse(open(os.path.join(pkg, f)).read())
            deps[f[:-3]] = {
                (n.module or a.name).split(".")[0]
                for n in ast.walk(tree)
                if isinstance(n, ast.ImportFrom) and n.level == 1
                for a in n.names
            }

    def reaches(src, dst, seen=()):
        return any(
            d == dst or (d not in seen and reaches(d, dst, seen + (d,)))
            for d in deps.get(src, ())
        )

    assert deps["kernel_cost"] >= {"model"} and "kernel_cost" in deps["sweep"]
    assert [m for m in deps if reaches(m, m)] == []
