"""The routing policies of slice 2 on the compiled packet core (docs/compiled-core.md 4.5):
``flowlet`` (a flow keeps its port until it pauses for longer than ``gap``; a new flowlet takes the
port-quality pick), ``adaptive`` with ``metric: util`` and ``queue_util`` (the utilisation grade
over ``util_window``, locally and in the grades advertised upstream), ``adaptive`` with ``exact:
true`` (the exact least backlog, with the utilisation term under ``queue_util``) and ``pinned`` (the
least-pinned port at a flow's first packet, ties by the salted hash): every registered routing
policy now runs compiled, bit-identical to ``heap``.

Every case compares the output tables, the summary and the event count, and the policy's own state
written back (flowlet's table and its count of new flowlets, pinned's pins and per-port counts, the
exact policy's utilisation marks on the ports), and asserts that what the policy does happened on
heap (counted by wrapping the Python model): flowlets continued within the gap, re-placed after it
and moved to another port; utilisation grades above 0, locally and in advertised grades, and reports
reconstructed from a utilisation measurement; exact ties drawn; pins tied and broken by the hash.
``COMBOS`` runs flowlet (and the other policies) with every compiled feature: go-back-N, ACK
coalescing, adaptive timeouts, PFC, the telemetry controller with INT, DCQCN with strict-priority
CNPs, several NIC ports per packet and per flow, NVLink racks and PXN. :func:`int_ratio` (CPython's
correctly rounded int true division, which the utilisation and the exact scores need beyond 2^53) is
checked against CPython on 10^5 random and edge-case inputs.
"""
from __future__ import annotations

import collections
import random

import pytest

import fabricsim
from fabricsim.routing import adaptive as adaptive_mod
from fabricsim.routing import pinned as pinned_mod
from fabricsim.routing.flowlet import Flowlet
from fabricsim.routing.quality import PortQuality

from test_compiled_core import _RACKS, _both_kernels, _collect_engines, _planes, _pxn, _two_racks
from test_kernel_equivalence import FABRIC

pytest.importorskip("numba")
from fabricsim.engine.compiled import core, coverage  # noqa: E402  (numba present)

#: a fabric with 3 spines and 2 links to each (6 uplinks per leaf), small buffers, ECN marking
_FAB = {**FABRIC, "spines": 3, "links_per_spine": 2, "buffer": {"mode": "per_port", "size": "64KiB"}}
_MARK = {"ecn": {"enabled": True, "kmin": "8KB", "kmax": "48KB"}}


#: 2 leaves of 4 hosts, 3 spines reached at 400, 300 and 200 Gbit/s (the candidates' rates differ: the exact
#: policy compares products; 300G does not divide 8e12 bit-ps per byte)
_MIXED = {"kind": "explicit", "switch_latency": "600ns",
          "nodes": [{"name": f"h{i}", "type": "host"} for i in range(8)]
          + [{"name": f"leaf{i}", "type": "switch", "tier": 1} for i in range(2)]
          + [{"name": f"spine{i}", "type": "switch", "tier": 2} for i in range(3)],
          "links": [{"a": f"h{i}", "b": f"leaf{i // 4}", "rate": "400Gbps", "delay": "500ns"} for i in range(8)]
          + [{"a": f"leaf{j}", "b": f"spine{i}", "rate": r, "delay": "500ns"}
             for j in range(2) for i, r in enumerate(("400Gbps", "300Gbps", "200Gbps"))],
          "buffer": {"mode": "per_port", "size": "64KiB"}}


def _sc(routing, traffic=None, topology=None, **over):
    """An incast of 6 hosts into host 0 (2 leaves x 4 hosts, 512 KiB, 3 queue pairs each) with ``routing``
    (sections in ``over`` merged in)."""
    sc = {"name": "route", "topology": topology or _FAB, "traffic": traffic or _INC,
          "routing": routing, "switch": _MARK, "simulation": {"seed": 2, "time_limit": "20ms"},
          "outputs": {"link_sample_interval": "off"}}
    for k, v in over.items():
        sc[k] = {**sc.get(k, {}), **v} if isinstance(v, dict) and k not in ("traffic", "topology") else v
    return sc


