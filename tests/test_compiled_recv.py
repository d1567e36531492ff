"""The ``reorder_buffer`` receiver and cells (``simulation.cell_packets > 1``) on the compiled packet
core (docs/compiled-core.md, slices 3 and 4), bit-identical to ``heap``.

``reorder_buffer`` (fabricsim/receiver/reorder_buffer.py) holds a unit beyond a gap only if its
receiving host's buffer (shared by every queue pair arriving there, ``receiver.buffer``) has room;
else the unit is discarded (``reorder_overflow_bytes``) and the prefix is re-acknowledged by a
duplicate ACK (the per-unit format with no trigger, or a coalesced ACK), and the sender recovers it
like a loss. With cells, a data unit carries up to ``cell_packets`` MTU packets: PSNs stay MTU
packets, a queue pair's units start every ``cell`` PSNs (the last one may be short), and the
cumulative acknowledgement, the receiver's join of held units and the SACK bitmap (bit ``i``: the unit
at ``cum + i x cell``) step by units.

Every case compares the output tables, the summary, the event count, every receiving host's held
bytes and peak (``Receiver.hosts``, in the order they were made) and the packets left in the
network, and asserts on heap (by wrapping the Python model's methods) that what it is for happened:
units held and units overflowed, duplicate ACKs of a full buffer, units of several packets sent,
joined and acknowledged by bitmaps, retransmissions. The matrices run the reorder buffer with one
ACK per unit and coalesced, fixed and adaptive timeouts, lossy and PFC; cells of 2 and 3 packets
with each receiver; and ``COMBOS`` both of them with the cluster features and congestion control
(several NIC ports per packet and per flow, NVL36 racks and HGX nodes with NVLink, PXN, DCQCN with
``strict_priority: control``, telemetry with INT).
"""
from __future__ import annotations

import collections
import itertools

import pytest

import fabricsim
from fabricsim.net.sender import Sender
from fabricsim.receiver.base import Receiver
from fabricsim.receiver.reorder_buffer import ReorderBuffer

from test_compiled_core import (_PLANES_INCAST, _RACKS, _both_kernels, _collect_engines, _lossy_incast, _planes,
                                _pxn, _small, _two_racks)

pytest.importorskip("numba")


@pytest.fixture
def watch(monkeypatch):
    """Count what the Python model does on heap (a compiled run calls none of it) and keep every
    engine built: ``(counts, engines)``."""
    counts: collections.Counter = collections.Counter()
    engines: list = []
    orig_gap = ReorderBuffer.on_gap

    def on_gap(self, t, qp, pkt):
        r = orig_gap(self, t, qp, pkt)
        counts["held" if r else "overflow"] += 1
        return r
    monkeypatch.setattr(ReorderBuffer, "on_gap", on_gap)
    orig_join = Receiver._join_held

    def join(self, t, qp, st, rset, cum):
        r = orig_join(self, t, qp, st, rset, cum)
        if r > cum:
            counts["joined"] += 1
            if self.cell > 1:
                counts["joined_cells"] += 1     # the prefix moved over held units of several PSNs
        return r
    monkeypatch.setattr(Receiver, "_join_held", join)
    orig_accept = Receiver.accept

    def accept(self, t, pkt, st):
        if pkt.npk > 1:
            counts["cell_units"] += 1
        return orig_accept(self, t, pkt, st)
    monkeypatch.setattr(Receiver, "accept", accept)
    orig_ack = Sender._on_ack

    def on_ack(self, t, qp, pkt):
        if pkt.sacks and self.cell > 1 and pkt.sacks & ~1:
            counts["bitmap_cells"] += 1         # a coalesced ACK's bitmap naming units beyond the first
        if pkt.sack < 0 and pkt.dsack < 0 and pkt.sacks is None and pkt.t_data == 0:
            counts["dup_ack"] += 1              # the per-unit format with no trigger: a full buffer's
        return orig_ack(self, t, qp, pkt)
    monkeypatch.setattr(Sender, "_on_ack", on_ack)
    orig_adv = Sender._advance

    def advance(self, t, qp, cum):
        if self.cell > 1 and cum - qp.una > self.cell:
            counts["advance_cells"] += 1        # a cumulative ACK over several units of cells
        return orig_adv(self, t, qp, cum)
    monkeypatch.setattr(Sender, "_advance", advance)
    _collect_engines(monkeypatch, engines)
    return counts, engines


