"""Hosts with several ports: NIC planes split per packet or per flow, NVLink preferred inside
a scale-up domain. Topologies are built directly as graphs (the builders have their own tests)."""
from __future__ import annotations

import networkx as nx
import pytest

import fabricsim
from fabricsim.analysis.recorder import Recorder
from fabricsim.analysis.result import build_result
from fabricsim.engine import ENGINES, SimulationInput
from fabricsim.engine.rng import RandomStreams
from fabricsim.topology import Topology
from fabricsim.topology.paths import EqualCostPaths
from fabricsim.traffic import Message

G = 10**9


def two_plane_fabric(nvlink_rate=None):
    """4 hosts; each has one 400G port on plane 0 and one on plane 1; per plane 2 leaves and
    1 spine. Optionally hosts 0 and 1 share an NVLink switch."""
    g = nx.MultiGraph()
    for h in range(4):
        g.add_node(h, type="host", tier=0, name=f"h{h}")
    sw = {}
    nid = 4

    def switch(name, tier, **attrs):
        nonlocal nid
        g.add_node(nid, type="switch", tier=tier, name=name, switch_latency_ps=600_000, buffer_bytes=None,
                   buffer_mode="per_port", **attrs)
        sw[name] = nid
        nid += 1

    for p in (0, 1):
        switch(f"p{p}.leaf0", 1, plane=p)
        switch(f"p{p}.leaf1", 1, plane=p)
        switch(f"p{p}.spine0", 2, plane=p)
        for h in range(4):
            g.add_edge(h, sw[f"p{p}.leaf{h // 2}"], rate_bps=400 * G, delay_ps=500_000, kind="host-leaf")
        for leaf in (0, 1):
            g.add_edge(sw[f"p{p}.leaf{leaf}"], sw[f"p{p}.spine0"], rate_bps=800 * G, delay_ps=500_000,
                       kind="leaf-spine")
    if nvlink_rate:
        switch("r0.nvx", 1, domain="nvlink")
        for h in (0, 1):
            g.add_edge(h, sw["r0.nvx"], rate_bps=nvlink_rate, delay_ps=100_000, kind="nvlink")
    return Topology(g, name="two_plane")


def run(topo, messages, split="per_packet", seed=1):
    loaded = fabricsim.load_scenario({"name": "mp", "nic": {"plane_split": split}, "simulation": {"seed": seed}})
    sim = SimulationInput(scenario=loaded.scenario, topology=topo, paths=EqualCostPaths(topo),
                          messages=messages, streams=RandomStreams(seed))
    rec = Recorder()
    outcome = ENGINES.get("packet")(sim, rec).run()
    return build_result(sim, rec, outcome, 1.0, "test")


def host_port_bytes(res, host):
    L = res.links
    return dict(zip(L[L["src"] == host]["dst_name"], L[L["src"] == host]["tx_data_bytes"]))


def test_per_packet_split_uses_both_planes_at_full_rate():
    size = 64 * 2**20
    res = run(two_plane_fabric(), [Message(0, 0, 2, size)])
    row = res.messages.iloc[0]
    goodput = size * 8 / (row["fct_ps"] / 1e12)
    assert goodput == pytest.approx(2 * 400 * G * 4096 / 4178, rel=0.01)
    sent = host_port_bytes(res, 0)
    assert abs(sent["p0.leaf0"] - sent["p1.leaf0"]) <= 4178
    # the idle-fabric reference knows both planes are used
    assert row["slowdown"] == pytest.approx(1.0, abs=0.01)
    assert res.summary["effective_bandwidth"]["sender_capacity_bps"] == 800 * G


def test_per_flow_split_pins_a_queue_pair_to_one_plane():
    size = 32 * 2**20
    res = run(two_plane_fabric(), [Message(0, 0, 2, size, qps=1)], split="per_flow")
    sent = host_port_bytes(res, 0)
    assert sorted(v > 0 for v in sent.values()) == [False, True]
    goodput = size * 8 / (res.messages["fct_ps"].iloc[0] / 1e12)
    assert goodput == pytest.approx(400 * G * 4096 / 4178, rel=0.01)
    # many queue pairs spread over both planes
    many = run(two_plane_fabric(), [Message(0, 0, 2, size, qps=16)], split="per_flow")
    assert all(v > 0 for v in host_port_bytes(many, 0).values())


def test_nvlink_is_preferred_inside_the_domain_and_nics_carry_the_rest():
    nv = 3600 * G
    res = run(two_plane_fabric(nvlink_rate=nv), [Message(0, 0, 1, 8 * 2**20), Message(1, 0, 2, 8 * 2**20)])
    sent = host_port_bytes(res, 0)
    m = res.messages.set_index("message_id")
    # message 0 (same NVLink domain) left only by NVLink; message 1 only by the two NIC planes
    assert sent["r0.nvx"] == 2048 * 4178
    assert sent["p0.leaf0"] + sent["p1.leaf0"] == 2048 * 4178
    assert m.loc[0, "fct_ps"] < m.loc[1, "fct_ps"] / 4
    assert m["slowdown"].max() == pytest.approx(1.0, abs=0.02)


def test_a_destination_reachable_on_one_plane_only_is_sent_on_that_plane():
    topo = two_plane_fabric()
    g = topo.graph
    names = lambda nodes: [g.nodes[s]["name"] for s in nodes]  # noqa: E731
    assert names(EqualCostPaths(topo).first_hops(0, 3)) == ["p0.leaf0", "p1.leaf0"]
    # host 3 loses its plane-0 port: host 0 must use plane 1 only
    g.remove_edges_from([(3, n) for n in list(g.neighbors(3)) if g.nodes[n]["name"].startswith("p0")])
    assert names(EqualCostPaths(topo).first_hops(0, 3)) == ["p1.leaf0"]
    res = run(topo, [Message(0, 0, 3, 2**20)])
    sent = host_port_bytes(res, 0)
    assert sent["p0.leaf0"] == 0 and sent["p1.leaf0"] == 256 * 4178
    assert res.messages["completed"].all()