_INC = {"pattern": "incast", "senders": 6, "receiver": 0, "message_size": "512KiB", "qps_per_message": 3}
_A2A = {"pattern": "all_to_all", "message_size": "64KiB", "qps_per_message": 2}
_FLOWLET = {"policy": "flowlet", "gap": "1500ns"}
_UTIL = {"policy": "adaptive", "metric": "util", "util_window": "1us", "util_thresholds": [0.3, 0.6, 0.9]}
_QUTIL = {"policy": "flowlet", "gap": "1200ns", "metric": "queue_util", "util_window": "2us",
          "queue_ref": "256KiB", "remote_period": "500ns"}
_EXACT = {"policy": "adaptive", "exact": True}
_EXACT_U = {"policy": "adaptive", "exact": True, "metric": "queue_util", "util_window": "1us", "util_weight": 0.7}


@pytest.fixture
def watch(monkeypatch):
    """Count what the Python policies do on heap (a compiled run calls none of it) and keep every
    engine built: ``(counts, engines)``."""
    counts: collections.Counter = collections.Counter()
    engines: list = []
    orig_choose = Flowlet.choose

    def choose(self, switch, ports, pkt, now):
        key = (pkt.qp.uid << 25) | ((1 if pkt.kind else 0) << 24) | switch.id
        old = self._table.get(key)
        old = None if old is None else list(old)
        port = orig_choose(self, switch, ports, pkt, now)
        if old is None:
            counts["flowlet.first"] += 1
        elif now - old[1] <= self._gap:
            counts["flowlet.same"] += 1
        else:
            counts["flowlet.renewed"] += 1
            counts["flowlet.moved"] += port is not old[0]
        counts["flowlet.control"] += bool(pkt.kind)
        return port
    monkeypatch.setattr(Flowlet, "choose", choose)
    orig_grade = PortQuality.grade

    def grade(self, port, now, remote=False):
        g = orig_grade(self, port, now, remote)
        if self._use_u and self._ug[port.index]:
            counts[f"util.grade>0{'.remote' if remote else ''}"] += 1
        return g
    monkeypatch.setattr(PortQuality, "grade", grade)
    orig_drained = PortQuality._drained

    def drained(self, port, meas, t):
        counts["quality.drained" + (".util" if self._use_u and meas[1] % self._nu else "")] += 1
        return orig_drained(self, port, meas, t)
    monkeypatch.setattr(PortQuality, "_drained", drained)
    orig_exact = adaptive_mod.Adaptive._choose_exact

    def exact(self, switch, ports, pkt, now):
        counts["exact.calls"] += 1
        return orig_exact(self, switch, ports, pkt, now)
    monkeypatch.setattr(adaptive_mod.Adaptive, "_choose_exact", exact)
    orig_score = adaptive_mod.Adaptive._score

    def score(self, p, now):
        q = orig_score(self, p, now)
        counts["exact.util>0"] += p.util_rate > 0
        return q
    monkeypatch.setattr(adaptive_mod.Adaptive, "_score", score)
    for mod, name, key in ((adaptive_mod, "packet_draw", "exact.tie"), (pinned_mod, "ecmp_index", "pinned.tie")):
        orig = getattr(mod, name)

        def f(*a, _orig=orig, _key=key):
            counts[_key] += 1
            return _orig(*a)
        monkeypatch.setattr(mod, name, f)
    _collect_engines(monkeypatch, engines)
    return counts, engines


def _policy_state(eng):
    """The routing policy's own state, comparable across kernels (ports by index)."""
    pol = eng.routing
    out = {"new_flowlets": getattr(pol, "new_flowlets", None)}
    if hasattr(pol, "_table"):
        out["table"] = {k: (p.index, t) for k, (p, t) in pol._table.items()}
    if hasattr(pol, "_pins"):
        out["pins"] = {k: p.index for k, p in pol._pins.items()}
        out["count"] = dict(pol._count)
    if getattr(pol, "_util", False):
        out["marks"] = [(p.util_mark_t, p.util_mark_bytes, p.util_rate.hex()) for p in eng.ports]
    out["ports"] = [(p.busy_until, p.tx_bytes, p.tx_packets, p.peak_ps, p.drops) for p in eng.ports]
    return out


