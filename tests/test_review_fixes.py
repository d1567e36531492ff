"""Regressions found by reviewing the Spectrum-X model work: each failed before its fix."""
import subprocess
import sys

import pytest

import fabricsim
from fabricsim.config.scenario import load_scenario
from fabricsim.config.switch import pfc_response_ps
from fabricsim.errors import ConfigError


def test_pfc_with_an_nvlink_domain_runs_and_reports_pfc_figures_only_on_pfc_links():
    res = fabricsim.run({"name": "nv_pfc", "topology": {"kind": "nvl72_rack", "domain_size": 36},
                         "traffic": {"pattern": "incast", "senders": 4, "receiver": 0, "message_size": "16KiB"},
                         "switch": {"pfc": {"enabled": True}}})
    assert res.summary["run"]["status"] == "complete"
    nv = res.links[res.links["kind"] == "nvlink"]
    assert (nv["pfc_headroom_bytes"] == 0).all() and (nv["pfc_peak_ingress_bytes"] == 0).all()


def test_pfc_headroom_is_reported_towards_switches_not_towards_hosts():
    res = fabricsim.run({"name": "ls_pfc", "topology": {"kind": "leaf_spine", "hosts_per_leaf": 4, "leaves": 2,
                                                         "spines": 2},
                         "traffic": {"pattern": "incast", "senders": 6, "receiver": 0, "message_size": "256KiB"},
                         "switch": {"pfc": {"enabled": True}}})
    links = res.links
    hosts = set(range(8))
    to_host = links[links["dst"].isin(hosts)]
    to_switch = links[~links["dst"].isin(hosts)]
    assert (to_host["pfc_headroom_bytes"] == 0).all()
    assert (to_switch["pfc_headroom_bytes"] > 0).all()


def test_pfc_response_bound_never_grows_with_the_link_rate():
    rates = [r * 10**9 for r in (10, 25, 40, 50, 100, 200, 400, 800)]
    times = [pfc_response_ps(r) for r in rates]
    assert all(a >= b for a, b in zip(times, times[1:])), times
    assert pfc_response_ps(400 * 10**9) == 905 * 512 * 10**12 // (400 * 10**9)


def test_in_network_bytes_of_the_run_counters_match_the_conservation_balance_under_pfc():
    res = fabricsim.run({"name": "cut", "topology": {"kind": "leaf_spine", "hosts_per_leaf": 4, "leaves": 2,
                                                      "spines": 2},
                         "traffic": {"pattern": "incast", "senders": 6, "receiver": 0, "message_size": "1MiB"},
                         "switch": {"pfc": {"enabled": True}}, "simulation": {"time_limit": "8us"}})
    assert res.summary["run"]["status"] == "time_limit"
    held = res.summary["conservation"]["data"]["in_flight_payload_bytes"]
    assert held > 0
    assert res.summary["run"]["in_network_payload_bytes"] == held


@pytest.mark.parametrize("section, field, bad", [
    ("receiver", "rto_min", {"model": "ddp", "rto_mode": "adaptive", "rto_min": "2ms", "rto_max": "1ms"}),
    ("congestion_control", "rpg_min_rate", {"algorithm": "dcqcn_cx", "rpg_min_rate": "2Gbps",
                                            "rpg_max_rate": "1Gbps"}),
])
def test_inverted_bounds_are_rejected_naming_the_field(section, field, bad):
    with pytest.raises(ConfigError) as e:
        load_scenario({section: bad})
    assert f"{section}.{field}" in str(e.value)


def test_negative_pfc_response_says_what_is_wrong(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("name: bad\nswitch:\n  pfc:\n    enabled: true\n    response: -1us\n")
    p = subprocess.run([sys.executable, "-m", "fabricsim.cli", "validate", str(f)], capture_output=True, text=True)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "switch.pfc.response" in p.stderr and "negative" in p.stderr


def test_hgx_chip_links_get_credit_for_every_nvlink_they_stand_for():
    """An HGX8 chip link stands for 9 NVLink5 links (3.6 Tbps): with one link's credit it ran at
    about a quarter of its rate (a permutation inside the node at 0.27 of the bound)."""
    res = fabricsim.run({"name": "hgx", "topology": {"kind": "cluster", "domain": "hgx8", "nodes": 1},
                         "traffic": {"pattern": "permutation", "message_size": "4MiB"}})
    assert res.summary["effective_bandwidth"]["completion_time_ratio"] >= 0.95


def test_spectrum_x_on_an_hgx_cluster_runs_with_pfc_and_nvlink():
    res = fabricsim.run({"name": "hgx_sx", "profile": "spectrum_x",
                         "topology": {"kind": "cluster", "domain": "hgx8", "nodes": 2},
                         "traffic": {"pattern": "permutation", "message_size": "1MiB"}})
    assert res.summary["run"]["status"] == "complete"


def test_adaptive_grade_lists_must_not_be_empty_and_exact_mode_keeps_its_window():
    from fabricsim.routing.adaptive import Adaptive
    with pytest.raises(ConfigError) as e:
        load_scenario({"routing": {"policy": "adaptive", "queue_thresholds": []}})
    assert "routing.queue_thresholds" in str(e.value)
    with pytest.raises(ConfigError) as e:
        load_scenario({"routing": {"policy": "adaptive", "exact": True, "metric": "util"}})
    assert "routing.metric" in str(e.value)
    assert Adaptive.Params(exact=True, metric="queue_util").util_window == 10 * 10**6


def test_nvlink_chip_backlog_counts_units_held_not_time_waiting_for_credit():
    """A chip port that waits for credit is idle, not queued: its backlog is bounded by what the
    input links' credits let it hold (7 inputs x the credit behind each)."""
    topo = {"kind": "cluster", "domain": "hgx8", "nodes": 1, "nvlink": {"credit_buffer": "5KiB"}}
    res = fabricsim.run({"name": "nv_q", "topology": topo,
                         "traffic": {"pattern": "incast", "senders": 7, "receiver": 0, "message_size": "1MiB"}})
    links = res.links
    to_gpu0 = links[(links["kind"] == "nvlink") & (links["dst"] == 0)]
    bound = 7 * 9 * 5 * 1024            # 7 input links, each 9 NVLink5 links x 5 KiB of credit
    assert (to_gpu0["peak_queue_bytes"] <= bound).all(), to_gpu0["peak_queue_bytes"].tolist()
    ts = res.link_timeseries
    assert ts[ts["link_id"].isin(to_gpu0["link_id"])]["queue_bytes"].max() <= bound
