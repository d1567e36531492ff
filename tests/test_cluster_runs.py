"""Simulations on NVL72 racks and multi-plane clusters: the NVLink bound inside a rack, the NIC
bound across racks, and what a failed plane costs."""
from __future__ import annotations

import pytest

import fabricsim

EFF = 4096 / (4096 + 82)      # payload share of the wire with 4 KiB MTU and 82 B overhead
G = 10**9


def rack(model):
    return {"name": f"rack-{model}", "topology": {"kind": "nvl72_rack", "nvlink": {"model": model}},
            "traffic": {"pattern": "all_to_all", "message_size": "64KiB"}, "routing": {"policy": "adaptive"}}


def test_all_to_all_inside_an_nvl72_rack_reaches_the_nvlink_bound_with_chips_or_crossbar():
    chips = fabricsim.run(rack("switches"))
    xbar = fabricsim.run(rack("crossbar"))
    for res in (chips, xbar):
        eb = res.summary["effective_bandwidth"]
        assert res.summary["messages"]["completed"] == 72 * 71
        # ideal = every GPU pushing 71 x 64 KiB (in NVLink framing) through its 7.2 Tbps of
        # NVLink; with credit flow control there are no ACKs on the links (tests/test_nvlink.py)
        assert eb["completion_time_ratio"] >= 0.97
        assert eb["sender_capacity_bps"] == 72 * 7200 * G
        # nothing leaves a GPU except over NVLink (there is no NIC in this preset)
        assert set(res.links["kind"]) == {"nvlink"}
    # the faithful 18-chip model and the single crossbar agree on the collective's duration
    d_chips = chips.summary["pattern"]["duration_ps"]
    d_xbar = xbar.summary["pattern"]["duration_ps"]
    assert abs(d_chips - d_xbar) / d_xbar < 0.12
    # the crossbar keeps every GPU at the NVLink rate (times payload share) while all flows run
    assert xbar.summary["effective_bandwidth"]["goodput_while_all_active_fraction"] > 0.97 * EFF * 4178 / (4178 + 86)


def two_racks(tmp_path, failed=None, routing="adaptive"):
    """2 NVL36 racks, 2 x 400G NIC ports per GPU (2 planes). Every GPU of rack 0 sends 4 MiB to a
    GPU of rack 1 and back: a cross-rack permutation."""
    rows = ["src,dst,size_bytes"]
    for i in range(36):
        rows.append(f"{i},{36 + (i * 7) % 36},{4 * 2**20}")
        rows.append(f"{36 + i},{(i * 5) % 36},{4 * 2**20}")
    path = tmp_path / "m.csv"
    path.write_text("\n".join(rows) + "\n")
    topo = {"kind": "cluster", "domain": "nvl36", "racks": 2, "nic": {"ports": 2, "rate": "400Gbps"}}
    if failed:
        topo["failed"] = failed
    return fabricsim.run({"name": "two-racks", "topology": topo, "traffic": {"pattern": "csv", "path": str(path)},
                          "routing": {"policy": routing}})


def per_flow_goodput(res):
    m = res.messages
    return (m["size_bytes"] * 8 / (m["fct_ps"].astype("float64") / 1e12)).to_numpy()


def test_cross_rack_permutation_is_bounded_by_nic_rate_over_all_planes(tmp_path):
    res = two_racks(tmp_path)
    g = per_flow_goodput(res)
    bound = 2 * 400 * G * EFF
    assert g.max() <= bound * 1.001
    # every GPU also receives a flow, so its NIC ports carry that flow's ACKs (86 B per 4178 B)
    assert g.mean() > 0.95 * bound * 4178 / (4178 + 86)
    # cross-rack traffic uses the NICs, never NVLink
    assert res.links.loc[res.links["kind"] == "nvlink", "tx_data_bytes"].sum() == 0
    # both planes carry half each
    L = res.links
    up = L[(L["kind"] == "host-leaf") & (L["src"] < 72)]
    per_plane = up.groupby(up["dst_name"].str.split(".").str[0])["tx_data_bytes"].sum()
    assert len(per_plane) == 2
    assert per_plane.min() / per_plane.max() > 0.98


