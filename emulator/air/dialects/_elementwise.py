# SPDX-License-Identifier: MIT
"""Float arithmetic shared by arith, math and vector: values are numpy scalars (np.float32,
ml_dtypes.bfloat16, ...) or numpy arrays of the element type (vectors). Each op computes in float64 and
rounds once to the element type (ml_dtypes converts float64 to bfloat16 directly, half to even).
"""

import numpy as np

from ..ir import VectorType, _FloatType


def is_float_like(t):
    """A float scalar type or a vector of one."""
    return isinstance(t, _FloatType) or (
        isinstance(t, VectorType) and isinstance(t.element_type, _FloatType)
    )


def element_type(t):
    return t.element_type if isinstance(t, VectorType) else t


def rounded(x64, like):
    """float64 value(s) rounded to the dtype of `like` (a numpy scalar or array)."""
    if isinstance(like, np.ndarray):
        return np.asarray(x64, dtype=np.float64).astype(like.dtype)
    return type(like)(x64)


def f64(x):
    if isinstance(x, np.ndarray):
        return x.astype(np.float64)
    return np.float64(x)


def fused_multiply_add(a, b, c):
    """a * b + c with one rounding to a's element type. The product of two f32 / bf16 / f16 values is
    exact in float64; the sum is rounded to odd in float64 (the TwoSum error picks the odd neighbour),
    which makes the final rounding to a type of at most 51 bits the correctly rounded one (Boldo and
    Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms using rounding to odd").
    """
    p, c64 = f64(a) * f64(b), f64(c)
    with np.errstate(all="ignore"):
        s = p + c64
        bp = s - c64
        err = (p - bp) + (c64 - (s - bp))
        s = np.asarray(s, dtype=np.float64)
        err = np.asarray(err, dtype=np.float64)
        even = (s.view(np.int64) & 1) == 0
        fix = (err != 0) & even & np.isfinite(s)
        if np.any(fix):
            toward = np.where(err > 0, np.inf, -np.inf)
            s = np.where(fix, np.nextafter(s, toward), s)
    return rounded(s if isinstance(a, np.ndarray) else s[()], a)
