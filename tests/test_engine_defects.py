"""Regression tests for three engine defects found by a property test over random scenarios.

1. ECMP cached its port per (queue pair, switch) whatever the direction, so ACKs took the data
   direction's port and looped wherever a switch has parallel links towards a neighbour.
   A run whose messages failed still reported ``status complete``.
2. A run whose messages all finished could end at the time limit with ``status time_limit``: the
   kernel only looked at its stop flag every 65,536 events.
3. The per-message counters were frozen when each message completed, while the transport (its
   resends, their drops) went on; nothing checked that the bytes balance.

Each defect has a test here that fails on the code before the fix; a small property test over
random leaf-spine scenarios checks the invariants together.
"""
from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import fabricsim
from fabricsim.api import prepare
from fabricsim.analysis.recorder import Recorder
from fabricsim.engine.interface import ENGINES
from fabricsim.engine.rng import RandomStreams
from fabricsim.errors import SimulationError
from fabricsim.net.packet import ACK, DATA, Packet


def leaf_spine(spines=4, links_per_spine=1, buffer="unbounded", **extra):
    """8 hosts on 2 leaves, cross-leaf permutation of 256 KiB messages; lossless buffers by default."""
    sc = {"name": "defects",
          "topology": {"kind": "leaf_spine", "hosts_per_leaf": 4, "leaves": 2, "spines": spines,
                       "links_per_spine": links_per_spine, "buffer": {"size": buffer}},
          "traffic": {"pattern": "permutation", "locality": "cross_leaf", "message_size": "256KiB"},
          "routing": {"policy": "ecmp"},
          "simulation": {"seed": 3, "time_limit": "2ms"}}
    for k, v in extra.items():
        sc[k] = v
    return sc


# ----------------------------------------------------------------------------- 1. ECMP direction
class _Switch:
    def __init__(self, sid):
        self.id = sid


class _Qp:
    def __init__(self, uid, h):
        self.uid, self.hash = uid, h


def test_ecmp_choice_is_ecmp_index_for_both_directions():
    """choose() is the pure function: data hashes the queue pair's hash, control its reverse."""
    from fabricsim.routing.ecmp import SALT_STREAM, Ecmp, direction_hash, ecmp_index
    streams = RandomStreams(11)
    pol = Ecmp(None, streams)
    assert pol.salt == streams.u64(SALT_STREAM)
    up, down = tuple(f"up{i}" for i in range(4)), tuple(f"down{i}" for i in range(3))
    sw = _Switch(57)
    differs = 0
    for uid in range(200):
        qp = _Qp(uid, (uid * 0x9E3779B97F4A7C15 + 12345) & ((1 << 64) - 1))
        data = Packet(qp, 1, 4178, 4096, 0, 0, 1, kind=DATA)
        ack = Packet(qp, 0, 86, 0, 0, 0, 1, kind=ACK)
        got_d = pol.choose(sw, up, data, 0)
        got_a = pol.choose(sw, down, ack, 0)     # same queue pair, same switch, other direction
        assert got_d == up[ecmp_index(qp.hash, pol.salt, sw.id, len(up))]
        assert got_a == down[ecmp_index(qp.hash, pol.salt, sw.id, len(down), control=True)]
        assert got_a == down[pol.index(qp.hash, sw.id, len(down), control=True)]
        # cached answers stay the same
        assert pol.choose(sw, up, data, 1) is got_d and pol.choose(sw, down, ack, 1) is got_a
        differs += direction_hash(qp.hash, True) % 4 != qp.hash % 4
    assert differs > 100      # the reverse flow is hashed independently of the forward one


def test_ecmp_acks_do_not_reuse_the_data_port_at_a_switch_with_parallel_links():
    """The old cache key (queue pair, switch) returned the data's port for the ACK: a port that
    leads back towards the receiver, not one of the ACK's candidates."""
    from fabricsim.routing.ecmp import Ecmp
    pol = Ecmp(None, RandomStreams(1))
    sw = _Switch(9)
    to_dst_leaf = ("spine->leaf1 #0", "spine->leaf1 #1")
    to_src_leaf = ("spine->leaf0 #0", "spine->leaf0 #1")
    for uid in range(50):
        qp = _Qp(uid, uid * 7919 + 1)
        assert pol.choose(sw, to_dst_leaf, Packet(qp, 5, 4178, 4096, 0, 0, 1), 0) in to_dst_leaf
        assert pol.choose(sw, to_src_leaf, Packet(qp, 0, 86, 0, 0, 0, 1, kind=ACK), 0) in to_src_leaf