def _hosts(eng):
    """Every receiving host's reorder state, in the order ``Receiver.host`` made it."""
    return [(h, hr.hold, hr.peak_hold) for h, hr in eng.receiver.hosts.items()]


def _in_flight(eng):
    return [(p.kind, p.qp.uid, p.seq, p.npk, p.wire, p.payload, p.t_data, p.sacks if p.kind else None)
            for p in eng.in_flight()]


def _receivers(eng):
    """Every queue pair's receiver and sender positions that the two features move (PSNs, the bytes
    held and outstanding; the write-back's scalars) and its message's overflow."""
    return [(qp.r_cum, qp.r_max, qp.r_hold, qp.r_acks, qp.una, qp.seq, qp.high, qp.out_bytes, st.overflow_bytes)
            for st in list(eng._rows) + list(eng.pieces) for qp in st.qps]


def _check(sc, counts, engines):
    """Run ``sc`` on both kernels and compare everything (:func:`test_compiled_core._both_kernels`);
    the heap run's result, engine and counts."""
    return _both_kernels(sc, counts, engines, _hosts, _in_flight, _receivers)


def _rb(buffer="16KiB", **receiver):
    return {"model": "reorder_buffer", "buffer": buffer, **receiver}


_PFC = {"pfc": {"enabled": True, "xoff": "20KB", "xon": "10KB"}}

#: the reorder buffer on a sprayed permutation (reordering alone fills it): one ACK per unit or every
#: 8th, fixed or adaptive timeouts, lossy or lossless switches
RB = {f"rb-ack{ae}-{rto}-{'pfc' if pfc else 'lossy'}": (ae, rto, pfc)
      for ae, rto, pfc in itertools.product((1, 8), ("fixed", "adaptive"), (False, True))}


@pytest.mark.parametrize("case", list(RB))
def test_reorder_buffer_runs_compiled_with_the_heap_kernels_results(case, watch):
    ae, rto, pfc = RB[case]
    rcv = _rb("16KiB", rto_mode=rto, **({"ack_every": ae} if ae > 1 else {}))
    sc = _small(receiver=rcv, outputs={"link_sample_interval": "off"}, **({"switch": _PFC} if pfc else {}))
    a, ea, seen = _check(sc, *watch)
    assert a.summary["status"] == "complete"
    assert seen.get("held", 0) > 0 and seen.get("overflow", 0) > 0 and seen.get("joined", 0) > 0
    assert a.messages["reorder_overflow_bytes"].sum() > 0 and a.messages["peak_reorder_bytes"].max() > 0
    assert a.summary["run"]["retransmitted_payload_bytes"] > 0
    assert max(hr.peak_hold for hr in ea.receiver.hosts.values()) <= 16 * 1024
    if ae == 1:
        assert seen.get("dup_ack", 0) > 0                  # a full buffer's duplicate ACK reached its sender
    if pfc:
        assert a.summary["run"]["dropped_packets"] == 0


def test_a_reorder_buffer_smaller_than_a_unit_discards_every_unit_beyond_a_gap(watch):
    """1 KiB holds no 4 KiB unit: every unit beyond a gap overflows, and the receiving hosts' state
    is made by their first overflow (``ReorderBuffer.on_gap``), with nothing ever held."""
    sc = _small(receiver=_rb("1KiB"), outputs={"link_sample_interval": "off"})
    a, ea, seen = _check(sc, *watch)
    assert seen["overflow"] > 0 and not seen.get("held") and a.summary["status"] == "complete"
    assert ea.receiver.hosts and all(hr.peak_hold == 0 for hr in ea.receiver.hosts.values())


