"""Plots, results folders and the report say what the numbers are (issue 13): the backend is left
alone, every table round-trips, the NIC goodput fraction means NIC line rate, units, intervals,
titles, link saturation over time, readable ticks, labelled bars and a verdict line."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

import fabricsim
from fabricsim.analysis import plots
from fabricsim.analysis.load import _TABLES, load_results
from fabricsim.analysis.report import _fmt_value, render_report, verdict
from fabricsim.analysis.writer import TABLES
from fabricsim.units import format_time

REPO = Path(__file__).resolve().parent.parent

SMALL = {"name": "trust", "topology": {"kind": "leaf_spine", "hosts_per_leaf": 2, "leaves": 2, "spines": 2},
         "traffic": {"pattern": "permutation", "message_size": "256KiB"}, "routing": {"policy": "ecmp"},
         "simulation": {"seed": 7, "time_limit": "1ms"}, "outputs": {"link_sample_interval": "1us"}}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("trust") / "res"
    return fabricsim.run(SMALL, output_dir=out), out


def _ax():
    return Figure(figsize=(7, 4.2)).add_subplot()


# ------------------------------------------------------------------ 1. the backend is left alone

def test_importing_and_writing_plots_leaves_the_matplotlib_backend_alone(tmp_path):
    """A notebook's figures vanished once fabricsim.plot_* had switched the backend to Agg."""
    code = f"""
import matplotlib, json
import fabricsim
from fabricsim.analysis import plots
from fabricsim.topology import draw
from fabricsim.analysis.report import write_report
import matplotlib.pyplot as plt
r = fabricsim.run({SMALL!r}, output_dir={str(tmp_path / 'res')!r})
written = plots.write_plots(r, {str(tmp_path / 'png')!r})
write_report(r)
print(json.dumps({{"backend": matplotlib.get_backend(), "pyplot_figures": plt.get_fignums(),
                   "written": len(written)}}))
"""
    env = dict(os.environ, MPLBACKEND="svg", PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["backend"] == "svg"
    assert got["pyplot_figures"] == []          # report / write_plots figures are not pyplot's
    assert got["written"] >= 6
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in (tmp_path / "png").glob("*.png"))


def test_draw_topology_leaves_the_backend_alone(tmp_path):
    code = f"""
import matplotlib, json
import matplotlib.pyplot as plt
from fabricsim.topology import load_topology_or_scenario
from fabricsim.topology.draw import draw_topology
draw_topology(load_topology_or_scenario({str(REPO / 'topologies/cluster_small_draw.yaml')!r}), {str(tmp_path / 't.png')!r})
print(json.dumps({{"backend": matplotlib.get_backend(), "pyplot_figures": plt.get_fignums()}}))
"""
    env = dict(os.environ, MPLBACKEND="svg", PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"backend": "svg", "pyplot_figures": []}
    assert (tmp_path / "t.png").read_bytes()[:4] == b"\x89PNG"


# ------------------------------------------------------------------ 2. every table round-trips

def test_load_results_reads_every_table_the_writer_writes(written):
    res, out = written
    assert set(_TABLES.values()) == set(TABLES)
    loaded = load_results(out)
    assert len(res.link_timeseries) and len(res.nics)
    for attr, stem in _TABLES.items():
        on_disk = out / f"{stem}.parquet"
        if not on_disk.exists():
            assert not len(getattr(res, attr))
            continue
        pd.testing.assert_frame_equal(getattr(loaded, attr), pd.read_parquet(on_disk))
        assert len(getattr(loaded, attr)) == len(getattr(res, attr)), attr
    # `fabricsim plot DIR` draws what `run --report` draws
    assert set(plots.figures(loaded)) == set(plots.figures(res))
    assert {"link_heatmap", "link_utilisation_timeseries"} <= set(plots.figures(loaded))


def test_plot_command_writes_every_figure_run_report_draws(written, tmp_path):
    from click.testing import CliRunner

    from fabricsim.cli import main
    res, out = written
    r = CliRunner().invoke(main, ["plot", str(out)])
    assert r.exit_code == 0, r.output
    assert {p.stem for p in (out / "plots").glob("*.png")} == set(plots.figures(res))


# ------------------------------------------------------------------ 3. goodput fraction of NIC line rate

