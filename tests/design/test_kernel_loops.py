# SPDX-License-Identifier: MIT
"""The per-loop check (issue 52): the table is produced and carries the published figures."""

from int4awq.design import kernel_cost as kc

# The figures as their sources publish them: mlir-aie PR #3650's mm_bfp_mixed.cc head comments
# (ResMII=68 and II=77 at 52bf74a; II=42 and II=41 in two other versions of the file) and the bundle table in
# mlir-air's programming_examples/fused_decode/kernels/q4_k.h (modes 0 / 1 / chess: 355 / 140 / 142).
PUBLISHED = [("ResMII", 68), ("II", 77), ("II", 42), ("II", 41)] + [
    ("bundles", 355),
    ("bundles", 140),
    ("bundles", 142),
]


def test_published_figures_are_the_cited_ones():
    assert [(lp.figure, lp.value) for lp in kc.PUBLISHED_LOOPS] == PUBLISHED
    sch = {s.ii: s for s in kc.load_schedules()}
    assert sch[77].res_mii == 68  # the calibration file records the same loop


def test_loops_table_is_printed(capsys):
    assert kc.main(["--loops"]) == 0
    out = capsys.readouterr().out
    for figure, value in PUBLISHED:
        assert f"{figure} {value}:" in out
    assert "within 20 %" in out


def test_loop_check_leaves_the_fit_alone():
    rows = kc.published_loops()
    assert len(rows) == len(PUBLISHED)
    cal = kc.calibration()
    # the 64-mmul loop is priced as the fitted schedule row is
    ii77 = next(m for lp, m, _ in rows if lp.value == 77)
    assert abs(ii77 - cal.schedules[0].model_ii(cal.constants)) < 1e-9
    # the 32-mmul loops: host-profiled, the MAC slot busiest
    for lp, _, _ in rows:
        if lp.value in (41, 42):
            assert lp.res_mii() == 32