#: cells of 2 and 3 MTU packets (256 KiB messages: 64 PSNs, so with 3 the last unit is one packet) in a
#: lossy incast with each receiver, one ACK per unit or every 8th, fixed or adaptive timeouts
CELLS = {f"cells{c}-{rcv}-ack{ae}-{rto}": (c, rcv, ae, rto)
         for c, rcv, ae, rto in itertools.product((2, 3), ("ddp", "go_back_n", "reorder_buffer"), (1, 8),
                                                  ("fixed", "adaptive"))}


@pytest.mark.parametrize("case", list(CELLS))
def test_cells_run_compiled_with_the_heap_kernels_results(case, watch):
    c, model, ae, rto = CELLS[case]
    rcv = _rb("24KiB") if model == "reorder_buffer" else {"model": model}
    rcv.update(rto_mode=rto, **({"ack_every": ae} if ae > 1 else {}))
    sc = _lossy_incast(receiver=rcv, routing={"policy": "spray"},
                       simulation={"seed": 1, "time_limit": "20ms", "cell_packets": c})
    a, ea, seen = _check(sc, *watch)
    run = a.summary["run"]
    assert seen.get("cell_units", 0) > 0 and a.summary["fidelity"]["model"].startswith("packet level with cells")
    assert run["dropped_packets"] > 0 and run["retransmitted_payload_bytes"] > 0
    if model == "go_back_n":
        assert a.messages["naks"].sum() > 0
    else:
        assert seen.get("joined_cells", 0) > 0
    if model != "go_back_n" or ae > 1:
        assert seen.get("advance_cells", 0) > 0   # (go-back-N acknowledges one unit at a time per ACK)
    if model == "reorder_buffer":
        assert seen.get("overflow", 0) > 0
    if ae > 1 and model != "go_back_n":
        assert seen.get("bitmap_cells", 0) > 0


#: both features with the cluster features and congestion control
_MARK = {"ecn": {"enabled": True, "kmin": "4KB", "kmax": "16KB"}}
COMBOS = {
    # 2 planes per packet: units of 2 packets spread over both ports, coalesced ACKs by reply_nic's port
    "planes-per-packet-coalesced": lambda tmp: _planes(
        **_PLANES_INCAST, receiver=_rb("12KiB", ack_every=8),
        simulation={"seed": 1, "time_limit": "20ms", "cell_packets": 2}),
    # 4 planes per flow under PFC with adaptive timeouts
    "planes-4-per-flow-pfc-adaptive": lambda tmp: _planes(
        ports=4, split="per_flow", **{**_PLANES_INCAST, "switch": {**_PLANES_INCAST["switch"], **_PFC}},
        receiver=_rb("8KiB", rto_mode="adaptive"), routing={"policy": "adaptive"},
        simulation={"seed": 1, "time_limit": "20ms", "cell_packets": 3}),
    # 2 NVL36 racks with 2 NIC planes: RoCE between the racks in cells, NVLink (its own units) inside
    "nvl36-racks": lambda tmp: {
        "name": "recv_racks", "topology": {**_RACKS, "switch": {"buffer": {"size": "64KiB"}}},
        "traffic": _two_racks(tmp), "routing": {"policy": "spray"}, "receiver": _rb("32KiB"),
        "simulation": {"seed": 3, "cell_packets": 2}, "outputs": {"link_sample_interval": "off"}},
    # PXN: a relayed incast from 30 GPUs of one NVL36 rack into GPU 40 of the other, with dcqcn_cx,
    # ACK and NAK in the strict class and coalesced ACKs
    "pxn-dcqcn_cx-strict-control-coalesced": lambda tmp: _pxn(
        traffic={"pattern": "incast", "senders": 30, "receiver": 40, "message_size": "256KiB"},
        topology={**_RACKS, "nodes": None, "switch": {"buffer": {"size": "64KiB"}}}, chunk="64KiB",
        congestion_control={"algorithm": "dcqcn_cx", "min_time_between_cnps": "4us"},
        switch={**_MARK, "strict_priority": "control"}, receiver=_rb("16KiB", ack_every=4),
        simulation={"seed": 1, "time_limit": "20ms", "cell_packets": 2}),
    # telemetry with INT on a leaf-spine incast, dcqcn on a lossless one
    "telemetry-int-coalesced": lambda tmp: _lossy_incast(
        congestion_control={"algorithm": "telemetry"}, receiver=_rb("16KiB", ack_every=4, rto_mode="adaptive"),
        routing={"policy": "spray"}, simulation={"seed": 1, "time_limit": "20ms", "cell_packets": 2}),
    "dcqcn-pfc": lambda tmp: _lossy_incast(
        congestion_control={"algorithm": "dcqcn", "cnp_interval": "4us"}, receiver=_rb("12KiB"),
        routing={"policy": "spray"}, switch={**_MARK, **_PFC},
        simulation={"seed": 1, "time_limit": "20ms", "cell_packets": 3}),
}


