"""The reference GEMM and the checks every run prints.

The reference is the AWQ definition C = A @ ((q - z) * s), accumulated in f64 (or f32 on request) with one
BLAS call, returned as f32 and as bf16 (round to nearest even). The checks compare a device or emulator
result against the f32 reference the way mlir-air's XRTRunner does (np.corrcoef, np.isclose with a
mismatch budget in percent) and add the figures a GEMM needs to be judged by.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from ml_dtypes import bfloat16, finfo

from .errors import ConfigError
from .quant import AwqWeights, dequantize

# bf16 keeps 8 significant bits: round-to-nearest moves a value by at most 2^-8 of itself.
BF16_REL_ROUNDING = 2.0**-8
BF16_TINY = float(finfo(bfloat16).tiny)


def check_activations(a: np.ndarray, k: int) -> None:
    if not isinstance(a, np.ndarray) or a.dtype != bfloat16 or a.ndim != 2:
        desc = f"dtype {getattr(a, 'dtype', type(a).__name__)} shape {getattr(a, 'shape', '?')}"
        raise ConfigError(f"A: {desc}, expected a 2-D bfloat16 array [M, K]")
    if a.shape[0] == 0:
        raise ConfigError("A: M = 0 rows; the GEMM needs at least one row")
    if a.shape[1] != k:
        raise ConfigError(f"A: K = {a.shape[1]} columns but the weights have K = {k} rows")
    if not np.isfinite(a.astype(np.float32)).all():
        raise ConfigError("A: contains NaN or Inf")


def reference_gemm(a: np.ndarray, w: AwqWeights, accumulate: type = np.float64) -> tuple[np.ndarray, np.ndarray]:
    """C = A @ dequant(W): (f32 [M, N], bf16 [M, N]). accumulate=np.float32 halves the time."""
    w.validate()
    check_activations(a, w.k)
    c = a.astype(accumulate) @ dequantize(w).astype(accumulate, copy=False)
    c32 = c.astype(np.float32)
    return c32, c32.astype(bfloat16)


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
            lines.append(f"max rel error   {self.max_rel_err:.3e}   (exact mode: max 2^-8 = {BF16_REL_ROUNDING:.3e})")
        lines += [f"failed: {f}" for f in self.failures]
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
        raise ConfigError(f"result shape {c.shape} differs from reference shape {ref.shape}")
    cf = c.astype(np.float64).ravel()
    rf = ref.astype(np.float64).ravel()
    if atol is None:
        atol = 0.05 * float(np.sqrt(np.mean(rf * rf)))
    finite = bool(np.isfinite(cf).all())
    err = np.abs(cf - rf)
    with np.errstate(invalid="ignore", divide="ignore"):
        corr = float(np.corrcoef(cf, rf)[0, 1]) if finite and cf.size > 1 else float("nan")
        sum_ref = float(np.abs(rf).sum())
        mean_rel_l1 = float(err.sum() / sum_ref) if sum_ref > 0 else float(err.sum())
    mismatches = int(np.count_nonzero(~np.isclose(cf, rf, rtol=rtol, atol=atol)))
    thresholds = dict(
        rtol=rtol, atol=atol, min_correlation=min_correlation,
        max_mismatch_pct=max_mismatch_pct, max_mean_rel_l1=max_mean_rel_l1,
    )
    res = CheckResult(corr, mismatches, cf.size, mean_rel_l1, float(err.max()), None, thresholds)
    if not finite:
        res.failures.append(f"{int(np.count_nonzero(~np.isfinite(cf)))} non-finite outputs")
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
        bad = int(np.count_nonzero(rel > BF16_REL_ROUNDING)) + int(np.count_nonzero(err[~big] > BF16_TINY))
        if bad:
            res.failures.append(f"exact mode: {bad} elements off by more than bf16 rounding")
    return res
