"""Periodic link samples: per-interval bytes, utilisation and queues."""
from __future__ import annotations

import matplotlib
import pandas as pd

import fabricsim
from fabricsim.analysis.plots import plot_link_heatmap, plot_queue_timeseries

matplotlib.use("Agg")

SC = {"name": "lt", "topology": {"hosts_per_leaf": 4, "leaves": 2, "spines": 2},
      "traffic": {"pattern": "permutation", "locality": "cross_leaf", "message_size": "1MiB"},
      "outputs": {"link_sample_interval": "5us"}}


def test_intervals_add_up_to_the_links_table_and_stay_within_line_rate():
    res = fabricsim.run(SC)
    lt = res.link_timeseries
    assert len(lt) > 0
    # the run ends with the last message's completion: the ACKs still on the wire then are in the
    # links table (counted when enqueued) and in the last interval's queue, not yet sent
    last = lt[lt["bin_end_ps"] == lt["bin_end_ps"].max()].set_index("link_id")["queue_bytes"]
    per_link = lt.groupby("link_id")["tx_bytes"].sum() + last.reindex(lt["link_id"].unique()).sort_index()
    totals = res.links.set_index("link_id")["tx_bytes"]
    pd.testing.assert_series_equal(per_link.sort_index(), totals.sort_index(), check_names=False)
    assert lt["utilisation"].max() <= 1.0 + 1e-9
    peaks = res.links.set_index("link_id")["peak_queue_bytes"]
    assert (lt.groupby("link_id")["queue_bytes"].max() <= peaks.loc[lt["link_id"].unique()].sort_index()).all()
    # a sender's NIC link is busy for every whole interval of its message (4 us-ish startup aside)
    nic = lt[(lt["link_id"] == res.links.loc[res.links["src"] == 0, "link_id"].iloc[0])
             & (lt["bin_end_ps"] <= 15_000_000)]
    assert (nic["utilisation"] > 0.999).all()


def test_sampling_changes_nothing_simulated_and_can_be_switched_off():
    on = fabricsim.run(SC)
    off = fabricsim.run({**SC, "outputs": {"link_sample_interval": "off"}})
    pd.testing.assert_frame_equal(on.messages, off.messages)
    pd.testing.assert_frame_equal(on.links, off.links)
    assert on.summary["run"]["end_ps"] == off.summary["run"]["end_ps"]
    assert len(off.link_timeseries) == 0


def test_budget_truncates_and_says_so():
    res = fabricsim.run({**SC, "outputs": {"link_sample_interval": "1us", "link_sample_budget": 100}})
    assert res.summary["run"]["link_timeseries_truncated"] is True


def test_plots_of_the_time_series():
    res = fabricsim.run(SC)
    for fn in (plot_link_heatmap, plot_queue_timeseries):
        ax = fn(res.link_timeseries, res.links)
        assert ax.get_xlabel() and ax.get_ylabel()
        assert ax.images or ax.lines