def _check(sc, counts, engines):
    """Run ``sc`` on both kernels and compare everything (:func:`test_compiled_core._both_kernels`);
    the heap run's result, engine and counts."""
    return _both_kernels(sc, counts, engines, _policy_state)


def _flowlets_fired(a, ea, seen):
    """Flowlets continued within the gap, were re-placed after it and moved, data and control."""
    assert seen["flowlet.same"] > 0 and seen["flowlet.renewed"] > 0 and seen["flowlet.moved"] > 0, seen
    assert seen["flowlet.control"] > 0
    assert a.summary["run"]["new_flowlets"] == ea.routing.new_flowlets == \
        seen["flowlet.first"] + seen["flowlet.renewed"]


#: each policy alone, with the branches of its own
CASES = {
    "flowlet": lambda tmp: _sc(_FLOWLET),
    "flowlet-no-remote-coarse-refresh": lambda tmp: _sc({**_FLOWLET, "remote": False, "refresh": "1us"}),
    "flowlet-short-gap": lambda tmp: _sc({"policy": "flowlet", "gap": "300ns", "queue_ref": "128KiB"}),
    "flowlet-long-gap": lambda tmp: _sc({"policy": "flowlet", "gap": "5us"}),
    "adaptive-util": lambda tmp: _sc(_UTIL),
    "adaptive-queue_util": lambda tmp: _sc({k: v for k, v in _QUTIL.items() if k != "gap"} | {"policy": "adaptive"}),
    "adaptive-util-all-to-all": lambda tmp: _sc(_UTIL, traffic=_A2A),
    "flowlet-queue_util": lambda tmp: _sc(_QUTIL),
    "flowlet-util-remote-delay": lambda tmp: _sc({**_UTIL, "policy": "flowlet", "gap": "1us",
                                                  "remote_delay": "3us", "remote_period": "700ns"}),
    "exact-queue": lambda tmp: _sc(_EXACT),
    "exact-queue_util": lambda tmp: _sc(_EXACT_U),
    # two rates among the candidates: the exact scores compared as products (no sorting shortcut)
    "exact-mixed-rates": lambda tmp: _sc(_EXACT, topology=_MIXED),
    "exact-queue_util-mixed-rates": lambda tmp: _sc(_EXACT_U, topology=_MIXED),
    "flowlet-util-mixed-rates": lambda tmp: _sc({**_UTIL, "policy": "flowlet", "gap": "1us"}, topology=_MIXED),
    "pinned": lambda tmp: _sc({"policy": "pinned"}),
    "pinned-all-to-all": lambda tmp: _sc({"policy": "pinned"}, traffic=_A2A),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_routing_policies_run_compiled_with_the_heap_kernels_results(case, tmp_path, watch):
    sc = CASES[case](tmp_path)
    a, ea, seen = _check(sc, *watch)
    assert a.summary["run"]["status"] == "complete"
    pol = sc["routing"]
    if pol["policy"] == "flowlet":
        _flowlets_fired(a, ea, seen)
    if pol.get("metric") in ("util", "queue_util") and not pol.get("exact"):
        assert seen.get("util.grade>0", 0) > 0, seen                       # utilisation grades above 0
        if pol.get("remote", True):
            assert seen.get("util.grade>0.remote", 0) > 0, seen            # ... advertised upstream too
    if case in ("adaptive-util", "flowlet-util-remote-delay"):
        assert seen.get("quality.drained.util", 0) > 0, seen               # a report rebuilt from one
    if pol.get("exact"):
        assert seen["exact.calls"] > 0 and seen["exact.tie"] > 0, seen
        if pol.get("metric") == "queue_util":
            assert seen["exact.util>0"] > 0, seen
    if pol["policy"] == "pinned":
        assert seen["pinned.tie"] > 0 and sum(ea.routing._count.values()) > 0
        assert any(c for c, _i in ea.routing._count) and any(not c for c, _i in ea.routing._count)


def _dc():
    return {"algorithm": "dcqcn", "cnp_interval": "4us", "alpha_timer": "10us", "rate_increase_timer": "5us"}


#: 2 HGX nodes whose planes have 2 rails of 3 leaves each under 3 spines (6-port switches at 400G): PXN
#: relays onto a GPU's rail, and a rail's leaves still have 3 equal-cost uplinks
_SMALL_RADIX = {"domain": "hgx8", "rails": 2, "switch": {"capacity": "2400Gbps", "buffer": {"size": "64KiB"}}}

#: the policies with every compiled feature (the others' combinations in check_compiled.py)
COMBOS = {
    "flowlet-go_back_n": lambda tmp: _sc(_FLOWLET, receiver={"model": "go_back_n"},
                                         topology={**_FAB, "buffer": {"mode": "per_port", "size": "32KiB"}}),
    "flowlet-coalesced-adaptive-rto": lambda tmp: _sc(_FLOWLET, receiver={
        "ack_every": 8, "ack_delay": "1us", "rto_mode": "adaptive", "rto_min": "10us"}),
    "flowlet-pfc": lambda tmp: _sc(_FLOWLET, traffic={"pattern": "incast", "senders": 6, "receiver": 0,
                                                      "message_size": "256KiB", "qps_per_message": 2},
                                   switch={**_MARK, "pfc": {"enabled": True, "xoff": "20KB", "xon": "10KB"}}),
    "flowlet-telemetry-int": lambda tmp: _sc(_FLOWLET, congestion_control={"algorithm": "telemetry"}),
    "flowlet-dcqcn-strict-control": lambda tmp: _sc(_FLOWLET, congestion_control=_dc(),
                                                    switch={"ecn": {"enabled": True, "kmin": "4KB", "kmax": "16KB"},
                                                            "strict_priority": "control"}),
    "flowlet-planes-per-packet": lambda tmp: _planes(routing=_FLOWLET, switch=_MARK,
                                                     topology={"switch": {"buffer": {"size": "64KiB"}}}),
    "flowlet-planes-4-per-flow-pfc": lambda tmp: _planes(ports=4, split="per_flow", routing=_FLOWLET,
                                                         traffic={**_INC, "senders": 10, "message_size": "256KiB"},
                                                         switch={**_MARK, "pfc": {"enabled": True}}),
    "flowlet-nvl36-racks": lambda tmp: {
        "name": "route_racks", "topology": {**_RACKS, "switch": {"buffer": {"size": "64KiB"}}},
        "traffic": _two_racks(tmp), "routing": _FLOWLET, "switch": _MARK, "simulation": {"seed": 3},
        "outputs": {"link_sample_interval": "off"}},
    "flowlet-pxn-coalesced": lambda tmp: _pxn(routing=_FLOWLET, switch=_MARK, receiver={"ack_every": 4},
                                              topology=_SMALL_RADIX),
    "queue_util-planes-telemetry": lambda tmp: _planes(routing={**_QUTIL}, switch=_MARK,
                                                       congestion_control={"algorithm": "telemetry"}),
    "util-pfc-go_back_n": lambda tmp: _sc(_UTIL, receiver={"model": "go_back_n"},
                                          switch={**_MARK, "pfc": {"enabled": True, "xoff": "20KB", "xon": "10KB"}}),
    "exact-queue_util-dcqcn-pfc": lambda tmp: _sc(_EXACT_U, congestion_control=_dc(),
                                                  switch={"ecn": {"enabled": True, "kmin": "4KB", "kmax": "16KB"},
                                                          "pfc": {"enabled": True}}),
    "exact-planes-coalesced": lambda tmp: _planes(routing=_EXACT, receiver={"ack_every": 8}),
    "pinned-pxn-telemetry": lambda tmp: _pxn(routing={"policy": "pinned"}, topology=_SMALL_RADIX,
                                             congestion_control={"algorithm": "telemetry"}),
    "pinned-nvl36-go_back_n": lambda tmp: {
        "name": "route_racks", "topology": {**_RACKS, "switch": {"buffer": {"size": "64KiB"}}},
        "traffic": _two_racks(tmp), "routing": {"policy": "pinned"}, "receiver": {"model": "go_back_n"},
        "simulation": {"seed": 3}, "outputs": {"link_sample_interval": "off"}},
}


@pytest.mark.parametrize("case", list(COMBOS))
def test_the_routing_policies_run_compiled_with_the_cluster_and_transport_features(case, tmp_path, watch):
    sc = COMBOS[case](tmp_path)
    a, ea, seen = _check(sc, *watch)
    pol = sc["routing"]["policy"]
    if pol == "flowlet":
        assert seen["flowlet.same"] > 0 and seen["flowlet.renewed"] > 0, seen
        assert a.summary["run"]["new_flowlets"] > 0
    if "pfc" in case:
        assert a.summary["run"]["dropped_packets"] == 0 and a.links["pfc_pause_events"].sum() > 0
    if "go_back_n" in case and "pfc" not in case:
        assert a.messages["naks"].sum() > 0
    if "dcqcn" in case:
        assert a.messages["cnps"].sum() > 0
    if "planes" in case or "nvl36" in case or "pxn" in case:
        assert any(len(nics) > 1 for nics in ea.nics.values())
    if "pxn" in case:
        assert ea.pieces
    if "util" in case and "exact" not in case:
        assert seen.get("util.grade>0", 0) > 0, seen
    if "exact" in case:
        assert seen["exact.calls"] > 0
    if pol == "pinned":
        assert sum(ea.routing._count.values()) > 0


def test_every_registered_routing_policy_is_compiled():
    from fabricsim.routing import ROUTING
    assert set(ROUTING.names()) <= set(coverage.ROUTING), set(ROUTING.names()) - set(coverage.ROUTING)


def test_int_ratio_is_cpythons_int_true_division():
    """``core.int_ratio(a1, a2, b1, b2)`` is ``(a1 * a2) / (b1 * b2)`` in CPython (correctly rounded,
    half to even) for every int64 operand, products far beyond 2^63 included."""
    rng = random.Random(15)
    edges = [0, 1, 2, 3, 7, 20, 80, 2**26, 2**31 - 1, 2**32, 2**32 + 1, 2**52, 2**53 - 1, 2**53, 2**53 + 1,
             2**53 + 3, 2**54 - 1, 2**62, 2**63 - 1, 8 * 10**12, 3 * 10**12, 10**18]
    cases = [(a, b, c, d) for a in edges for b in (1, 3, 2**53 + 1) for c in (1, 7, 2**40) for d in (1, 2**63 - 1)]
    # exact halfway cases (a 54-bit odd numerator over a power of two) and their neighbours
    for _ in range(2000):
        m = rng.randrange(2**53, 2**54) | 1
        s = rng.randrange(0, 9)
        cases += [(m, 1 << s, 1 << s, 1), (m, 3, 3, 1), (m + 1, 1, 1, 1), (m, 2**9, 2**9 + rng.choice([-1, 1]), 1)]
    for _ in range(100_000):
        bits = [rng.choice((8, 20, 32, 45, 53, 54, 62, 63)) for _ in range(4)]
        a1, a2, b1, b2 = (rng.randrange(0, 2**k) for k in bits)
        cases.append((a1, a2, max(b1, 1), max(b2, 1)))
    for a1, a2, b1, b2 in cases:
        if b1 == 0 or b2 == 0 or max(a1, a2, b1, b2) >= 2**63:
            continue
        want = (a1 * a2) / (b1 * b2)
        got = core.int_ratio(a1, a2, b1, b2)
        assert got == want, (a1, a2, b1, b2, got, want)
