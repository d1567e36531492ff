"""plot_reorder_distance and its reorder_distance.png in `fabricsim plot`."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from click.testing import CliRunner  # noqa: E402

import fabricsim  # noqa: E402
from fabricsim.analysis import plots  # noqa: E402
from fabricsim.cli import main  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def spray_scenario(routing: str = "spray") -> dict:
    return {
        "name": f"reorder_{routing}",
        "topology": {"kind": "leaf_spine", "hosts_per_leaf": 4, "leaves": 2, "spines": 4,
                     "host_link": {"rate": "400Gbps", "delay": "500ns"},
                     "fabric_link": {"rate": "400Gbps", "delay": "500ns"}, "switch_latency": "600ns"},
        "traffic": {"pattern": "permutation", "locality": "cross_leaf", "message_size": "256KiB",
                    "qps_per_message": 1},
        "routing": {"policy": routing},
        "simulation": {"seed": 1, "time_limit": "10ms"},
    }


@pytest.fixture(scope="module")
def spray_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("reorder") / "spray"
    res = fabricsim.run(spray_scenario(), output_dir=out)
    return out, res


def test_spray_run_reorders(spray_dir):
    _, res = spray_dir
    m = res.messages
    assert m["completed"].astype(bool).all()
    # spraying 8 hosts' packets over 4 spines reorders some of them
    assert (m["out_of_order_fraction"] > 0).any()
    assert m["reorder_distance_max_packets"].max() > 0


def test_plot_reorder_distance_bars_per_receiver(spray_dir):
    _, res = spray_dir
    m = res.messages
    ax = plots.plot_reorder_distance(res)
    # one group per receiving host, three bars (p50, p99, max) each
    groups = m["dst"].nunique()
    assert len(ax.patches) == 3 * groups
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "p50 (mean over messages)", "p99 (mean over messages)", "max"]
    heights = [p.get_height() for p in ax.patches]
    assert max(heights) == pytest.approx(float(m["reorder_distance_max_packets"].max()))
    assert ax.get_ylabel() == "reorder distance (packets)"
    plt.close(ax.figure)


def test_plot_reorder_distance_labelled_runs(spray_dir):
    _, spray = spray_dir
    ecmp = fabricsim.run(spray_scenario("ecmp"))
    both = pd.concat([spray.messages.assign(label="spray"), ecmp.messages.assign(label="ecmp")],
                     ignore_index=True)
    fig, ax = plt.subplots()
    assert plots.plot_reorder_distance(both, ax=ax) is ax
    assert len(ax.patches) == 3 * 2
    assert [t.get_text() for t in ax.get_xticklabels()] == ["spray", "ecmp"]
    # ECMP keeps each queue pair on one path: nothing out of order, all its bars are zero
    spray_max, ecmp_max = ax.patches[4].get_height(), ax.patches[5].get_height()
    assert spray_max > 0 and ecmp_max == 0
    # a dict name -> Result gives the same groups
    ax2 = plots.plot_reorder_distance({"spray": spray, "ecmp": ecmp})
    assert [t.get_text() for t in ax2.get_xticklabels()] == ["spray", "ecmp"]
    plt.close("all")


def test_plot_reorder_distance_without_transport_columns():
    ax = plots.plot_reorder_distance(pd.DataFrame({"dst": [1], "fct_ps": [5]}))
    assert len(ax.patches) == 0
    plt.close(ax.figure)


def test_exported():
    assert fabricsim.plot_reorder_distance is plots.plot_reorder_distance


def test_fabricsim_plot_writes_reorder_png(spray_dir):
    out, _ = spray_dir
    r = CliRunner().invoke(main, ["plot", str(out)])
    assert r.exit_code == 0, r.output
    png = out / "plots" / "reorder_distance.png"
    assert str(png) in r.output
    assert png.read_bytes()[:8] == PNG_MAGIC


def test_in_order_run_has_no_reorder_png(tmp_path):
    out = tmp_path / "ecmp"
    fabricsim.run(spray_scenario("ecmp"), output_dir=out)
    r = CliRunner().invoke(main, ["plot", str(out)])
    assert r.exit_code == 0, r.output
    assert not (out / "plots" / "reorder_distance.png").exists()