def test_a_failed_plane_halves_cross_rack_capacity(tmp_path):
    healthy = per_flow_goodput(two_racks(tmp_path))
    degraded_res = two_racks(tmp_path, failed={"planes": [1]})
    degraded = per_flow_goodput(degraded_res)
    assert degraded.mean() / healthy.mean() == pytest.approx(0.5, abs=0.03)
    assert degraded_res.summary["messages"]["completed"] == 72
    # nothing is sent towards the failed plane
    assert not degraded_res.links["dst_name"].str.startswith("p1.").any()


def test_pxn_moves_off_rail_traffic_onto_nvlink_and_keeps_it_under_one_leaf(tmp_path):
    """GPU i of rack 0 sends to a GPU of rack 1 on another rail. Without PXN every message
    crosses a spine; with PXN it first moves over NVLink to the sender's peer on the
    destination's rail, whose NIC shares a leaf with the destination: no spine traffic."""
    rows = ["src,dst,size_bytes"]
    for i in range(36):
        dst = 36 + (i + 1) % 36           # local rank differs (rails are local rank mod 4)
        rows.append(f"{i},{dst},{2**20}")
    path = tmp_path / "m.csv"
    path.write_text("\n".join(rows) + "\n")

    def run(pxn):
        return fabricsim.run({"name": "pxn", "topology": {"kind": "cluster", "domain": "nvl36", "racks": 2,
                                                          "nic": {"ports": 2, "rate": "400Gbps"}},
                              "traffic": {"pattern": "csv", "path": str(path)}, "routing": {"policy": "adaptive"},
                              "nic": {"plane_split": "per_packet", "pxn": pxn, "pxn_chunk": "256KiB"}})

    direct, relayed = run(False), run(True)
    for res in (direct, relayed):
        assert res.summary["messages"]["completed"] == 36
        b = res.summary["bytes"]
        assert b["delivered_payload_bytes"] == b["injected_payload_bytes"] == 36 * 2**20
        assert res.goodput["delivered_bytes"].sum() == 36 * 2**20   # relay hops are not goodput
    spine = lambda r: r.links.loc[r.links["kind"] == "leaf-spine", "tx_data_bytes"].sum()  # noqa: E731
    nvlink = lambda r: r.links.loc[r.links["kind"] == "nvlink", "tx_data_bytes"].sum()  # noqa: E731
    assert spine(direct) > 0 and nvlink(direct) == 0
    assert spine(relayed) == 0
    # each byte crosses NVLink twice (GPU -> NVLink switch -> relay GPU), in 4 KiB units of 16
    # NVLink packets of 256 B + 16 B framing (nvlink.transport: credit, the default)
    assert nvlink(relayed) == 2 * 36 * 256 * (4096 + 16 * 16)
    # chunks pipeline the two stages: the relay costs well under one extra message time
    assert relayed.messages["fct_ps"].max() < 1.5 * direct.messages["fct_ps"].max()


def test_three_tier_cluster_routes_through_super_spines():
    def run(policy):
        return fabricsim.run({"name": "t3", "topology": {"kind": "cluster", "domain": "hgx8", "nodes": 8,
                                                         "nic": {"ports": 1, "rate": "400Gbps"}, "tiers": 3,
                                                         "pod_leaves": 2},
                              "traffic": {"pattern": "permutation", "message_size": "1MiB"},
                              "routing": {"policy": policy}})
    adaptive, ecmp = run("adaptive"), run("ecmp")
    for res in (adaptive, ecmp):
        assert res.summary["messages"]["completed"] == 64
        assert res.links.loc[res.links["kind"] == "spine-superspine", "tx_data_bytes"].sum() > 0
    assert adaptive.summary["effective_bandwidth"]["completion_time_ratio"] > 0.9
    assert ecmp.summary["effective_bandwidth"]["completion_time_ratio"] < \
        adaptive.summary["effective_bandwidth"]["completion_time_ratio"]
