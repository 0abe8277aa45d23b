# SPDX-License-Identifier: MIT
"""host/bench.py's command line: bad input is one line and exit 2, checked before the rows run."""

import contextlib
import csv
import io
import re
import sys

import pytest

from host import bench
from int4awq.errors import ConfigError
from int4awq.design import gemv, model, sweep
from int4awq.design.kernel_cost import int4_kernel_flops
from int4awq.design.llama import FUSED, FUSED_DISPATCHES


def run(capsys, *argv):
    code = bench.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    "make_args, message",
    [
        (lambda tmp: ["--csv", str(tmp)], "is a directory"),
        (lambda tmp: ["--csv", str(tmp / "file" / "b.csv")], "cannot write"),
        (lambda tmp: ["--iters", "0"], "need iters >= 1"),
        (
            lambda tmp: ["--iters", "x"],
            "argument --iters: invalid int value: 'x' (see --help)",
        ),
    ],
    ids=["csv-is-a-directory", "csv-below-a-file", "iters-0", "iters-not-a-number"],
)
def test_bad_input_is_one_line_before_any_row(
    capsys, monkeypatch, tmp_path, make_args, message
):
    (tmp_path / "file").write_text("x")
    monkeypatch.setattr(
        bench,
        "default_config",
        lambda *a: pytest.fail("a row ran before the input was checked"),
    )
    code, out, err = run(capsys, "--modelled", *make_args(tmp_path))
    assert code == 2 and message in err, out + err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.fixture(scope="module")
def modelled(tmp_path_factory):
    """One --modelled run shared by the tests that read its table, CSV and plot (a few seconds each)."""
    path = tmp_path_factory.mktemp("bench") / "b.csv"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = bench.main(["--modelled", "--csv", str(path)])
    return code, out.getvalue(), err.getvalue(), path


@pytest.mark.slow
def test_modelled_table_is_written(modelled):
    code, out, err, path = modelled
    assert code == 0, out + err
    text = path.read_text()
    assert text.startswith("projection,format,m,k,n,config")
    rows = list(csv.DictReader(text.splitlines()))
    # every prefill row and every decode row once per format: AWQ, then the others beside it
    fmts = [
        "awq",
        "awq_f16",
        "int4_min",
        "int4_min_bf16",
        "int8",
        "int8_triple",
        "int8_min",
    ]
    fmts += ["int8_min_bf16", "mxfp4"]
    assert [f for f, _ in sweep.TABLE_FORMATS] == fmts
    assert [r["format"] for r in rows[: 2 * len(fmts)]] == fmts * 2
    shapes = [
        {(r["projection"], r["m"]) for r in rows if r["format"] == f} for f in fmts
    ]
    assert all(s == shapes[0] for s in shapes)
    assert all(f"{f}: one token" in out for f in fmts)


def test_interrupt_exits_130(capsys, monkeypatch):
    def interrupted(*a):
        raise KeyboardInterrupt

    monkeypatch.setattr(bench, "load_table", interrupted)
    assert run(capsys, "--modelled")[0] == 130


def test_a_measured_row_carries_the_modelled_time_and_the_models_error():
    assert (
        bench.measured_source(100.0, 80e-6)
        == "measured; modelled 80.0 us, model error -20%"
    )
    assert (
        bench.measured_source(50.0, 60e-6)
        == "measured; modelled 60.0 us, model error +20%"
    )
    assert "modelled_us" in bench.COLUMNS


# Headings as a reader sees them: text columns start where their heading starts, numbers end where theirs ends.
# (">": a number column).
LEAD = ["projection", "format", ">M", ">K", ">N", "config", ">DDR MB", ">time us"]
PREFILL = LEAD + [">TOPS", "bound", "source"]
DECODE = LEAD + [">GB/s", ">DDR us", ">compute us", "bound", "source"]


def tables(out: str) -> list[tuple[str, list[str]]]:
    """(header, rows) of each table printed: a header line, then the lines that start with a projection."""
    found = []
    for line in out.splitlines():
        if line.startswith("projection "):
            found.append((line, []))
        elif found and line.split(" ", 1)[0] in {*sweep.LLAMA_PROJECTIONS, *FUSED}:
            found[-1][1].append(line)
    return found


