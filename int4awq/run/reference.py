# SPDX-License-Identifier: MIT
"""The reference GEMM and the checks every run prints.

The reference is the AWQ definition C = A @ ((q - z) * s), accumulated in f64 (or f32 on request) with one
BLAS call, returned as f32 and as bf16 (round to nearest even). The checks compare a device or emulator
result against the f32 reference the way mlir-air's XRTRunner does (np.corrcoef, np.isclose with a
mismatch budget in percent) and add the figures a GEMM needs to be judged by.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

import numpy as np
from ml_dtypes import bfloat16, finfo

from ..errors import ConfigError
from ..formats.quant import AwqWeights, dequantize
from ..kernel.kernel_model import mmul_integers

# bf16 keeps 8 significant bits: round-to-nearest moves a value by at most 2^-8 of itself.
BF16_REL_ROUNDING = 2.0**-8
BF16_TINY = float(finfo(bfloat16).tiny)
BF16_MAX = float(finfo(bfloat16).max)
# The kernel converts A to bfp16ebs8 blocks: 8 consecutive K values of a row share the exponent of the
# largest, each keeps an 8-bit two's-complement mantissa (step 2^(e - 6)): kernels/int4_kernel.h and the
# emulator's host::to_bfp16_block (emulator/include/aie_api/detail/host_mmul.hpp).
BFP16_BLOCK = 8


def check_activations(a: np.ndarray, k: int) -> None:
    if not isinstance(a, np.ndarray) or a.dtype != bfloat16 or a.ndim != 2:
        desc = f"dtype {getattr(a, 'dtype', type(a).__name__)} shape {getattr(a, 'shape', '?')}"
        raise ConfigError(f"A: {desc}, expected a 2-D bfloat16 array [M, K]")
    if a.shape[0] == 0:
        raise ConfigError("A: M = 0 rows; the GEMM needs at least one row")
    if a.shape[1] != k:
        raise ConfigError(
            f"A: K = {a.shape[1]} columns but the weights have K = {k} rows"
        )
    if not np.isfinite(a.astype(np.float32)).all():
        raise ConfigError("A: contains NaN or Inf")


def bfp16_blocks(a: np.ndarray) -> np.ndarray:
    """A [M, K] as the kernel's bfp16ebs8 conversion leaves it (f64): per block of 8 consecutive K values,
    e = exponent of the largest magnitude, every value rounded half to even to a multiple of 2^(e - 6)
    and saturated to [-128, 127] steps; bf16 subnormals (and all-subnormal blocks) become 0.
    """
    x = np.asarray(a).astype(np.float32)
    m, k = x.shape
    if k % BFP16_BLOCK:
        raise ConfigError(
            f"A: K = {k} is not a multiple of the bfp16 block of {BFP16_BLOCK}"
        )
    x = x.reshape(m, k // BFP16_BLOCK, BFP16_BLOCK)
    normal = (x.view(np.uint32) & np.uint32(0x7F800000)) != 0
    v = np.where(normal, x, np.float32(0)).astype(np.float64)
    _, e = np.frexp(
        np.abs(v).max(axis=2, keepdims=True)
    )  # largest = f * 2^e, f in [0.5, 1)
    step = np.ldexp(1.0, e - 7)  # 2^(exponent - 6), the exponent being e - 1
    out = np.clip(np.rint(v / step), -128, 127) * step
    return out.reshape(m, k)


@dataclass(frozen=True)
class Bfp16Loss:
    """What the kernel's bfp16 conversion of A drops: bf16 subnormals, and nonzero values rounded to 0
    because a value at least 2^7 times larger shares their block of 8."""

    subnormal: int
    flushed: int  # normal nonzero values that round to 0 in their block
    total: int
    example: (
        tuple | None
    )  # (row, col, value, col of the block's largest, its value) of the first flush

    def lines(self) -> list[str]:
        out = []
        if self.subnormal:
            out.append(
                f"A holds {self.subnormal} of {self.total} values that are bf16 subnormals (below "
                f"{BF16_TINY:.3g}); the kernel's bfp16 conversion flushes them to 0"
            )
        if self.flushed:
            r, c, v, cmax, vmax = self.example
            out.append(
                f"A holds {self.flushed} nonzero values that bfp16 blocks round to 0: 8 consecutive K"
                f" values share the exponent of the largest and keep 8-bit mantissas, so values"
                f" under about 1/128 of the block's largest vanish (e.g. A[{r}, {c}] = {v:.3g} beside"
                f" A[{r}, {cmax}] = {vmax:.3g})"
            )
        return out


def bfp16_loss(a: np.ndarray) -> Bfp16Loss:
    x = np.asarray(a).astype(np.float32)
    bits = x.view(np.uint32) & np.uint32(0x7FFFFFFF)
    normal = (bits & np.uint32(0x7F800000)) != 0
    subnormal = (bits != 0) & ~normal
    flushed = normal & (bfp16_blocks(a) == 0)
    example = None
    if flushed.any():
        r, c = (int(i) for i in np.argwhere(flushed)[0])
        b0 = c - c % BFP16_BLOCK
        cmax = b0 + int(np.argmax(np.abs(x[r, b0 : b0 + BFP16_BLOCK])))
        example = (r, c, float(x[r, c]), cmax, float(x[r, cmax]))
    return Bfp16Loss(int(subnormal.sum()), int(flushed.sum()), int(x.size), example)


F32_MAX = float(np.finfo(np.float32).max)


def check_accumulator_range(a: np.ndarray, w: AwqWeights, span: int) -> None:
    """The kernel sums A[r, span] x (q - z)[span, n] over each fold span of K (a group, or a K-chunk when a
    group spans several) in an f32 accumulator before it applies the scale. Raise ConfigError when A is so
    large that such a sum can exceed f32's range (bounded by sum |a| x max |q - z| per span).
    """
    k = w.k
    if span <= 0 or k % span:
        return
    a_sum = (
        np.abs(a.astype(np.float64))
        .reshape(a.shape[0], k // span, span)
        .sum(axis=2)
        .max(axis=0)
    )
    ints = mmul_integers(w)
    qz = np.abs(ints)
    qz_max = qz.reshape(k // span, span, w.n).max(axis=(1, 2)).astype(np.float64)
    if (a_sum * qz_max).max(initial=0.0) <= F32_MAX:
        return  # no sum can overflow
    a64 = a.astype(np.float64)
    for s in range(
        k // span
    ):  # the sums themselves (one span at a time: M x N f64 each)
        rows = slice(s * span, (s + 1) * span)
        g = np.abs(a64[:, rows] @ ints[rows].astype(np.float64))
        if g.max(initial=0.0) > F32_MAX:
            r, n = (int(i) for i in np.unravel_index(np.argmax(g), g.shape))
            raise ConfigError(
                f"A is too large for the kernel: A[{r}, {rows.start}:{rows.stop}] x (q - z) of column {n} sums to"
                f" {g[r, n]:.3g} in its f32 accumulator before the scale is applied (f32 max {F32_MAX:.3g});"
                " scale A down"
            )


def reference_gemm(
    a: np.ndarray, w: AwqWeights, accumulate: type = np.float64
) -> tuple[np.ndarray, np.ndarray]:
    """C = A @ dequant(W): (f32 [M, N], bf16 [M, N]). accumulate=np.float32 halves the time. W is validated
    where it was made (a reader or generator) and trusted here; A is checked."""
    check_activations(a, w.k)
    with np.errstate(over="ignore", invalid="ignore"):
        c = a.astype(accumulate) @ dequantize(w).astype(accumulate, copy=False)
        big = float(np.max(np.abs(c), initial=0.0))
        if not big <= BF16_MAX:  # also NaN (inf - inf in an f32 accumulation)
            raise ConfigError(
                f"C = A @ W reaches |C| = {big:.3g}, beyond bfloat16's range (max {BF16_MAX:.4g}; C is"
                " bf16): the product overflows, so there is nothing to check; scale A down"
            )
        c32 = c.astype(np.float32)
        c16 = c32.astype(bfloat16)
    if not np.isfinite(
        c16.astype(np.float32)
    ).all():  # within 2^-9 of BF16_MAX: rounds up to inf
        raise ConfigError(
            f"C = A @ W rounds to inf in bfloat16 (|C| = {big:.6g}): scale A down"
        )
    return c32, c16


@dataclass
class CheckResult:
    correlation: float
    mismatches: int
    total: int
    mean_rel_l1: float
    max_abs_err: float
    max_rel_err: float | None  # exact mode only: over elements with |ref| >= bf16 tiny
    thresholds: dict
    failures: list[str] = field(default_factory=list)
    causes: list[str] = field(
        default_factory=list
    )  # why it failed, when known (explain_failure)

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def mismatch_pct(self) -> float:
        return 100.0 * self.mismatches / self.total

    def report(self) -> str:
        t = self.thresholds
        lines = [
            f"correlation     {self.correlation:.6f}   (min {t['min_correlation']})",
            f"mismatches      {self.mismatches} / {self.total} = {self.mismatch_pct:.4f} %"
            f"   (rtol {t['rtol']:g}, atol {t['atol']:.4g}; max {t['max_mismatch_pct']} %)",
            f"mean rel L1     {self.mean_rel_l1:.3e}   (max {t['max_mean_rel_l1']:g})",
            f"max abs error   {self.max_abs_err:.4g}",
        ]
        if self.max_rel_err is not None:
            lines.append(
                f"max rel error   {self.max_rel_err:.3e}   (exact mode: max 2^-8 = {BF16_REL_ROUNDING:.3e})"
            )
        lines += [f"failed: {f}" for f in self.failures]
        for c in self.causes:  # sentences: wrapped to 100 columns
            lines += textwrap.wrap(f"cause: {c}", 100, subsequent_indent="       ")
        lines.append("PASS!" if self.passed else "FAIL!")
        return "\n".join(lines)


def check(
    c: np.ndarray,
    ref: np.ndarray,
    *,
    exact: bool = False,
    rtol: float = 0.05,
    atol: float | None = None,
    min_correlation: float = 0.999,
    max_mismatch_pct: float = 0.1,
    max_mean_rel_l1: float = 0.03,
) -> CheckResult:
    """Compare result c with the f32 reference ref (same shape).

    atol defaults to 5 % of the reference's RMS, so the element check scales with the data instead of
    being meaningless for large K. exact=True (operands from exact mode) adds the tight bound: every
    element within bf16 rounding of the reference, |c - ref| <= 2^-8 |ref| (|c| <= tiny where ref is tiny).
    """
    c = np.asarray(c)
    ref = np.asarray(ref)
    if c.shape != ref.shape:
        raise ConfigError(
            f"result shape {c.shape} differs from reference shape {ref.shape}"
        )
    cf = c.astype(np.float64).ravel()
    rf = ref.astype(np.float64).ravel()
    if atol is None:
        atol = 0.05 * float(np.sqrt(np.mean(rf * rf)))
    finite = bool(np.isfinite(cf).all())
    err = np.abs(cf - rf)
    with np.errstate(invalid="ignore", divide="ignore"):
        corr = (
            float(np.corrcoef(cf, rf)[0, 1]) if finite and cf.size > 1 else float("nan")
        )
        sum_ref = float(np.abs(rf).sum())
        mean_rel_l1 = float(err.sum() / sum_ref) if sum_ref > 0 else float(err.sum())
    mismatches = int(np.count_nonzero(~np.isclose(cf, rf, rtol=rtol, atol=atol)))
    thresholds = dict(
        rtol=rtol,
        atol=atol,
        min_correlation=min_correlation,
        max_mismatch_pct=max_mismatch_pct,
        max_mean_rel_l1=max_mean_rel_l1,
    )
    res = CheckResult(
        corr, mismatches, cf.size, mean_rel_l1, float(err.max()), None, thresholds
    )
    if not finite:
        res.failures.append(
            f"{int(np.count_nonzero(~np.isfinite(cf)))} non-finite outputs"
        )
    # A constant reference (e.g. all zeros) has no correlation to speak of; the element checks decide.
    if cf.size > 1 and np.ptp(rf) > 0 and not corr >= min_correlation:
        res.failures.append(f"correlation {corr:.6f} < {min_correlation}")
    if res.mismatch_pct > max_mismatch_pct:
        res.failures.append(f"mismatch {res.mismatch_pct:.4f} % > {max_mismatch_pct} %")
    if not mean_rel_l1 <= max_mean_rel_l1:
        res.failures.append(f"mean rel L1 {mean_rel_l1:.3e} > {max_mean_rel_l1:g}")
    if exact:
        big = np.abs(rf) >= BF16_TINY
        rel = err[big] / np.abs(rf[big])
        res.max_rel_err = float(rel.max()) if rel.size else 0.0
        bad = int(np.count_nonzero(rel > BF16_REL_ROUNDING)) + int(
            np.count_nonzero(err[~big] > BF16_TINY)
        )
        if bad:
            res.failures.append(
                f"exact mode: {bad} elements off by more than bf16 rounding"
            )
    return res


def explain_failure(
    res: CheckResult, c: np.ndarray, a: np.ndarray, w: AwqWeights, **check_args
) -> CheckResult:
    """Add the causes of a failed check that the operands explain: A's values the kernel's bfp16 blocks
    cannot hold. When C passes against the reference computed from A as the kernel rounds it, the
    failure is A's dynamic range (or subnormals), not the kernel, and the cause says so.
    """
    if res.passed:
        return res
    loss = bfp16_loss(a)
    lines = loss.lines()
    if not lines:
        return res
    as_rounded = check(
        c,
        np.asarray(bfp16_blocks(a) @ dequantize(w).astype(np.float64), np.float32),
        **check_args,
    )
    if as_rounded.passed:
        lines.append(
            f"C matches the reference computed from A as the bfp16 blocks hold it (max abs error "
            f"{as_rounded.max_abs_err:.3g}): the failure is what the conversion drops, not the GEMM"
        )
    res.causes.extend(lines)
    return res
