# SPDX-License-Identifier: MIT
"""host/bench.py's command line: bad input is one line and exit 2, checked before the rows run."""

import pytest

from host import bench


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


def test_modelled_table_is_written(capsys, tmp_path):
    code, out, err = run(capsys, "--modelled", "--csv", str(tmp_path / "b.csv"))
    assert code == 0, out + err
    import csv

    text = (tmp_path / "b.csv").read_text()
    assert text.startswith("projection,format,m,k,n,config")
    rows = list(csv.DictReader(text.splitlines()))
    # every prefill row and every decode row once per format: AWQ, then AWQ_F16 and MXFP4 beside it
    fmts = ["awq", "awq_f16", "mxfp4"]
    assert [r["format"] for r in rows[:6]] == fmts * 2
    shapes = [
        {(r["projection"], r["m"]) for r in rows if r["format"] == f} for f in fmts
    ]
    assert shapes[0] == shapes[1] == shapes[2]
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