def test_nic_goodput_fraction_on_an_nvlink_cluster_is_against_the_nic_line_rate(tmp_path):
    """GPU 0 -> GPU 8 leaves node 0 by its one 400G NIC; GPU 1 -> GPU 2 stays on NVLink
    (2 links of 3.6 Tbit/s to the node's NVLink switches)."""
    p = tmp_path / "m.csv"
    p.write_text("src,dst,size_bytes\n0,8,1048576\n1,2,1048576\n")
    sc = {"name": "nvmix", "topology": {"kind": "cluster", "domain": "hgx8", "nodes": 2,
                                        "nic": {"ports": 1, "rate": "400Gbps"}},
          "traffic": {"pattern": "csv", "path": str(p)}, "routing": {"policy": "ecmp"},
          "simulation": {"seed": 1, "time_limit": "5ms"}}
    res = fabricsim.run(sc)
    eb, dur = res.summary["effective_bandwidth"], res.summary["pattern"]["duration_ps"]
    nv = res.links[(res.links["src"] == 1) & (res.links["kind"] == "nvlink")]["rate_bps"]
    assert eb["nic_capacity_bps"] == 400 * 10**9
    assert eb["sender_capacity_bps"] == 400 * 10**9 + int(nv.sum())
    # only the 1 MiB that crossed the NIC counts, over the pattern's duration, against 400G
    want = 2**20 * 8 * 1e12 / dur / 400e9
    assert eb["nic_goodput_fraction"] == pytest.approx(want, rel=1e-12)
    assert 0.9 < eb["nic_goodput_fraction"] <= 1.0
    assert eb["goodput_fraction"] == pytest.approx(2 * 2**20 * 8 * 1e12 / dur / eb["sender_capacity_bps"])
    assert eb["goodput_fraction"] < 0.2          # the NVLink ports dwarf the NIC: a different figure
    assert "of NIC line rate" in verdict(res.summary)
    assert f"{100 * want:.0f}% of NIC line rate" in verdict(res.summary)


def test_without_nvlink_the_two_fractions_agree(written):
    eb = written[0].summary["effective_bandwidth"]
    assert eb["nic_capacity_bps"] == eb["sender_capacity_bps"]
    assert eb["nic_goodput_fraction"] == pytest.approx(eb["goodput_fraction"])


# ------------------------------------------------------------------ 4. units, intervals, titles, ...

def test_rates_per_second_are_not_printed_as_seconds():
    assert _fmt_value("events_per_s", 140251.646) == "140,252 /s"
    assert _fmt_value("packet_hops_per_s", 2.5e6) == "2,500,000 /s"
    assert _fmt_value("wall_time_s", 1.5) == "1.500 s"


def test_effective_bandwidth_error_bars_are_the_95_percent_interval_of_compare_summarize():
    from fabricsim.compare import summarize
    df = pd.DataFrame({"policy": ["a"] * 3 + ["b"] * 4, "seed": [1, 2, 3, 1, 2, 3, 4],
                       "goodput_fraction": [0.5, 0.6, 0.7, 0.8, 0.82, 0.9, 0.7],
                       "completion_time_ratio": [0.4, 0.5, 0.45, 0.9, 0.95, 0.99, 0.8]})
    ax = plots.plot_effective_bandwidth(df, ax=_ax())
    s = summarize(df, by=["policy"])
    bars = [c for c in ax.containers if hasattr(c, "errorbar") and c.errorbar is not None]
    assert len(bars) == 2
    for container, metric in zip(bars, ("goodput_fraction", "completion_time_ratio")):
        segs = container.errorbar.lines[2][0].get_segments()
        half = [abs(seg[1][1] - seg[0][1]) / 2 for seg in segs]
        np.testing.assert_allclose(half, s[f"{metric}_ci95"].to_numpy(), rtol=1e-9)
    assert "95 % CI" in ax.get_legend().get_title().get_text()


def test_every_figure_names_scenario_policy_and_seed(written):
    res, _ = written
    figs = plots.figures(res)
    assert len(figs) >= 6
    for name, fig in figs.items():
        text = fig._suptitle.get_text()
        assert "trust" in text and "ecmp" in text and "seed 7" in text, name
    ax = plots.plot_fct_cdf(res, ax=_ax())
    assert "seed 7" in ax.get_title() and "ecmp" in ax.get_title()