def test_ecmp_on_parallel_links_completes_without_timeouts_in_the_events_of_the_single_link_shape():
    """4 spines x 1 link and 2 spines x 2 links have the same capacity; with unbounded buffers
    nothing is dropped, so there is no reason for a timeout in either. Before the fix ACKs looped
    on the parallel links: timeouts, retry_exceeded and many times the events."""
    single = fabricsim.run(leaf_spine(spines=4, links_per_spine=1))
    parallel = fabricsim.run(leaf_spine(spines=2, links_per_spine=2))
    for r in (single, parallel):
        s = r.summary
        assert s["run"]["status"] == "complete"
        assert s["messages"]["completed"] == s["messages"]["total"] == 8
        assert s["run"]["retransmission_timeouts"] == 0
        assert s["drops"]["packets"] == 0 and s["drops"]["control_packets"] == 0
    assert parallel.summary["run"]["events"] <= 1.2 * single.summary["run"]["events"]


def test_quickstart_with_parallel_spine_links_is_no_worse_than_the_shipped_shape(tmp_path):
    """The reproduction of the report: quickstart with 4 spines x 2 links (same capacity as the
    shipped 8 x 1). Before the fix: 30/32 complete, 91 timeouts, 3.87 M events, 'complete'."""
    path = fabricsim.__file__.rsplit("/fabricsim/", 1)[0] + "/scenarios/leaf_spine_32_raw.yaml"
    shipped = fabricsim.run(path).summary
    par = fabricsim.run(path, overrides=["topology.spines=4", "topology.links_per_spine=2"]).summary
    assert par["messages"]["completed"] == par["messages"]["total"]
    assert par["run"]["status"] == "complete"
    assert par["run"]["retransmission_timeouts"] <= max(shipped["run"]["retransmission_timeouts"], 1)
    assert par["run"]["events"] <= 1.2 * shipped["run"]["events"]


def test_a_run_whose_messages_failed_does_not_report_complete():
    """retry_limit 0 and a tiny buffer under incast: queue pairs give up after one timeout."""
    sc = leaf_spine(buffer="24KiB",
                    traffic={"pattern": "incast", "senders": 7, "receiver": 0, "message_size": "256KiB"},
                    receiver={"model": "ddp", "retry_limit": 0, "rto_low": "5us", "rto_high": "5us"})
    s = fabricsim.run(sc).summary
    assert s["messages"]["incomplete_by_reason"].get("retry_exceeded", 0) > 0
    assert s["run"]["status"] == "incomplete_failed"


def test_the_messages_table_adds_up_to_the_run_totals_when_messages_fail():
    """Rows used to be frozen when a message ended: packets of a failed message still in flight
    were dropped or accepted later, counted in the run totals but not in its row."""
    sc = leaf_spine(buffer="24KiB",
                    traffic={"pattern": "incast", "senders": 7, "receiver": 0, "message_size": "256KiB"},
                    receiver={"model": "ddp", "retry_limit": 0, "rto_low": "5us", "rto_high": "5us"})
    r = fabricsim.run(sc)
    s, m = r.summary, r.messages
    assert s["bytes"]["dropped_payload_bytes"] > 0
    assert int(m["dropped_bytes"].sum()) == s["bytes"]["dropped_payload_bytes"]
    assert int(m["delivered_bytes"].sum()) == s["bytes"]["delivered_payload_bytes"]


# ----------------------------------------------------------------------------- 2. time limit
def test_a_run_that_completes_before_its_time_limit_reports_complete_and_ends_at_the_last_completion():
    sc = leaf_spine()
    first = fabricsim.run(sc).summary
    end = first["run"]["end_ps"]
    assert first["run"]["status"] == "complete" and end == first["pattern"]["last_end_ps"]
    # a limit just after the last completion: retransmission timers and the sampler are still
    # pending then, and must not run the clock on to the limit
    sc["simulation"]["time_limit"] = f"{end + 1000}ps"
    again = fabricsim.run(sc).summary
    assert again["run"]["status"] == "complete"
    assert again["run"]["end_ps"] == end
    assert again["messages"]["completed"] == again["messages"]["total"]
    # ... and a limit before it is a time limit
    sc["simulation"]["time_limit"] = f"{end - 1000}ps"
    cut = fabricsim.run(sc).summary
    assert cut["run"]["status"] == "time_limit" and cut["run"]["end_ps"] == end - 1000


