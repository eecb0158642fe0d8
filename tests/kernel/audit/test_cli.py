"""`privrl audit mechanism`: files written, never overwritten, bad options named by flag."""

from __future__ import annotations

import csv
import json

from privrl.main import main


def test_audit_mechanism_writes_its_table_and_plot(tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(["audit", "mechanism", "--mechanism", "broken-laplace", "--epsilon", "2",
               "--samples", "20000", "--no-progress", "--out", str(out)])
    assert rc == 0
    rows = list(csv.DictReader((out / "audit.csv").open()))
    assert [float(r["epsilon_claimed"]) for r in rows] == [2.0]
    assert rows[0]["violated"] == "1"  # half the noise (true ε = 4): refuted
    record = json.loads((out / "audit.json").read_text())
    assert record["settings"]["samples"] == 20000 and len(record["results"]) == 1
    assert (out / "plots" / "audit.png").stat().st_size > 0
    assert "broken-laplace-half-noise" in (out / "audit.md").read_text()
    # never overwritten
    assert main(["audit", "mechanism", "--out", str(out), "--no-progress"]) == 2
    assert "never overwritten" in capsys.readouterr().err


def test_bad_options_name_their_flag(tmp_path, capsys):
    for args, flag in [(["--epsilon", "1,0"], "--epsilon"), (["--confidence", "1.5"],
                       "--confidence"), (["--mechanism", "gaussian-sum",
                                          "--sampling-probability", "0"],
                                         "--sampling-probability")]:
        rc = main(["audit", "mechanism", *args, "--out", str(tmp_path / "r"), "--no-progress"])
        assert rc == 2
        assert f"error: {flag}:" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