def offsets(header: str, headings: list[str]) -> list[tuple[bool, int]]:
    """(right-aligned, offset) per heading: its end for a number column, its start for text."""
    out, at = [], 0
    for name in headings:
        right, name = name.startswith(">"), name.lstrip(">")
        start = header.index(f" {name}", at - 1) + 1 if at else header.index(name)
        at = start + len(name)
        out.append((right, at if right else start))
    return out


def test_the_tables_have_a_header_and_their_columns_align(modelled):
    code, out, err, _ = modelled
    found = tables(out)
    # per format, prefill: 4 row counts x 9 shapes (the 7 projections, qkv and gate_up fused); decode: 9
    formats = len(sweep.TABLE_FORMATS)
    assert [len(rows) for _, rows in found] == [36 * formats, 9 * formats], out
    for (header, rows), spec in zip(found, (PREFILL, DECODE)):
        assert " DDR MB " in header and " bound " in header
        for row in rows:
            if (
                "no legal" in row
            ):  # a shape the design refuses: its reason instead of figures
                continue
            # the units live in the header now, not in the rows
            assert " MB " not in row and " us " not in row, row
            padded = row + " "
            for right, at in offsets(header, spec):
                if right:  # a number ends under its heading's end
                    assert padded[at] == " " and padded[at - 1] != " ", (header, row)
                else:  # text starts under its heading's start
                    assert padded[at] != " " and (at == 0 or padded[at - 1] == " "), (
                        header,
                        row,
                    )


def model_times(r: dict, gs: dict) -> tuple[float, float]:
    """(DDR s, compute s) of a CSV row from the model's own functions, not from bench's figures."""
    m, k, n, fmt = int(r["m"]), int(r["k"]), int(r["n"]), r["format"]
    if m == 1:
        g = dict(sweep.TABLE_FORMATS)[fmt]
        est = gemv.modelled(gemv.default_config(1, k, n, g, fmt), 1, n)
        return est.ddr_s, est.compute_s
    cfg, _ = sweep.default_config(m, k, n, gs[(r["projection"], m, fmt)], fmt)
    ceiling = int4_kernel_flops(
        cfg.tile_m,
        cfg.tile_n,
        cfg.tile_k_l1,
        cfg.gs,
        cfg.herd_m * cfg.herd_n,
        fmt,
        k=cfg.k,  # each call's share of its tile's zero and drain
    )
    return cfg.ddr_bytes() / model.DDR_BYTES_PER_S, 2 * cfg.m * cfg.k * cfg.n / ceiling


def test_the_bound_is_the_largest_of_the_models_times(modelled):
    code, out, err, path = modelled
    gs = {
        (e["projection"], e["m"], e.get("format", "awq")): e["gs"]
        for e in sweep.load_table()
    }
    rows = list(csv.DictReader(path.read_text().splitlines()))
    assert not [r for r in rows if r["source"].startswith("no legal")]
    # the fused gate and up (N = 16384) at M = 2048: more launch iterations than NPU2 lit tests run, as
    # llama32_1b_int4's prefill runs them, and said so
    beyond = [r for r in rows if "not lit-tested" in r["source"]]
    assert {(r["projection"], r["m"]) for r in beyond} == {("gate_up_proj", "2048")}
    assert all(
        r["source"]
        == "modelled; launch grid [4, 32]: llama32_1b_int4 prefill's, not lit-tested"
        for r in beyond
    )
    # the columns an earlier reader indexes by position come first; sim_us (make bench --sim) last
    assert list(rows[0])[-2:] == ["bound", "sim_us"] and all(r["bound"] for r in rows)
    assert all(r["sim_us"] == "" for r in rows)  # only --sim fills it
    for r in rows:
        t_ddr, t_compute = model_times(r, gs)
        us = float(r["us"])
        if us > (max(t_ddr, t_compute) + model.FIXED_S) * 1e6 + 0.05:
            # over the roofline: the compiled schedule's refill pipeline (issue 52) decides, named by
            # what its refills wait on, the calls (compute) or the fills (refill), never DDR
            assert r["bound"] in ("compute", "refill"), r
            continue
        assert r["bound"] == ("compute" if t_compute > t_ddr else "DDR"), r
    # the row: awq_f16 at q_proj, M = 2048 moves 54 MB yet its kernel time is the longer one
    (row,) = [
        r
        for r in rows
        if (r["projection"], r["format"], r["m"]) == ("q_proj", "awq_f16", "2048")
    ]
    t_ddr, t_compute = model_times(row, gs)
    assert t_compute > t_ddr and row["bound"] == "compute"
    assert (
        {"DDR", "compute"} <= {r["bound"] for r in rows} <= {"DDR", "compute", "refill"}
    )
    printed = [line for _, lines in tables(out) for line in lines]
    # the bound is the column before the source, which may run to several words
    assert [line.rsplit(" modelled", 1)[0].split()[-1] for line in printed] == [
        r["bound"] for r in rows
    ]


