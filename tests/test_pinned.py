"""The ``pinned`` routing policy (fabricsim/routing/pinned.py) and the routing contract every
registered policy is held to: the packet engine's per-link byte shares follow ``weights()``
(given each candidate port's capacity towards the destination)."""
from __future__ import annotations

import pytest

import fabricsim
from fabricsim.analysis.recorder import Recorder
from fabricsim.api import prepare
from fabricsim.engine import ENGINES
from fabricsim.routing import ROUTING


def scenario(policy, seed=1, message_size="1MiB", qps=2, spines=4, links_per_spine=2):
    return {"name": "pin", "topology": {"kind": "leaf_spine", "hosts_per_leaf": 8, "leaves": 2, "spines": spines,
                                        "links_per_spine": links_per_spine, "buffer": {"size": "unbounded"}},
            "traffic": {"pattern": "permutation", "locality": "cross_leaf", "message_size": message_size,
                        "qps_per_message": qps},
            "routing": {"policy": policy}, "simulation": {"seed": seed, "time_limit": "20ms"}}


def run_engine(sc):
    _loaded, sim = prepare(sc)
    s = sim.scenario
    eng = ENGINES.get("packet")(sim, Recorder(s.outputs.latency_rel_error, s.outputs.timeseries_bin))
    out = eng.run()
    assert out.status == "complete"
    return eng, out


def capacity_towards(eng, port, dst, hosts, memo) -> float:
    """An independent oracle of a port's capacity towards ``dst`` (what ``weights()``'s
    ``capacity_bps`` means): its rate, capped by what the switch it enters can carry on towards
    ``dst`` over its equal-cost ports (into the destination host: the rate alone)."""
    if port.peer in hosts:
        return float(port.rate)
    key = (port.peer, dst)
    if key not in memo:
        sw = eng.switches[port.peer]
        nxt = sw.route.get(dst, (None, None))[1] or sw.lookup(dst)[1]
        memo[key] = sum(capacity_towards(eng, p, dst, hosts, memo) for p in nxt)
    return min(float(port.rate), memo[key])


def expected_data_bytes(eng) -> dict[int, float]:
    """Data wire bytes per port index a fluid model following ``weights()`` predicts: each queue
    pair's bytes start at its NIC port and split at every switch by the policy's weights (given
    each candidate's capacity towards the destination)."""
    sim = eng.sim
    mtu, header = sim.scenario.simulation.mtu, sim.scenario.simulation.header
    hosts = set(sim.topology.hosts)
    exp: dict[int, float] = {}
    memo: dict = {}
    for st in eng.states.values():
        for qp in st.qps:
            wire = qp.size + qp.npsn * header
            (nic,) = qp.nics
            exp[nic.port.index] = exp.get(nic.port.index, 0.0) + wire
            frontier = {nic.port.peer: 1.0}
            while frontier:
                nxt: dict = {}
                for node, frac in frontier.items():
                    sw = eng.switches[node]
                    ports = sw.route.get(qp.dst, (None, None))[1] or sw.lookup(qp.dst)[1]
                    caps = [capacity_towards(eng, p, qp.dst, hosts, memo) for p in ports]
                    w = [1.0] if len(ports) == 1 else eng.routing.weights(sw, ports, qp, False, capacity_bps=caps)
                    assert w is not None and abs(sum(w) - 1.0) < 1e-9
                    for p, share in zip(ports, w):
                        if share:
                            exp[p.index] = exp.get(p.index, 0.0) + frac * share * wire
                            if p.peer not in hosts:
                                nxt[p.peer] = nxt.get(p.peer, 0.0) + frac * share
                frontier = nxt
    return exp


def paused_connections(tmp_path, messages=256, size=8192, every="20us"):
    """The permutation of :func:`scenario` as one persistent connection per host sending
    ``messages`` messages of ``size`` bytes, one every ``every``: each pause is longer than
    flowlet's default ``gap``, so every message is a new flowlet at every switch."""
    from fabricsim.units import parse_time
    period = parse_time(every)
    rows = ["id,src,dst,size_bytes,start_ps,conn"]
    for k in range(messages):
        for h in range(16):
            rows.append(f"{k * 16 + h},{h},{(h + 8) % 16},{size},{k * period},{h}")
    path = tmp_path / "paused.csv"
    path.write_text("\n".join(rows) + "\n")
    return {**scenario("flowlet"), "traffic": {"pattern": "csv", "path": str(path)}}


@pytest.mark.parametrize("policy", ROUTING.names())
def test_packet_byte_shares_follow_weights(policy, tmp_path):
    """The contract of ``RoutingPolicy.weights()`` for every registered policy, each asked with
    every candidate's capacity towards the destination (:func:`capacity_towards`). Per-flow
    policies (one-hot weights) must match the packet run byte for byte; the others converge to
    their share: ``spray`` (a multinomial draw: within 25 % per link at ~256 packets per link),
    ``adaptive`` (the fluid limit of its quality pick; closer than spray, the pick avoids loaded
    ports) and ``flowlet`` (the same limit over many flowlets: here flows that pause longer than
    ``gap`` between messages, 256 flowlets per flow; a flow without pauses stays on one port, see
    :func:`test_a_flow_that_never_pauses_is_one_flowlet_on_one_port`)."""
    eng, _out = run_engine(paused_connections(tmp_path) if policy == "flowlet" else scenario(policy))
    sw = next(s for s in eng.switches.values() if s.name.startswith("leaf"))
    qp = eng.states[0].qps[0]
    ports = sw.lookup(qp.dst)[1]
    assert eng.routing.weights(sw, ports, qp) is not None          # every registered policy answers
    exp = expected_data_bytes(eng)
    got = {p.index: p.tx_bytes - p.ctrl_bytes for p in eng.ports if p.tx_bytes - p.ctrl_bytes}
    assert set(got) <= set(exp)
    one_hot = all(w in (0.0, 1.0) for w in eng.routing.weights(sw, ports, qp))
    for i, e in exp.items():
        if one_hot:
            assert got.get(i, 0) == e, (i, got.get(i, 0), e)
        else:
            assert abs(got.get(i, 0) - e) <= 0.25 * e, (i, got.get(i, 0), e)


