"""Plots, load_results, `fabricsim plot`, `fabricsim report` and `run --report`."""
from __future__ import annotations

import base64
from html.parser import HTMLParser

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from click.testing import CliRunner  # noqa: E402

from fabricsim.analysis import plots  # noqa: E402
from fabricsim.analysis.load import load_results  # noqa: E402
from fabricsim.analysis.report import write_report  # noqa: E402
from fabricsim.cli import main  # noqa: E402

from conftest import BASE_SCENARIO  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def results_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("plots")
    (d / "scenario.yaml").write_text(BASE_SCENARIO)
    out = d / "res"
    r = CliRunner().invoke(main, ["run", str(d / "scenario.yaml"), "-o", str(out), "-q", "--report"])
    assert r.exit_code == 0, r.output
    return out


@pytest.fixture(scope="module")
def result(results_dir):
    return load_results(results_dir)


def _check_axes(ax):
    assert ax.get_xlabel() and ax.get_ylabel()
    assert ax.lines or ax.patches or ax.collections or ax.images
    plt.close(ax.figure)


def test_load_results_round_trips_messages(results_dir, result):
    written = pd.read_parquet(results_dir / "messages.parquet")
    pd.testing.assert_frame_equal(result.messages, written)
    assert len(result.messages) == 4 and result.messages["completed"].all()
    assert result.summary["scenario"] == "t"
    assert result.scenario["name"] == "t"
    assert len(result.links) and len(result.latency) and len(result.goodput)


def test_plot_functions_return_labelled_axes(result):
    _check_axes(plots.plot_fct_cdf(result.messages))
    _check_axes(plots.plot_fct_cdf({"ecmp": result.messages, "again": result}))
    ax = plots.plot_latency_cdf(result.latency, summary=result.summary)
    assert any("p99.9" in (t.get_text()) for t in ax.get_legend().get_texts())
    _check_axes(ax)
    _check_axes(plots.plot_latency_cdf(result.latency))  # percentiles from the histogram
    _check_axes(plots.plot_goodput(result.goodput))
    _check_axes(plots.plot_link_utilisation(result.links))
    tidy = pd.DataFrame({"policy": ["ecmp", "ecmp", "spray"], "goodput_fraction": [0.5, 0.6, 0.9],
                         "completion_time_ratio": [0.4, 0.5, 0.8]})
    _check_axes(plots.plot_effective_bandwidth(tidy))
    coll = pd.DataFrame({"op": ["a2a_0", "a2a_1"], "time_ps": pd.array([2_000_000, None], dtype="Int64")})
    _check_axes(plots.plot_collectives(coll))
    fig, ax = plt.subplots()
    assert plots.plot_goodput(result, ax=ax) is ax
    plt.close(fig)


def test_histogram_percentile_matches_summary(result):
    for key, q in (("p50_ps", 50), ("p99_ps", 99), ("p999_ps", 99.9)):
        assert plots.histogram_percentile(result.latency, q) == pytest.approx(result.summary["packet_latency"][key])


def test_plot_command_writes_pngs(results_dir):
    r = CliRunner().invoke(main, ["plot", str(results_dir)])
    assert r.exit_code == 0, r.output
    pngs = sorted((results_dir / "plots").glob("*.png"))
    names = {p.stem for p in pngs}
    assert {"fct_cdf", "latency_cdf", "goodput", "link_utilisation"} <= names
    for p in pngs:
        assert p.read_bytes()[:8] == PNG_MAGIC


def test_plot_command_on_missing_folder_exits_2(tmp_path):
    r = CliRunner().invoke(main, ["plot", str(tmp_path / "nope")])
    assert r.exit_code == 2


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.imgs, self.refs, self.tags = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        a = dict(attrs)
        if tag == "img":
            self.imgs.append(a.get("src"))
        for k in ("src", "href"):
            if a.get(k) is not None:
                self.refs.append(a[k])


def _check_report(path):
    text = path.read_text(encoding="utf-8")
    p = _Collect()
    p.feed(text)
    p.close()
    assert "script" not in p.tags and "link" not in p.tags
    assert len(p.imgs) >= 4
    for src in p.imgs:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1], validate=True)[:8] == PNG_MAGIC
    for ref in p.refs:
        assert "http://" not in ref and "https://" not in ref
    assert "goodput_fraction" in text and "Definitions" in text and "leaf_spine" in text
    return text


def test_run_report_writes_self_contained_html(results_dir):
    _check_report(results_dir / "report.html")


def test_report_command_and_api(results_dir, result, tmp_path):
    out = tmp_path / "r.html"
    r = CliRunner().invoke(main, ["report", str(results_dir), "-o", str(out)])
    assert r.exit_code == 0, r.output
    _check_report(out)
    _check_report(write_report(result, tmp_path / "api.html"))
    _check_report(write_report(str(results_dir), tmp_path / "dir.html"))