def test_kernel_stops_at_the_event_that_asked():
    from fabricsim.engine.kernel import HeapKernel
    k = HeapKernel()
    ran = []

    def ev(t, a):
        ran.append(t)
        if t == 5:
            k.stop()
            k.schedule(5, ev, None)          # scheduled by the stopping event: does not run

    for t in range(1, 100):
        k.schedule(t, ev, None)
    assert k.run(until_ps=1000) == "stopped"
    assert ran == [1, 2, 3, 4, 5] and k.now == 5 and k.events == 5


# ----------------------------------------------------------------------------- 3. conservation
def _engine(sc):
    _, sim = prepare(sc)
    return ENGINES.get("packet")(sim, Recorder())


LOSSY_INCAST = dict(traffic={"pattern": "incast", "senders": 7, "receiver": 0, "message_size": "256KiB"},
                    receiver={"model": "ddp", "rto_low": "20us", "rto_high": "40us"})


@pytest.mark.parametrize("receiver", ["ddp", "go_back_n", "reorder_buffer"])
@pytest.mark.parametrize("policy", ["ecmp", "spray"])
def test_conservation_holds_with_drops_and_retransmissions(receiver, policy):
    sc = leaf_spine(buffer="32KiB", **copy.deepcopy(LOSSY_INCAST))
    sc["receiver"]["model"] = receiver
    sc["routing"] = {"policy": policy}
    r = fabricsim.run(sc)
    s = r.summary
    cons = s["conservation"]
    d, c = cons["data"], cons["control"]
    assert cons["holds"] and not cons["violations"]
    assert d["dropped_payload_bytes"] > 0 and s["transport"]["retransmitted_bytes"] > 0
    assert d["sent_payload_bytes"] == (d["accepted_payload_bytes"] + d["duplicate_payload_bytes"]
                                       + d["discarded_payload_bytes"] + d["dropped_payload_bytes"]
                                       + d["in_flight_payload_bytes"])
    assert c["sent_packets"] == c["arrived_packets"] + c["dropped_packets"] + c["in_flight_packets"]
    # the messages table adds up to the run totals (rows are taken at the run's end)
    m = r.messages
    assert d["sent_payload_bytes"] == s["bytes"]["injected_payload_bytes"] + int(m["retransmitted_bytes"].sum())
    assert int(m["dropped_bytes"].sum()) == s["bytes"]["dropped_payload_bytes"] == d["dropped_payload_bytes"]
    assert int(m["duplicate_bytes"].sum()) == d["duplicate_payload_bytes"]


def test_conservation_holds_under_pfc():
    sc = leaf_spine(buffer="2MiB", switch={"pfc": {"enabled": True}}, **copy.deepcopy(LOSSY_INCAST))
    s = fabricsim.run(sc).summary
    assert s["run"]["pfc_pause_events"] > 0
    assert s["conservation"]["holds"]
    assert s["conservation"]["data"]["dropped_payload_bytes"] == 0


def test_conservation_counts_packets_still_in_flight_at_a_time_limit():
    sc = leaf_spine(buffer="32KiB", **copy.deepcopy(LOSSY_INCAST))
    sc["simulation"]["time_limit"] = "3us"
    s = fabricsim.run(sc).summary
    assert s["run"]["status"] == "time_limit"
    d = s["conservation"]["data"]
    assert s["conservation"]["holds"] and d["in_flight_payload_bytes"] > 0
    assert s["conservation"]["control"]["in_flight_packets"] > 0


