"""The cross-run HTML report of a fabricsim.compare table (analysis/report.py write_compare_report)."""
from __future__ import annotations

import base64
import re

import pandas as pd
import pytest

import fabricsim
from fabricsim.analysis.report import compare_verdict, write_compare_report


def _table(status=True):
    df = pd.DataFrame({
        "routing": ["ecmp"] * 3 + ["adaptive"] * 3,
        "seed": [1, 2, 3, 1, 2, 3],
        "goodput_fraction": [0.30, 0.40, 0.35, 0.70, 0.80, 0.05],
        "completion_time_ratio": [0.40, 0.50, 0.45, 0.90, 0.94, 0.01],
        "fct_max_us": [100.0, 80.0, 90.0, 44.0, 42.0, 5000.0],
        "completed": [16] * 5 + [3], "messages": [16] * 6,
    })
    if status:
        df["status"] = ["complete"] * 5 + ["time_limit"]
    df.attrs["identity"] = ["routing"]
    return df


@pytest.mark.parametrize("status", [True, False], ids=["with_status", "without_status"])
def test_verdict_names_fastest_and_slowest_from_the_complete_runs(status):
    df = _table(status)
    # by hand: ecmp mean 0.45; adaptive over its two complete runs 0.92 (the time_limit run's 0.01 is out)
    v = compare_verdict(df)
    assert v.startswith(f"adaptive completes {0.92 / 0.45:.2f}x sooner than ecmp relative to the ideal")
    assert "0.92 vs 0.45" in v and "means over 2 and 3 complete runs" in v
    assert "1 run not complete, left out of the means" in v
    v = compare_verdict(df, metric="fct_max_us")
    assert v.startswith(f"adaptive is {90.0 / 43.0:.2f}x faster than ecmp by fct_max_us")


def test_compare_report_flags_incomplete_runs_and_embeds_its_figure(tmp_path):
    df = _table()
    out = write_compare_report(df, tmp_path / "c" / "compare.html", title="perm: routing")
    text = out.read_text()
    assert "<title>perm: routing</title>" in text
    assert compare_verdict(df) in text.replace("&#x27;", "'")
    assert "time_limit (excluded)" in text
    assert len(re.findall(r'<tr class="flag">', text)) == 2          # the run and its variant's summary row
    assert "2 / 3" in text and "3 / 3" in text
    assert "0.92 ±" in text                                           # adaptive's mean over complete runs
    uris = re.findall(r'src="data:image/png;base64,([^"]+)"', text)
    assert len(uris) == 1 and base64.b64decode(uris[0])[:4] == b"\x89PNG"
    assert "95 % confidence interval" in text
    assert "http://" not in text and "https://" not in text
    assert not list(tmp_path.glob("c/*.tmp"))


def test_a_variant_with_no_complete_run_is_named():
    df = _table()
    df.loc[df["routing"] == "ecmp", "status"] = "stalled"
    v = compare_verdict(df)
    assert v.startswith("only adaptive to compare") and "no complete run of ecmp" in v
    assert compare_verdict(df.assign(status="stalled")).startswith("no complete run")


def test_compare_report_of_a_real_compare_table(tmp_path):
    sc = {"name": "cmp", "topology": {"kind": "leaf_spine", "hosts_per_leaf": 2, "leaves": 2, "spines": 2},
          "traffic": {"pattern": "permutation", "message_size": "64KiB"}}
    df = fabricsim.compare(sc, vary={"routing": ["ecmp", "spray"]}, seeds=2)
    text = write_compare_report(df, tmp_path / "r.html").read_text()
    assert "Verdict:" in text and ("ecmp" in text and "spray" in text)
    means = df.groupby("routing")["completion_time_ratio"].mean()
    best, worst = means.idxmax(), means.idxmin()
    if means.max() > means.min():
        assert compare_verdict(df).startswith(f"{best} completes {means.max() / means.min():.2f}x sooner than {worst}")