def test_link_utilisation_over_time_shows_a_saturated_period_the_average_hides():
    links = pd.DataFrame({"link_id": [0, 1], "src": [0, 1], "dst": [2, 2], "src_name": ["a", "b"],
                          "dst_name": ["x", "x"], "kind": ["host-leaf"] * 2, "tx_bytes": [100, 50],
                          "utilisation": [0.1, 0.05], "peak_queue_bytes": [0, 0]})
    bins = np.arange(10) * 1_000_000
    lt = pd.DataFrame({"link_id": np.repeat([0, 1], 10), "bin_start_ps": np.tile(bins, 2),
                       "bin_end_ps": np.tile(bins + 1_000_000, 2),
                       "utilisation": [1.0] + [0.0] * 9 + [0.05] * 10, "tx_bytes": 0, "queue_bytes": 0})
    ax = plots.plot_link_utilisation_timeseries(lt, links, ax=_ax())
    first = ax.patches[0]           # the busiest link first: 100 % in its first microsecond
    assert "a->x" in ax.get_legend().get_texts()[0].get_text()
    assert "peak 100 %" in ax.get_legend().get_texts()[0].get_text()
    assert max(first.get_data().values) == pytest.approx(100)
    # the bar chart marks each link's busiest interval next to its run average
    ax = plots.plot_link_utilisation(links, ax=_ax(), link_timeseries=lt)
    peaks = np.concatenate([c.get_offsets()[:, 1] for c in ax.collections])
    assert peaks.max() == pytest.approx(100)
    assert "averaged over the run" in ax.get_title()


def _overlaps(ax):
    fig = ax.figure
    fig.canvas.draw() if fig.canvas is not None else None
    r = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(r) for t in ax.get_xticklabels(minor=False) + ax.get_xticklabels(minor=True)
             if t.get_visible() and t.get_text() and ax.get_xlim()[0] <= t.get_position()[0] <= ax.get_xlim()[1]]
    return [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:] if a.overlaps(b)]


@pytest.mark.parametrize("lo_us,hi_us", [(0.5, 2000.0), (1.0, 30.0), (2.0, 9.0)])
def test_latency_tick_labels_do_not_collide(lo_us, hi_us):
    edges = np.geomspace(lo_us * 1e6, hi_us * 1e6, 40)
    lat = pd.DataFrame({"lower_ps": edges[:-1], "upper_ps": edges[1:],
                        "cumulative_fraction": np.linspace(1 / 39, 1, 39)})
    fig = Figure(figsize=(7, 4.2))
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    FigureCanvasAgg(fig)
    ax = plots.plot_latency_cdf(lat, summary={}, ax=fig.add_subplot())
    assert not _overlaps(ax)
    assert sum(1 for t in ax.get_xticklabels() + ax.get_xticklabels(minor=True) if t.get_text()) >= 2


def test_collective_bars_are_labelled():
    c = pd.DataFrame({"op": ["0", "1", "2"], "collective": ["all_to_all"] * 3, "phase": ["dispatch", "combine", "dispatch"],
                      "time_ps": [2_000_000, 3_500_000, None], "ideal_time_ps": [1_000_000, 1_500_000, 1_000_000]})
    ax = plots.plot_collectives(c, ax=_ax())
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert sorted(legend) == ["completion time", "ideal (lower bound)", "incomplete"]
    values = [t.get_text() for t in ax.texts]
    assert values == ["2", "3.5"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0\nall_to_all\ndispatch", "1\nall_to_all\ncombine",
                                                             "2\nall_to_all\ndispatch"]


def test_report_has_a_verdict_computed_from_the_summary(written):
    res, _ = written
    s = res.summary
    v = verdict(s)
    frac = s["effective_bandwidth"]["nic_goodput_fraction"]
    assert v.startswith(f"completed in {format_time(s['pattern']['duration_ps'])} at {100 * frac:.0f}% of NIC line rate")
    over = s["slowdown"]["messages_over_4x"]
    assert ("no message slowed > 4x" in v) if over == 0 else (f"{over} victim" in v)
    html = render_report(res)
    assert "Verdict:" in html and v.split(";")[0] in html
    # an incomplete run says so first
    bad = json.loads(json.dumps(s))
    bad["run"]["status"] = "time_limit"
    bad["messages"]["completed"] = 1
    bad["pattern"]["duration_ps"] = None
    assert verdict(bad).startswith("did NOT complete (time_limit): 1 of 4 messages finished")