def test_the_roofline_plot_is_written_beside_the_csv(modelled):
    pytest.importorskip("matplotlib")
    code, out, err, path = modelled
    png = path.with_suffix(".png")
    assert f"wrote {png} (roofline, MODELLED)" in out
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_without_matplotlib_the_plot_is_skipped_in_one_line(
    capsys, monkeypatch, tmp_path
):
    monkeypatch.setitem(
        sys.modules, "matplotlib", None
    )  # import matplotlib now raises ImportError
    table = sweep.load_table()[
        :3
    ]  # three prefill rows keep it short; the decode rows still run
    monkeypatch.setattr(bench, "load_table", lambda: table)
    code, out, err = run(capsys, "--modelled", "--csv", str(tmp_path / "b.csv"))
    assert code == 0, out + err
    assert (tmp_path / "b.csv").is_file() and not (tmp_path / "b.png").exists()
    skipped = [line for line in out.splitlines() if "plot skipped" in line]
    assert len(skipped) == 1 and "matplotlib" in skipped[0], out
    assert "Traceback" not in out + err


def test_the_fused_decode_token_takes_four_dispatches_a_layer(modelled):
    """q, k and v as one GEMV and gate and up as one: 4 dispatches a layer, 64 a token, against 112; the
    token line's time is the sum of its four rows per layer, each with its fixed cost.
    """
    code, out, err, path = modelled
    rows = {
        (r["projection"], r["format"]): float(r["us"])
        for r in csv.DictReader(path.read_text().splitlines())
        if r["m"] == "1"
    }
    line = next(
        ln for ln in out.splitlines() if ln.startswith("awq: one token, 4 dispatches")
    )
    ms = float(re.search(r"layers \(MODELLED.*?\): ([0-9.]+) ms", line).group(1))
    want = 16 * sum(rows[(p, "awq")] for p in FUSED_DISPATCHES) / 1e3
    assert ms == pytest.approx(want, abs=0.01) and "64 launches" in line
    seven = next(
        ln for ln in out.splitlines() if ln.startswith("awq: one token, 7 projections")
    )
    assert ms < float(re.search(r"\): ([0-9.]+) ms", seven).group(1))


def test_the_records_bits_per_weight_are_printed_beside_what_the_weights_carry(
    modelled,
):
    """Issue 52: both records' bytes, as bits per weight, beside AWQ's 4 + 20 / GS (mlir-air's record 4 +
    24 / GS) and each GGUF type's own size (gguf's block bytes: Q6_K 210 per 256 values); no record holds
    less than its weights carry."""
    code, out, err, path = modelled
    lines = out.split("records at K = 2048, N = 2048")[1].splitlines()[1:]
    by_format = {ln.split()[0]: ln for ln in lines if ln.startswith("  ")}
    assert set(by_format) == {fmt for fmt, _ in sweep.TABLE_FORMATS}
    assert "AWQ g128 4.156 (mlir-air's record 4.188)" in by_format["awq"]
    assert "Q6_K 6.562" in by_format["int8_triple"]
    assert "MXFP4 4.250" in by_format["mxfp4"]
    for fmt, line in by_format.items():
        held = [float(x) for x in re.findall(r"\((?:M [0-9]+)\) ([0-9.]+)", line)]
        carried = [
            float(x)
            for x in re.findall(
                r"(?:g128|Q[0-9]_[0-9K]|IQ4_[A-Z]+|MXFP4) ([0-9.]+)", line
            )
        ]
        assert len(held) == 2 and carried, line
        assert min(held) >= min(carried), line