@pytest.mark.parametrize("field", ["dropped", "dup_bytes", "delivered", "injected", "acks", "ctrl_arrived"])
def test_conservation_check_detects_an_imbalance(field):
    eng = _engine(leaf_spine(buffer="32KiB", **copy.deepcopy(LOSSY_INCAST)))
    eng.run()
    assert eng.conservation()["holds"]
    st = next(s for s in eng.states.values() if s.qps)
    setattr(st, field, getattr(st, field) + 1)
    bal = eng.conservation()
    assert not bal["holds"]
    assert any(f"message {st.msg.id} " in v for v in bal["violations"])


def test_a_broken_balance_fails_the_run_loudly(monkeypatch):
    eng = _engine(leaf_spine())
    real = type(eng).conservation

    def tampered(self):
        next(s for s in self.states.values() if s.qps).injected += 1     # one byte "sent" twice
        return real(self)

    monkeypatch.setattr(type(eng), "conservation", tampered)
    with pytest.raises(SimulationError, match="packet conservation violated.*data: sent"):
        eng.run()


# ----------------------------------------------------------------------------- property test
@st.composite
def scenarios(draw):
    hosts_per_leaf = draw(st.integers(2, 4))
    leaves = draw(st.integers(2, 3))
    spines = draw(st.integers(1, 3))
    links = draw(st.integers(1, 2))
    pattern = draw(st.sampled_from(["permutation", "incast", "all_to_all"]))
    size = draw(st.sampled_from(["8KiB", "192KiB", "1MiB"]))
    hosts = hosts_per_leaf * leaves
    if pattern == "incast":
        traffic = {"pattern": "incast", "senders": draw(st.integers(1, hosts - 1)), "receiver": 0,
                   "message_size": size}
    else:
        traffic = {"pattern": pattern, "message_size": size}
    traffic["qps_per_message"] = draw(st.integers(1, 3))
    pfc = draw(st.sampled_from([False, False, True]))
    buffer = draw(st.sampled_from(["16KiB", "16KiB", "64KiB", "unbounded"])) if not pfc else "1MiB"
    sc = {"name": "prop",
          "topology": {"kind": "leaf_spine", "hosts_per_leaf": hosts_per_leaf, "leaves": leaves, "spines": spines,
                       "links_per_spine": links, "buffer": {"size": buffer}},
          "traffic": traffic,
          "routing": {"policy": draw(st.sampled_from(["ecmp", "spray", "adaptive", "flowlet"]))},
          "receiver": {"model": draw(st.sampled_from(["ddp", "go_back_n", "reorder_buffer"])),
                       "rto_low": "20us", "rto_high": "60us", "retry_limit": draw(st.sampled_from([1, 7])),
                       "ack_every": draw(st.sampled_from([1, 4]))},
          "congestion_control": {"algorithm": draw(st.sampled_from(["none", "dcqcn"]))},
          "switch": {"pfc": {"enabled": pfc}},
          "simulation": {"seed": draw(st.integers(1, 1000)), "cell_packets": draw(st.sampled_from([1, 1, 2])),
                         "time_limit": draw(st.sampled_from(["20us", "200us", "2ms"]))}}
    return sc


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenarios())
def test_random_scenarios_keep_the_run_invariants(sc):
    try:
        r = fabricsim.run(sc)
    except SimulationError as exc:          # conservation broken: the run says so loudly
        pytest.fail(f"{exc}\nscenario: {sc}")
    s = r.summary
    m = s["messages"]
    event(f"status {s['run']['status']}")
    event(f"drops {'yes' if s['drops']['packets'] else 'no'}")
    limit = prepare(sc)[0].scenario.simulation.time_limit
    assert (s["run"]["status"] == "complete") == (m["completed"] == m["total"]), sc
    if m["incomplete"] == 0:
        assert s["run"]["status"] == "complete" and s["run"]["end_ps"] == s["pattern"]["last_end_ps"]
    assert s["run"]["end_ps"] <= limit
    assert s["conservation"]["holds"]
    eb = s["effective_bandwidth"]
    for k in ("goodput_fraction", "goodput_while_all_active_fraction"):
        assert eb[k] is None or 0 <= eb[k] <= 1.0, (k, eb[k], sc)
    assert int(r.messages["dropped_bytes"].sum()) == s["bytes"]["dropped_payload_bytes"]
    t = s["transport"]
    assert t["retransmitted_bytes"] == sum(t["retransmitted_bytes_by_cause"].values())