@pytest.mark.parametrize("case", list(COMBOS))
def test_reorder_buffer_and_cells_with_the_cluster_features_run_compiled_identically(case, tmp_path, watch):
    sc = COMBOS[case](tmp_path)
    a, ea, seen = _check(sc, *watch)
    assert seen.get("cell_units", 0) > 0 and seen.get("held", 0) > 0 and seen.get("overflow", 0) > 0
    states = list(ea._rows) + list(ea.pieces)
    qps = [qp for st in states for qp in st.qps]
    if "planes" in case or "nvl36" in case or "pxn" in case:
        assert any(len(nics) > 1 for nics in ea.nics.values())
    if "per-packet" in case:
        assert any(len(qp.nics) == 2 for qp in qps)
    if "per-flow" in case:
        assert max(len(qp.nics) for qp in qps) == 1
    if "nvl36" in case or "pxn" in case:
        assert any(qp.nics[0].nvlink for qp in qps) and any(not qp.nics[0].nvlink for qp in qps)
    if "pxn" in case:
        assert ea.pieces and sum(p.overflow_bytes for p in ea.pieces) > 0
    if "dcqcn" in case:
        assert a.messages["cnps"].sum() > 0
    if "coalesced" in case:
        assert seen.get("bitmap_cells", 0) > 0
    if "pfc" in case:
        assert a.summary["run"]["dropped_packets"] == 0 and a.links["pfc_pause_events"].sum() > 0


def test_cells_whose_packet_size_leaves_int64_fall_back():
    """A data unit's wire bytes (``cell_packets x (mtu + header)``) times a link's ``PS_BITS / rate``
    denominator is formed in int64: cells of 1,024 packets (4.3 MB) on a link whose rate shares no
    factor with 8e12 go to heap and say why; at 400 Gbit/s (20 ps per byte) they run compiled."""
    fabric = {"kind": "leaf_spine", "hosts_per_leaf": 2, "leaves": 2, "spines": 1,
              "buffer": {"size": "unbounded"}}
    sc = {"name": "big_cells", "traffic": {"pattern": "permutation", "message_size": "8MiB"},
          "simulation": {"seed": 1, "time_limit": "1ms", "cell_packets": 1024},
          "outputs": {"link_sample_interval": "off"}}
    odd = {**fabric, "host_link": {"rate": "399999999997bps"}}
    b = fabricsim.run({**sc, "topology": odd}, overrides=["simulation.kernel=compiled"])
    info = b.summary["run"]["kernel"]
    assert info["ran"] == "heap" and "a packet (cell_packets x (simulation.mtu + header)" in info["fallback"], info
    ok = fabricsim.run({**sc, "topology": {**fabric, "host_link": {"rate": "400Gbps"}}},
                       overrides=["simulation.kernel=compiled"])
    assert ok.summary["run"]["kernel"] == {"requested": "compiled", "ran": "compiled"}