def test_sim_prints_every_format_at_2048_cubed_against_awq(
    capsys, monkeypatch, tmp_path
):
    """Issue 52: with --sim, a line per record format at q_proj, M = 2048 (its default configuration, the
    analytic and as-compiled times, the ratio to AWQ's against 1.3x, MODELLED); a format the shape refuses,
    its reason in one line. The simulator is stubbed (a time per format), the prefill table cut to the row.
    """
    import int4_packed_record

    name, m = bench.FORMATS_ROW
    table = [e for e in sweep.load_table() if (e["projection"], e["m"]) == (name, m)]
    monkeypatch.setattr(bench, "load_table", lambda: table)
    monkeypatch.setattr(bench.compiler, "tools_missing", lambda: None)
    sim = {"awq": 1000.0, "int4_min": 1300.0, "int8_triple": 1300.1}
    monkeypatch.setattr(bench, "simulated_us", lambda cfg: sim.get(cfg.format, 1100.0))
    real_default = bench.default_config

    def refusing(m, k, n, gs, fmt="awq"):
        if fmt == "int8_min":
            raise ConfigError(f"no legal {fmt} configuration for M={m} K={k} N={n}")
        return real_default(m, k, n, gs, fmt)

    monkeypatch.setattr(bench, "default_config", refusing)
    code, out, err = run(
        capsys, "--modelled", "--sim", "--csv", str(tmp_path / "b.csv")
    )
    assert code == 0, out + err
    lines = out.split(f"every format at {name}, M = {m} (K x N = 2048 x 2048)")[1]
    lines = lines.split("\n\n")[0].splitlines()
    assert "MODELLED" in lines[0] and "within 1.3x" in lines[0]
    assert lines[1] == bench.table_header(bench.FORMAT_TABLE)
    assert (
        lines[1].split()
        == "format config GS model us sim us sim/AWQ within 1.3x".split()
    )
    rows = {ln.split()[0]: ln for ln in lines[2:]}
    assert list(rows) == list(int4_packed_record.FORMATS)
    assert rows["int8_min"] == (
        f"{'int8_min':<13} no legal int8_min configuration for M=2048 K=2048 N=2048"
    )
    for fmt, line in rows.items():
        if fmt == "int8_min":
            continue
        cfg, _ = real_default(m, 2048, 2048, dict(sweep.TABLE_FORMATS)[fmt], fmt)
        model_us = bench.modelled(cfg, m, 2048).seconds * 1e6
        ratio = sim.get(fmt, 1100.0) / 1000.0
        assert line.split() == [
            fmt,
            *bench.config_text(cfg).split(),
            str(cfg.gs),
            f"{model_us:.1f}",
            f"{sim.get(fmt, 1100.0):.1f}",
            f"{ratio:.2f}",
            "yes," if ratio <= 1.3 else "no,",
            "MODELLED",
        ], line
    # 1.3x itself meets the target; just over it does not (the ratio prints as 1.30 either way)
    assert rows["int4_min"].endswith(" 1.30 yes, MODELLED")
    assert rows["int8_triple"].endswith(" 1.30 no, MODELLED")
    # and q_proj with A resident across 4 N blocks beside the proven row: the only row it simulates
    resident = out.split(f"{name}, M = {m}, with A resident across N blocks")[1]
    resident = resident.split("\n\n")[0].splitlines()
    assert "MODELLED" in resident[0] and "not run on NPU2" in resident[0]
    assert resident[1:] == [
        "  proven  64x128x32/256 h8x4: 52.95 MB DDR, 1000.0 us as compiled",
        "  novel   64x128x32/256 h8x4 n_per_segment 4: 27.79 MB DDR, 1000.0 us as compiled, "
        "17.18 TOPS",
    ]


def test_the_lm_head_line_is_the_gemv_at_the_padded_vocabulary():
    """Llama-3.2-1B's head: K 2048, N 128256 padded to whole launch iterations of 32 PEs x tile_n (63 of
    2048 columns at tile_n 64: 129024), the GEMV model's time and bytes for that configuration.
    """
    line = bench._head_line("awq", 128)
    cfg = gemv.default_config(1, 2048, 128256, 128, "awq")
    est = gemv.modelled(cfg, 1, 128256)
    assert cfg.n % (32 * cfg.tile_n) == 0 and 0 <= cfg.n - 128256 < 32 * cfg.tile_n
    assert line == (
        f"awq: LM head, MODELLED (K 2048, vocabulary 128256 padded to {cfg.n}; tile_n {cfg.tile_n}, "
        f"tile_k_l1 {cfg.tile_k_l1}): one dispatch, {est.seconds * 1e6:.1f} us, "
        f"{est.ddr_bytes / 1e6:.1f} MB of DDR, DDR-bound"
    )