def test_a_flow_that_never_pauses_is_one_flowlet_on_one_port():
    """flowlet's long-run share needs flowlets: elephant flows at line rate never pause for the
    default ``gap`` (10 us), so each queue pair's data leaves its leaf by one port only (the
    flow engine's balanced split is then optimistic: docs/fidelity/flow.md)."""
    eng, out = run_engine(scenario("flowlet", qps=1))
    leaf_up = {p.index: p for p in eng.ports if p.kind == "leaf-spine"
               and eng.switches[p.owner].name.startswith("leaf")}
    data = [p.tx_bytes - p.ctrl_bytes for p in leaf_up.values()]
    per_qp = (1 << 20) + 256 * 82                    # one 1 MiB message on one queue pair, as wire bytes
    assert sum(data) == 16 * per_qp                  # 8 cross-leaf flows from each of the 2 leaves
    assert all(v % per_qp == 0 for v in data)        # no queue pair's bytes split over two uplinks
    assert max(data) >= 2 * per_qp                   # and, placed as its first packet went, some collide
    assert out.counters["new_flowlets"] <= 2 * 16 * 2      # one per queue pair and direction at each switch


def test_pinned_gives_every_uplink_one_flow_where_ecmp_collides():
    """8 cross-leaf flows per leaf over 8 uplinks: the least-pinned rule gives each uplink exactly
    one; ECMP's hash puts two or more on some uplink (probability 1 - 8!/8^8 > 99.7 %, here with
    the seeds tried)."""
    per_msg = 128 * (4096 + 82)            # 512 KiB in 4 KiB packets + 82 B headers
    for seed in (1, 2, 3):
        res = {}
        for policy in ("pinned", "ecmp"):
            r = fabricsim.run(scenario(policy, seed=seed, message_size="512KiB", qps=1, spines=8, links_per_spine=1))
            L = r.links
            up = L[(L["kind"] == "leaf-spine") & L["src_name"].str.startswith("leaf")]
            res[policy] = (up["tx_data_bytes"] // per_msg).tolist()
        assert res["pinned"] == [1] * 16
        assert max(res["ecmp"]) >= 2


def test_pinned_flows_never_move_and_pins_are_balanced_per_direction():
    eng, out = run_engine(scenario("pinned", message_size="256KiB", qps=3))
    assert out.counters["conservation"]["holds"]
    pol = eng.routing
    # the weights() answer is the pin, and the same on every question
    for st in eng.states.values():
        for qp in st.qps:
            sw = eng.switches[qp.nics[0].port.peer]
            ports = sw.lookup(qp.dst)[1]
            assert pol.weights(sw, ports, qp) == pol.weights(sw, ports, qp) and sum(pol.weights(sw, ports, qp)) == 1
    # 8 messages x 3 queue pairs per leaf over 8 uplinks: 3 data flows each, at every leaf
    counts = {}
    for port_index, n in pol.pins_per_port().items():
        p = eng.ports[port_index]
        if eng.sim.topology.graph.nodes[p.owner]["name"].startswith("leaf") and p.kind == "leaf-spine":
            counts[port_index] = n
    assert sorted(set(counts.values())) == [3] and len(counts) == 16
    # control flows (ACKs, towards the senders) are pinned and balanced among themselves
    ctrl = [n for i, n in pol.pins_per_port(control=True).items()
            if eng.sim.topology.graph.nodes[eng.ports[i].owner]["name"].startswith("leaf")]
    assert sorted(set(ctrl)) == [3]


def test_asking_pinned_for_weights_pins_nothing():
    """weights() for a flow not yet pinned answers with the port the rule would pick now, and
    leaves the pins and the per-port counts as they were (a fluid engine may ask freely)."""
    eng, _out = run_engine(scenario("pinned", message_size="64KiB", qps=1))
    pol = eng.routing
    before = (dict(pol.pins_per_port()), dict(pol.pins_per_port(control=True)))
    qp = next(q for st in eng.states.values() for q in st.qps)
    sw = eng.switches[qp.nics[0].port.peer]
    ports = sw.lookup(qp.dst)[1]

    class Fresh:                        # a queue pair the policy has never seen
        uid, hash = 10**6, qp.hash ^ 0x5A5A
    w = pol.weights(sw, ports, Fresh)
    assert sum(w) == 1 and w.count(1.0) == 1
    assert (dict(pol.pins_per_port()), dict(pol.pins_per_port(control=True))) == before
    assert pol.weights(sw, ports, Fresh) == w          # and asking again gives the same answer