def test_the_whole_token_line_counts_every_dispatch_at_1k_and_4k():
    """Llama-3.2-1B's token: the first module (layer 0's norm, q, k, v, RoPE and attention) + 15 chained
    modules (each ending with the next layer's, attention included) + the last layer's module with the head
    = 17 modules, 210 launches, in 4 dispatches of 4 layers (and one a module, and all in one, beside it);
    each attention launch and the value's copy before it priced by their DDR bytes inside the module (no
    dispatch of their own); at 1k and 4k context.
    """
    line = bench._whole_token_line(
        "awq", bench._mix("awq", 128)
    )  # makes an air package importable
    import o_gemv_ffn_int4 as builder

    from int4awq.design import gemv, layer

    chained = layer.modelled(
        layer.llama_layer(("awq",) * 3, (128,) * 3, next_qkv_format="awq")
    )
    last = layer.modelled(
        layer.llama_layer(("awq",) * 3, (128,) * 3, head_format="awq")
    )
    first = layer.modelled(
        layer.default_qkv(2048, ((3072, "awq", 128),), layer.LLAMA_ROPE)
    )
    # the first module is the chained one's tail: its norm, q, k, v GEMV and RoPE at the same times
    tail = dict(chained.launches)
    assert [n for n, _ in first.launches] == ["rms_norm", "qkv0", "rope_q", "rope_k"]
    assert dict(first.launches)["qkv0"] == tail["next_qkv0"]
    assert dict(first.launches)["rope_q"] == tail["rope_q"]
    # the attention's q buffer: per key/value head 4 query heads, its key and value, 32 slots of ctx
    assert builder.attention_ddr_bytes(32, 8, 64, 1024) == 2 * (
        8 * (4 * 64 + 2 * 64 + 32) + 2 * 1024 * 8 * 64 + 32 * 64
    )
    copy = max(
        2 * 2 * 8 * 64 / model.DDR_BYTES_PER_S,
        64 / 16 * layer.ELTWISE_OPS_PER_VECTOR / gemv.CLOCK_HZ,
    )
    # the online softmax holds one chunk in L1 at any context; the launch takes the longer of its DDR time
    # and its compute, a call of attn_step_bf16 a 32-position chunk at the kernel cost model's cycles
    from int4awq.design.kernel_cost import attention_step_cycles

    qkv = ((3072, "awq", 128),)
    for context in (1024, 4096):
        ddr = builder.attention_ddr_bytes(32, 8, 64, context) / model.DDR_BYTES_PER_S
        compute = context // 32 * attention_step_cycles(4, 64, 32) / gemv.CLOCK_HZ
        # the modules ending with the attention: the same launches, their RoPE one PE per key/value head
        # (8 a launch), then the value's copy and the attention
        fused = [
            layer.modelled(c)
            for c in (
                layer.default_qkv(2048, qkv, layer.LLAMA_ROPE, context),
                layer.default_layer(
                    2048,
                    8192,
                    ("awq",) * 3,
                    (128,) * 3,
                    qkv,
                    layer.LLAMA_ROPE,
                    context=context,
                ),
            )
        ]
        for plain, module in zip((first, chained), fused):
            times = dict(module.launches)
            assert [n for n, _ in module.launches] == [n for n, _ in plain.launches] + [
                "copy_v",
                "attention",
            ]
            assert times["attention"] == max(ddr, compute) and times["copy_v"] == copy
            assert all(
                t == dict(plain.launches)[n]
                for n, t in module.launches
                if n not in ("rope_q", "rope_k", "copy_v", "attention")
            )
        token = fused[0].seconds + 15 * fused[1].seconds + last.seconds
        # one dispatch: the 17 modules' launches, the dispatch's fixed cost once (launch boundaries free);
        # 4 dispatches of 4 layers: three fixed costs more
        one = token - 16 * model.FIXED_S + 209 * layer.LAUNCH_BOUNDARY_S
        four = one + 3 * model.FIXED_S
        assert (
            f"context {context}: 4 dispatches of 4 layers, {four * 1e3:.2f} ms = {1 / four:.1f} tok/s "
            f"(one a module, 17: {token * 1e3:.2f} ms; 1 dispatch, not compiled here: {one * 1e3:.2f} ms; "
            f"attention a layer: DDR {ddr * 1e6:.1f} us, compute {compute * 1e6:.1f} us; host <-> NPU "
            in line
        )
