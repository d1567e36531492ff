"""Packet-level engine: every packet (or cell) crosses every hop as one scheduled callback.

Data path, per packet:

1. ``Nic.tx`` (:mod:`fabricsim.net.nic`): the source NIC picks the next queue pair allowed to
   send (round-robin, pacing, window), cuts one unit (a retransmission first), serialises it on
   its port and schedules the unit's arrival at the peer switch.
2. ``Switch.arrive`` (:mod:`fabricsim.net.switch`): routing policy, Lindley queue with drop-tail,
   ECN marking and telemetry, arrival at the next node.
3. The receiver model (:mod:`fabricsim.receiver`) accepts, holds or discards the unit, completes
   the message and returns ACK / NAK / CNP packets, which cross the fabric back like any other.
4. The sender (:mod:`fabricsim.net.sender`) frees the window, detects losses, retransmits and
   feeds the congestion-control algorithm (:mod:`fabricsim.cc`).

With ``switch.pfc.enabled`` the ports run as explicit lossless queues instead
(:mod:`fabricsim.net.lossless`).

Inside an NVLink domain with ``nvlink.transport: credit`` (the default) GPU links, chips and the
destination GPU are :mod:`fabricsim.net.nvlink` objects: per-link credit flow control, no ACKs, a
message completes when its last byte arrives. Everything leaving the domain keeps the path above.

Replay (when a message is posted: start times, dependencies, compute gaps, failure propagation;
and the posting-order FIFO, in-order completion and error flush of persistent connections) lives
in :mod:`fabricsim.flows.replay`, shared with the other engines: this engine asks its
:class:`~fabricsim.flows.replay.Replay` and :class:`~fabricsim.flows.replay.Connections` (by
message row) what to release, start and finish, and keeps only its own per-message transport
state (:class:`MessageState`), the PXN pieces and the NIC's ``on_sent`` hook.
"""
from __future__ import annotations

import gc
from operator import attrgetter
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from ..analysis.ideal import base_rtt_ps
from ..cc import CC, CongestionControl, Flow
from ..planes import SPLITS
from ..receiver import RECEIVERS
from ..routing import ROUTING
from ..net.lossless import LosslessPort, LosslessSwitch, Pfc
from ..errors import SimulationError
from ..net.nic import Nic
from ..net.nvlink import NvlinkNic, NvlinkPort, NvlinkRx, NvlinkSwitch
from ..flows.identity import FLOWS_SALT_STREAM, ConnectionTable
from ..flows.pxn import legs as pxn_legs
from ..flows.replay import CONNECTION_ERROR, DEPENDENCY_INCOMPLETE, Connections, Replay
from ..net.packet import DATA, QueuePair
from ..net.port import Port
from ..net.sender import Sender
from ..net.switch import ECN_SALT_STREAM, Switch
from ..traffic.message import Message
from .interface import ENGINES, TIMED_FIGURES, RunOutcome, SimulationInput
from .kernel import make_kernel


class MessageState:
    """Runtime state of one message, and its transport statistics (see docs/metrics.md)."""

    __slots__ = ("msg", "row", "size", "release", "end", "delivered", "dropped", "injected", "done", "reason", "parent", "next_stage", "final", "qps", "on_sent", "deferred",
                 # transport statistics
                 "rtx_bytes", "dup_bytes", "rx_units", "ooo_units", "reorder_hist", "peak_hold",
                 "reorder_wait_ps", "reorder_wait_max_ps", "ecn_marked", "cnps", "acks", "naks", "naks_sent",
                 "overflow_bytes", "discarded_bytes",
                 # control-packet bookkeeping for the end-of-run conservation check
                 "cnps_sent", "ctrl_arrived", "ctrl_dropped")

    def __init__(self, msg, parent=None, final=True, row=None):
        self.msg = msg
        self.row = row            # row of the message in the run's messages (flows.replay); None: a PXN piece
        self.size = msg.size_bytes
        self.release = None
        self.end = None
        self.delivered = 0
        self.dropped = 0          # payload bytes of this message's packets dropped by switches
        self.injected = 0         # payload bytes sent for the first time
        self.done = False
        self.reason = ""
        self.parent = parent      # PXN: the user's message this piece belongs to
        self.next_stage = None    # PXN: the piece to send from the relay once this one is in
        self.final = final        # delivered bytes reach the message's destination (count as goodput)
        self.qps = []
        #: called as ``on_sent(state, t)`` by the NIC that sends the message's last new byte at ``t``
        #: (the connection's next message may start then); None: nobody waits for it
        self.on_sent = None
        self.deferred = False     # all in, its completion waits for earlier messages on its connection
        self.rtx_bytes = {}       # cause -> payload bytes retransmitted
        self.dup_bytes = 0        # payload bytes that arrived again after being accepted
        self.rx_units = 0         # data units received (not duplicates)
        self.ooo_units = 0        # ... of which out of order
        self.reorder_hist = {}    # reorder distance (PSNs) -> units
        self.peak_hold = 0        # peak bytes held beyond the in-order prefix (one queue pair)
        self.reorder_wait_ps = 0  # total time held units waited for the gap before them
        self.reorder_wait_max_ps = 0
        self.ecn_marked = 0       # MTU packets that arrived CE-marked
        self.cnps = 0             # CNPs that reached the sender
        self.acks = 0             # ACKs sent by the receiver
        self.naks = 0             # NAKs that reached the sender
        self.naks_sent = 0
        self.overflow_bytes = 0   # reorder buffer full: discarded
        self.discarded_bytes = 0  # go-back-N: out-of-order units discarded
        self.cnps_sent = 0        # CNPs the receiver sent
        self.ctrl_arrived = 0     # control packets (ACK/NAK/CNP) that reached the sender's host
        self.ctrl_dropped = 0     # control packets dropped by switches

    def absorb(self, piece: "MessageState"):
        """Add a PXN piece's transport statistics to this (parent) message."""
        for k, v in piece.rtx_bytes.items():
            self.rtx_bytes[k] = self.rtx_bytes.get(k, 0) + v
        for k, v in piece.reorder_hist.items():
            self.reorder_hist[k] = self.reorder_hist.get(k, 0) + v
        for f in ("dup_bytes", "rx_units", "ooo_units", "reorder_wait_ps", "ecn_marked", "cnps", "acks", "naks",
                  "naks_sent", "overflow_bytes", "discarded_bytes"):
            setattr(self, f, getattr(self, f) + getattr(piece, f))
        self.peak_hold = max(self.peak_hold, piece.peak_hold)
        self.reorder_wait_max_ps = max(self.reorder_wait_max_ps, piece.reorder_wait_max_ps)


class PacketParams(BaseModel):
    """``simulation.packet``: the packet engine's own parameters.

    ``simulation.kernel`` and ``simulation.cell_packets`` are aliases of these two fields (they
    were top-level before the packet engine had its own block; a value given both ways must
    agree). ``simulation.mtu`` and ``simulation.header`` stay shared: the flow engine frames its
    fluid bytes and its packet-train floor with them, and so do the ideal references."""

    model_config = ConfigDict(extra="forbid", validate_default=True)
    kernel: Literal["heap", "simpy", "compiled"] = Field("heap", description=(
        "event agenda implementation; 'compiled' runs the datapath compiled with numba where the "
        "scenario is inside its compiled slice (docs/compiled-core.md), else on 'heap', and says so"))
    cell_packets: StrictInt = Field(1, ge=1, le=1024,
                                    description="MTU-sized packets simulated as one unit (1 = exact)")


#: a flow's counters in :meth:`PacketEngine.conservation`'s balance, read at once
_BALANCE_TERMS = attrgetter("injected", "rtx_bytes", "delivered", "dup_bytes", "overflow_bytes", "discarded_bytes",
                            "dropped", "acks", "naks_sent", "cnps_sent", "ctrl_arrived", "ctrl_dropped")


@ENGINES.register("packet")
class PacketEngine:
    """Packet-level discrete-event engine (see module doc)."""

    name = "packet"
    Params = PacketParams

    def __init__(self, sim: SimulationInput, recorder):
        self.sim = sim
        self.recorder = recorder
        recorder.rows_rebuilt_at_end()            # run()'s recorder.refresh() makes the final rows
        sc = sim.scenario
        simcfg = sc.simulation
        params: PacketParams = simcfg.engine_params or PacketParams()
        # kernel: compiled is chosen once the engine is built (it flattens the built objects)
        self.kernel = make_kernel("heap" if params.kernel == "compiled" else params.kernel)
        self.time_limit = simcfg.time_limit
        topo = sim.topology
        g = topo.graph
        streams = sim.streams
        self.mtu = simcfg.mtu
        self.cell = params.cell_packets
        self.header = simcfg.header
        self.routing = ROUTING.get(sc.routing.name)(sc.routing.params, streams)
        self.cc = CC.get(sc.congestion_control.name)(sc.congestion_control.params, self.kernel)
        self.receiver = RECEIVERS.get(sc.receiver.name)(sc.receiver.params, self)
        self.sender = Sender(self, sc.receiver.params, self.cc, self.receiver.selective)
        self._push = self.kernel.push
        self._on_packet = self.receiver.on_packet
        self._on_ctrl = self.sender.on_ctrl
        feats = sc.switch
        ecn = feats.ecn
        stamp = feats.telemetry == "on" or (feats.telemetry == "auto" and self.cc.uses_int)
        ecn_salt = streams.u64(ECN_SALT_STREAM)
        self.dropped_payload = 0
        self.dropped_packets = 0
        self.dropped_ctrl = 0
        # nodes
        self.pfc = (Pfc(feats.pfc, self.kernel, stamp, self.cell * (simcfg.mtu + simcfg.header))
                    if feats.pfc.enabled else None)
        switch_cls, port_cls = (LosslessSwitch, LosslessPort) if self.pfc else (Switch, Port)
        # NVLink chips with credit flow control (net/nvlink.py); they connect only to GPUs
        nvsw = {n for n in topo.switches if g.nodes[n].get("nvlink_transport") == "credit"}
        for n in nvsw:
            for m in g.neighbors(n):
                if g.nodes[m]["type"] != "host":
                    raise SimulationError(f"NVLink switch {g.nodes[n]['name']} links to switch "
                                          f"{g.nodes[m]['name']}: nvlink.transport credit models a single "
                                          f"switch hop (NVLink switches connect only to GPUs)")
        self.nvrx = NvlinkRx(self)
        self.switches: dict[int, Switch] = {}
        for n in topo.switches:
            if n in nvsw:
                sw = NvlinkSwitch(n, g.nodes[n]["name"], self)
                sw.paths = sim.paths
                sw.choose = self.routing.choose
                sw.kernel = self.kernel
                sw.push = self.kernel.push
                sw.seq = self.kernel.seq
                self.switches[n] = sw
                continue
            sw = switch_cls(n, g.nodes[n]["name"], self)
            if self.pfc:
                sw.pfc = self.pfc
            sw.paths = sim.paths
            sw.choose = self.routing.choose
            sw.kernel = self.kernel
            sw.push = self.kernel.push
            sw.seq = self.kernel.seq
            if ecn.enabled:
                sw.kmin, sw.kmax, sw.pmax, sw.ecn_salt = ecn.kmin, ecn.kmax, ecn.pmax, ecn_salt
            sw.stamp = stamp
            self.switches[n] = sw
        self.nics: dict[int, list[Nic]] = {h: [] for h in topo.hosts}
        self.ports: list[Port] = []
        for u, v, _k, d in topo.links():
            if u in nvsw or v in nvsw:
                self._nvlink_link(u, v, d, nvsw)
                continue
            for a, b in ((u, v), (v, u)):
                peer_lat = g.nodes[b].get("switch_latency_ps", 0) if g.nodes[b]["type"] == "switch" else 0
                per_port_buf = None
                if g.nodes[a]["type"] == "switch" and g.nodes[a].get("buffer_mode") == "per_port":
                    per_port_buf = g.nodes[a].get("buffer_bytes")
                p = port_cls(len(self.ports), a, b, d["kind"], d["rate_bps"], d["delay_ps"], peer_lat, per_port_buf)
                if self.pfc:
                    p.pfc = self.pfc
                self.ports.append(p)
                if g.nodes[b]["type"] == "switch":
                    p.deliver = self.switches[b].arrive
                else:
                    p.deliver = self._to_host
                if g.nodes[a]["type"] == "switch":
                    sw = self.switches[a]
                    sw.port_to.setdefault(b, []).append(p)
                    sw.ports.append(p)
                else:
                    nic = Nic(a, p, self, self.kernel, simcfg.mtu, simcfg.header, self.cell,
                              1 << len(self.nics[a]))
                    if type(self.cc).on_send is not CongestionControl.on_send:
                        nic.on_send = self.cc.on_send
                    nic.arm = self.sender.arm
                    if self.pfc:
                        p.nic = nic
                    self.nics[a].append(nic)
        for n, sw in self.switches.items():
            sw.setup(feats, g.nodes[n], self._to_host)     # priority classes, ECN sampling, INT, buffer pool
        # messages
        # (the collector paused while a state per message is made, as in run(): millions of new
        # objects and no cycles, which would otherwise set off full collections over them)
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            self._rows = [MessageState(m, row=i) for i, m in enumerate(sim.messages)]   # by row
            self.states = {st.msg.id: st for st in self._rows}                       # by message id
        finally:
            if gc_was_enabled:
                gc.enable()
        # releases, dependencies, compute gaps (flows/replay.py); connection order by row
        self.replay = Replay(sim.messages, simcfg.compute)
        self.conns = Connections(self.replay.table)
        self._eligible: dict = {}
        self.split = SPLITS.get(sc.nic.name)(sc.nic.params, streams)
        self.pxn = bool(sc.nic.params and sc.nic.params.pxn)
        self.pxn_chunk = sc.nic.params.pxn_chunk if sc.nic.params else 0
        self.pieces: list[MessageState] = []   # PXN chunks (not in the messages table)
        self._last_t = 0                         # last message completion (end of a drained run)
        self.gpu_compute = simcfg.compute == "gpu"
        self.gpu_busy = self.replay.gpu_busy     # GPU -> total compute time so far
        self._salt = streams.u64(FLOWS_SALT_STREAM)
        self.connections = ConnectionTable(self._salt)   # queue-pair uids and 5-tuples (net/packet.py)
        self._conn_qp: dict = {}     # queue-pair uid of a connection -> its latest QueuePair (RTT estimators)
        self.remaining = len(self.states)
        self._rtt: dict = {}
        self._final_links = None
        if self.cc.needs_fabric_base_rtt:   # e.g. HPCC ns-3 GLOBAL_T: one T for every flow
            self.cc.set_fabric_base_rtt(self.max_base_rtt())
        self.kernel_info = {"requested": params.kernel, "ran": self.kernel.name}
        self._qp_queues = True          # queue pairs hold their PSN queues (not when the compiled core runs)
        if params.kernel == "compiled":
            self._use_compiled()

    def _use_compiled(self):
        """``kernel: compiled``: hand the datapath to the compiled core if the scenario is inside its
        slice, else stay on ``heap`` and say why (docs/compiled-core.md 4.3)."""
        from .compiled.coverage import uncovered
        gaps = uncovered(self)
        if gaps:
            more = f" (and {len(gaps) - 1} more: {', '.join(gaps[1:])})" if len(gaps) > 1 else ""
            self.kernel_info["fallback"] = (f"kernel: compiled does not run {gaps[0]} yet{more}; this run uses "
                                            f"kernel: heap (the same model at Python speed)")
            return
        from .compiled import CompiledKernel
        self.kernel = CompiledKernel(self)
        self.kernel_info["ran"] = "compiled"
        self._qp_queues = False

    def _nvlink_link(self, u, v, d, nvsw):
        """Both directions of a GPU-chip link of a credit-flow-controlled NVLink domain."""
        g = self.sim.topology.graph
        for a, b in ((u, v), (v, u)):
            peer_lat = g.nodes[b].get("switch_latency_ps", 0) if b in nvsw else 0
            p = NvlinkPort(len(self.ports), a, b, d["kind"], d["rate_bps"], d["delay_ps"], peer_lat, None,
                           buffer_bytes=d["credit_bytes"])
            self.ports.append(p)
            if b in nvsw:                     # GPU -> chip
                sw = self.switches[b]
                p.deliver = sw.arrive
                na = g.nodes[b]
                nic = NvlinkNic(a, p, self, self.kernel, 1 << len(self.nics[a]), na["nvlink_unit_bytes"],
                                na["nvlink_packet_payload_bytes"], na["nvlink_packet_header_bytes"])
                p.nic = nic
                if na["nvlink_spread"] == "stripe":
                    nic.stripe = {}
                    nic.pos = sum(1 for x in self.nics[a] if x.nvlink)
                self.nics[a].append(nic)
            else:                             # chip -> GPU
                p.deliver = self.nvrx.arrive
                sw = self.switches[a]
                sw.port_to.setdefault(b, []).append(p)
                sw.ports.append(p)

    def _to_host(self, t, pkt):
        """Arrival at a host: advance the port's inflight (as Switch.arrive), then the receiver
        (data) or the sender (ACK, NAK, CNP)."""
        inflight = pkt.hop.inflight
        inflight.popleft()
        if inflight:
            self._push(inflight[0])
        if pkt.kind == DATA:
            self._on_packet(t, pkt)
        else:
            self._on_ctrl(t, pkt)

    def reply_nic(self, qp) -> Nic:
        """The NIC port the receiver of ``qp`` sends its next control packet by.

        A queue pair that uses one port gets its control packets back on one port, fixed by its
        hash (cached in ``qp.r_port``). One that sprays over several ports (``per_packet`` over
        planes, or NVLink links with ``transport: roce``) gets them spread over the receiving
        host's ports towards the sender: each goes by the port whose wire frees first, ties broken
        in turn from a per-queue-pair rotation, so no single link carries all of them."""
        nics = self.eligible_nics(qp.dst, qp.src)
        n = len(nics)
        if n == 1 or len(qp.nics) == 1:
            nic = qp.r_port = nics[qp.hash % n]
            return nic
        now = self.kernel.now
        start = (qp.hash + qp.msg.acks + qp.msg.naks_sent) % n
        best = None
        best_t = 0
        for i in range(n):
            nic = nics[(start + i) % n]
            bu = nic.free_at(now)
            if best is None or bu < best_t:
                best, best_t = nic, bu
        return best

    def base_rtt(self, src: int, dst: int) -> int:
        """Round trip of one MTU packet and its ACK on an idle shortest path (ps)."""
        key = (src, dst)
        v = self._rtt.get(key)
        if v is None:
            v = self._rtt[key] = base_rtt_ps(self.sim.topology, self.sim.paths, src, dst, self.mtu + self.header,
                                             self.sim.scenario.receiver.params.ack_size)
        return v

    def max_base_rtt(self) -> int:
        """The largest :meth:`base_rtt` over ordered pairs of distinct hosts (ps).

        Hosts attached alike (the same switches over links of the same rate and delay) have the
        same idle round trips, so one pair per pair of such groups is measured (two members of a
        group for the pair within it): a few hundred pairs instead of H(H-1) on a leaf-spine.
        """
        g = self.sim.topology.graph
        groups: dict = {}
        for h in self.sim.topology.hosts:
            sig = tuple(sorted((nbr, d["rate_bps"], d["delay_ps"]) for _, nbr, d in g.edges(h, data=True)))
            groups.setdefault(sig, []).append(h)
        reps = list(groups.values())
        best = 0
        for a in reps:
            for b in reps:
                if a is b and len(a) < 2:
                    continue
                src, dst = a[0], (b[1] if a is b else b[0])
                best = max(best, self.base_rtt(src, dst), self.base_rtt(dst, src))
        return best

    def fail_qp(self, qp, t, reason: str):
        """A queue pair gave up (retry limit): its message fails with ``reason``."""
        st = qp.msg
        self._stop(st)
        if st.done:
            return
        st.reason = reason
        self.message_done(st, t)

    @staticmethod
    def _stop(st: MessageState):
        """Stop every queue pair of ``st``: nothing more is sent or resent for it."""
        for q in st.qps:
            q.sent_done = True
            q.flow.active = False
            q.rtx.clear()
            q.seq = q.npsn

    # ------------------------------------------------------------------ message lifecycle
    def release(self, t, st: MessageState):
        """A message is posted (its dependencies and gap are over): hand it to its source NIC, or,
        on a busy connection, queue it behind the message in progress there.

        Connections (``Message.conn >= 0``, docs/traces.md "Connections"): the messages of
        connection ``(conn, src, dst)`` reuse its queue pairs (:class:`ConnectionTable`) and run
        in the order they are posted, as a queue pair processes its work requests
        (:class:`~fabricsim.flows.replay.Connections`): a message posted while an earlier one is
        still sending waits (FIFO) and starts when that one has put its last new byte on the wire
        (:meth:`_conn_sent`; its retransmissions, if any, may follow), or when it completes or
        fails if that comes first (:meth:`message_done`). Its ``release_ps``
        stays the time it was posted, so the wait counts in its completion time. A message only
        ever waits for messages posted before it, which never wait for it: the rule cannot
        deadlock. PXN pieces (``st.parent``) are never queued: the user's message holds the
        connection until it completes."""
        m = st.msg
        st.release = t
        if st.parent is None:   # PXN pieces are not messages of the pattern
            self.recorder.on_release(st, t)
            if m.conn >= 0:
                how = self.conns.post(st.row)
                if how == "wait":               # behind the message in progress on its connection
                    return
                if how == "error":              # the connection is in error: flushed at once
                    st.reason = CONNECTION_ERROR
                    self._finish(st, t)
                    return
        self._start(t, st)

    def _start(self, t, st: MessageState):
        """Split a message over its queue pairs and put them on the source NIC ports (or relay it:
        PXN)."""
        m = st.msg
        if self.pxn and st.parent is None:
            relay = self.sim.paths.pxn_relay(m.src, m.dst)
            if relay is not None:
                self._release_via(t, st, relay)
                return
        if m.conn >= 0 and st.parent is None:
            st.on_sent = self._conn_sent
        eligible = self.eligible_nics(m.src, m.dst)
        nvlink = eligible[0].nvlink
        for uid, sport, h, size in self.connections.open(m.src, m.dst, m.size_bytes, m.qps, m.conn):
            if nvlink:
                # NVLink: units of the domain's size, no congestion control, no ACK (net/nvlink.py)
                unit = eligible[0].unit
                qp = QueuePair(uid, st, m.src, m.dst, sport, h, size, unit, self._qp_queues)
                nics = qp.nics = self.split.ports(qp, eligible)
                qp.flow = Flow(uid, sum(n.port.rate for n in nics), 0, unit)
                qp.sent_done = True           # nothing for the sender's timers or ACK processing
            else:
                qp = QueuePair(uid, st, m.src, m.dst, sport, h, size, self.mtu, self._qp_queues)
                if m.conn >= 0:
                    # a persistent queue pair keeps one RTT estimator for all its messages: the
                    # next one takes it over, and late ACKs of earlier ones feed it (Sender._rtt_sample)
                    prev = self._conn_qp.get(uid)
                    if prev is not None:
                        qp.srtt, qp.rttvar = prev.srtt, prev.rttvar
                        prev.heir = qp
                    self._conn_qp[uid] = qp
                nics = qp.nics = self.split.ports(qp, eligible)
                # (the idle RTT is worked out when first read: CC none with fixed timeouts never does)
                flow = qp.flow = Flow(uid, sum(n.port.rate for n in nics),
                                      lambda src=m.src, dst=m.dst: self.base_rtt(src, dst), self.mtu)
                self.cc.start(flow, t)
            st.qps.append(qp)
            if nvlink and len(nics) > 1:
                # start each queue pair's links at the next one in turn: ports started at the same
                # instant send in start order, and a common order would give every sender's spare
                # units to the same chips
                r = uid % len(nics)
                nics = nics[r:] + nics[:r]
            for nic in nics:
                nic.add(t, qp)

    def _conn_sent(self, st: MessageState, t: int):
        """The NIC sent ``st``'s last new byte, leaving the wire at ``t``: the next message posted
        on its connection starts then."""
        st.on_sent = None
        self.kernel.schedule(t, self._next_on_connection, st)

    def _next_on_connection(self, t: int, st: MessageState):
        """``st`` (on a connection) has sent everything or ended: start the next message posted on
        its connection (once per message)."""
        if st.on_sent is False:
            return
        st.on_sent = False
        for row in self.conns.sent(st.row):
            self._start(t, self._rows[row])

    def _release_via(self, t, st: MessageState, relay: int):
        """PXN: cut the message into chunks; each goes src -> relay (NVLink, not counted as
        goodput), then relay -> dst as soon as that chunk is in."""
        m = st.msg
        for a, b in pxn_legs(m.src, m.dst, relay, m.size_bytes, m.qps, m.conn, self.pxn_chunk):
            second = MessageState(Message(m.id, b.src, b.dst, b.size_bytes, qps=b.qps, conn=b.conn), parent=st)
            first = MessageState(Message(m.id, a.src, a.dst, a.size_bytes, qps=a.qps, conn=a.conn), parent=st,
                                 final=a.final)
            first.next_stage = second
            self.pieces.append(first)
            self.pieces.append(second)
            self.release(t, first)

    def _piece_done(self, piece: MessageState, t: int):
        parent = piece.parent
        parent.absorb(piece)
        parent.dropped += piece.dropped
        if piece.reason:
            if not parent.reason:
                parent.reason = piece.reason
            self.message_done(parent, t)
            return
        if piece.next_stage is not None:
            self.release(t, piece.next_stage)
            return
        parent.delivered += piece.delivered
        if parent.delivered == parent.size:
            self.message_done(parent, t)

    def eligible_nics(self, src: int, dst: int) -> list:
        """The source host's NIC ports that lead towards ``dst`` (see EqualCostPaths.first_hops)."""
        key = (src, dst)
        nics = self._eligible.get(key)
        if nics is None:
            first = set(self.sim.paths.first_hops(src, dst))
            nics = self._eligible[key] = [n for n in self.nics[src] if n.port.peer in first]
            if not nics:
                raise RuntimeError(f"host {src} has no port towards host {dst}")
        return nics

    def message_done(self, st: MessageState, t: int):
        if st.done:
            return
        m = st.msg
        if m.conn >= 0 and st.parent is None:
            # a queue pair completes its work requests in order: a message whose bytes are all in
            # before an earlier one on its connection has completed waits for it (and completes
            # then, with it); the connection's next message may start regardless (on_sent).
            # A queue pair that gave up goes to the error state: it reports this message's error
            # now, and every later work request on it, started or not, completes with an error
            # too (flushed); messages before it run on (flows/replay.py, Connections.done)
            st.on_sent = False
            rows = self._rows
            start, finish, flush = self.conns.done(st.row, bool(st.reason))
            for row in start:
                self._start(t, rows[row])
            if not finish:
                st.deferred = True
                return
            for row in finish:
                self._finish(rows[row], t)
            for row in flush:
                x = rows[row]
                self._stop(x)
                x.on_sent = False
                if not x.done:
                    x.reason = CONNECTION_ERROR
                    self._finish(x, t)
            return
        self._finish(st, t)

    def _finish(self, st: MessageState, t: int):
        """``st`` completed (or failed) at ``t``: record it, release its dependents."""
        st.done = True
        st.end = t
        if t > self._last_t:
            self._last_t = t
        if st.parent is not None:
            self._piece_done(st, t)
            return
        self.remaining -= 1
        self.recorder.on_message(st)
        if not self.remaining:
            # the pattern is over: freeze the link counters here (ACKs still in flight and timers
            # that would find nothing to do are not part of the run) and wind the kernel down
            self._settle_ports(t)
            self._final_links = self._link_rows(t)
            self._final_snapshot = self._snapshot(t)
            self.kernel.stop()
        rows = self._rows
        if st.reason:
            for row in self.replay.failed(st.row):
                rows[row].reason = DEPENDENCY_INCOMPLETE
            return
        for rel, row in self.replay.completed(st.row, t):
            self.kernel.schedule(rel, self.release, rows[row])

    def _settle_ports(self, t):
        """Dequeue-time ECN/INT of the packets already leaving every switch port at ``t``: the
        port counters as they stand when the run's links are frozen (the compiled core replaces
        this with its own settling and the write-back of its ports)."""
        for sw in self.switches.values():
            for p in sw.ports:
                if getattr(p, "pend", None):
                    sw.settle(p, t)

    def drop(self, port: Port, pkt):
        """A switch dropped ``pkt`` (buffer full): counted on the link; the transport recovers it."""
        port.drops += 1
        port.dropped_bytes += pkt.wire
        if pkt.kind != DATA:
            port.ctrl_drops += 1
            self.dropped_ctrl += 1
            pkt.qp.msg.ctrl_dropped += 1
            return
        self.dropped_payload += pkt.payload
        self.dropped_packets += pkt.npk
        pkt.qp.msg.dropped += pkt.payload

    # ------------------------------------------------------------------ run
    def _sample_links(self, t, _):
        """Periodic snapshot of every link: cumulative bytes sent and bytes queued. Reads state
        only, so it changes nothing simulated; it reschedules itself while other events remain."""
        if not self.kernel.pending():
            # nothing else left: the simulation ended before this sample (at self._last_t)
            self._sampler_overshot = True
            return
        self.link_samples.append(self._snapshot(t))
        if len(self.link_samples) * len(self.ports) >= self._sample_budget:
            self.link_samples_truncated = True
            return
        self.kernel.schedule(t + self._sample_every, self._sample_links, None)

    def run(self, progress=None) -> RunOutcome:
        """Run to the last message completion (or the time limit, an interruption, a stall).

        Status: ``complete`` when every message completed; ``incomplete_failed`` when every message
        ended but some failed (``retry_exceeded``, ``dependency_incomplete``, ``connection_error``); ``time_limit``,
        ``interrupted`` or ``stalled`` (nothing left to do, messages unfinished) otherwise. The
        end-of-run byte and packet balance (:meth:`conservation`) is checked before returning;
        a failure raises :class:`~fabricsim.errors.SimulationError`.
        """
        rows = self._rows
        for t0, row in self.replay.initial():
            self.kernel.schedule(t0, self.release, rows[row])
        every = self.sim.scenario.outputs.link_sample_interval
        self.link_samples: list = []
        self.link_samples_truncated = False
        self._sampler_overshot = False
        if every != "off" and self.ports and self.sim.scenario.outputs.link_sample_budget:
            self._sample_every = every
            self._sample_budget = self.sim.scenario.outputs.link_sample_budget
            self.kernel.schedule(0, self._sample_links, None)
        # control packets are counted per message where they reach the sender's host
        self._on_ctrl = self._ctrl_arrived
        # The cyclic garbage collector is paused while events run: the data path creates no
        # reference cycles (packets and agenda entries are freed by reference counting), but the
        # collector would still walk the growing set of packets in flight, which cost 16% of a
        # 128-host ECMP run (benchmarks/README.md). It runs again, and catches up, afterwards.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            how = self.kernel.run(self.time_limit, progress=progress)
        except KeyboardInterrupt:
            how = "interrupted"
        finally:
            if gc_was_enabled:
                gc.enable()
        now = self.kernel.now
        if not self.remaining:
            # every message ended: the last one ends the run (the kernel stops at that event);
            # the last ACKs, idle retransmission timers and the link sampler do not count
            now = self._last_t
            self.link_samples = [s for s in self.link_samples if s[0] <= now]
            failed = any(st.reason for st in self.states.values())
            status = "incomplete_failed" if failed else "complete"
        elif how == "time_limit":
            status = "time_limit"
        elif how == "interrupted":
            status = "interrupted"
        else:
            status = "stalled"
        reason = {"time_limit": "time_limit", "interrupted": "interrupted"}.get(status, "")
        for st in self.states.values():
            if not st.done:
                if not st.reason:
                    if st.release is None:
                        st.reason = "not_released" if not reason else reason
                    else:
                        st.reason = reason or "stalled"
                self.recorder.on_message(st)
        # the messages table carries every counter as it stands at the run's end (a message's
        # retransmissions and drops after its own completion included), as the run totals do
        self.recorder.refresh()
        links = self._final_links if (self._final_links is not None and not self.remaining) else self._link_rows(now)
        hops = sum(row["tx_packets"] for row in links)   # up to the run's end, as the links table
        hops_ctrl = sum(row["tx_control_packets"] for row in links)
        counters = {"dropped_packets": self.dropped_packets, "dropped_payload_bytes": self.dropped_payload,
                    "injected_payload_bytes": sum(st.injected for st in self.states.values())
                    + sum(p.injected for p in self.pieces if p.final)}
        counters["dropped_control_packets"] = self.dropped_ctrl
        counters["packet_hops_data"] = hops - hops_ctrl
        counters["packet_hops_control"] = hops_ctrl
        # the engine's byte and packet balance (checked below); the transport's run totals are its sums
        balance = self.conservation()
        counters.update(self.sender.counters(balance["data"]))
        counters["pfc_pause_events"] = sum(p.pause_events for p in self.ports)
        counters["kernel"] = dict(self.kernel_info)
        if self.gpu_compute:
            counters["gpu_compute_busy_ps"] = dict(sorted(self.gpu_busy.items()))
        if hasattr(self.routing, "new_flowlets"):
            counters["new_flowlets"] = self.routing.new_flowlets
        frozen = self._final_links is not None and not self.remaining
        if self.link_samples and self.link_samples[-1][0] < now:
            if frozen:
                self.link_samples.append(self._final_snapshot)
            else:
                self._final_sample(now)
        elif self.link_samples and frozen:
            self.link_samples[-1] = self._final_snapshot      # a periodic sample at the very end
        hosts = {h: hr.peak_hold for h, hr in self.receiver.hosts.items()}
        warnings = self._config_warnings()
        if "fallback" in self.kernel_info:
            warnings.append(self.kernel_info["fallback"])
        counters["conservation"] = balance
        if status != "interrupted" and not balance["holds"]:
            # an interruption can land inside an event, between two counters of one packet
            raise SimulationError("packet conservation violated at the end of the run: "
                                  + "; ".join(balance["violations"][:5])
                                  + (f" (and {len(balance['violations']) - 5} more)"
                                     if len(balance["violations"]) > 5 else ""))
        return RunOutcome(status=status, end_ps=now, events=self.kernel.events, packet_hops=hops,
                          links=links, counters=counters, link_samples=self.link_samples,
                          link_samples_truncated=self.link_samples_truncated, host_peak_hold=hosts,
                          warnings=warnings, fidelity=self.fidelity())

    def fidelity(self) -> dict:
        """``summary["fidelity"]``: every packet through every hop, nothing estimated; with
        ``simulation.packet.cell_packets > 1`` the timed figures are those of cells of k packets."""
        if self.cell == 1:
            return {"engine": self.name, "model": "packet level: every packet through every hop (discrete events)",
                    "estimated": []}
        return {"engine": self.name, "estimated": list(TIMED_FIGURES),
                "model": f"packet level with cells of {self.cell} MTU packets moved as one unit "
                         f"(simulation.packet.cell_packets): coarser timing (docs/metrics.md)"}

    def _ctrl_arrived(self, t, pkt):
        """A control packet reached the host of its queue pair's sender: counted, then processed."""
        pkt.qp.msg.ctrl_arrived += 1
        self.sender.on_ctrl(t, pkt)

    def in_flight(self):
        """Packets in the network now: every packet a port holds (queued, being serialised, or
        propagating towards the next node) and every control packet a host NIC holds for its
        next transmit attempt (``Nic.send_ctrl``), as a list."""
        out = []
        for nics in self.nics.values():
            for nic in nics:
                out.extend(nic.ctrlq)
        for p in self.ports:
            out.extend(entry[3] for entry in p.inflight)
            out.extend(entry[3] for entry in p.lane.inflight)     # strict-priority class (CNPs)
            if isinstance(p, LosslessPort):
                out.extend(p.q)
                out.extend(p.cq)
                if p.cur is not None:
                    out.append(p.cur)
        return out

    def conservation(self) -> dict:
        """Balance of every packet the hosts sent, per message and in total (docs/metrics.md).

        Data, in payload bytes, per transport flow set (a message, or each PXN piece)::

            sent = accepted + duplicate + discarded + dropped + in_flight

        ``sent``: payload the source NIC transmitted, first transmissions and every resend
        (``injected`` + retransmitted); ``accepted``: payload the receiver took in (placed,
        buffered or delivered), counted once; ``duplicate``: payload that arrived again after
        being accepted; ``discarded``: payload the receiver threw away on arrival (go-back-N
        beyond a gap, reorder buffer full); ``dropped``: payload switches dropped; ``in_flight``:
        payload of data packets still held by a port (queued, on the wire) when the run ended.

        Control packets (ACK, NAK, CNP), in packets::

            sent = arrived + dropped + in_flight

        ``sent``: ACKs + NAKs + CNPs the receiver generated; ``arrived``: those that reached the
        sender's host (whether or not the sender still needed them); ``dropped``: dropped by
        switches; ``in_flight``: held by a port, or by a host NIC for its next transmit attempt,
        at the end.

        Totals: the sums of these terms over all messages, plus the engine's own drop counters
        (which must equal the summed per-message drops).

        Returns a dict with the totals (``data``, ``control``), ``holds`` and ``violations``
        (one line per imbalance, empty if it holds).
        """
        flying: dict[int, list] = {}            # id(MessageState) -> [data payload, control packets]
        for pkt in self.in_flight():
            acc = flying.setdefault(id(pkt.qp.msg), [0, 0])
            if pkt.kind == DATA:
                acc[0] += pkt.payload
            else:
                acc[1] += 1
        flows = [st for st in self.states.values() if st.qps] + [p for p in self.pieces if p.qps]
        # (one pass, each flow's counters read at once: a 1,024-GPU all-to-all has a million flows)
        sent = accepted = duplicate = discarded = dropped = in_flight = 0
        c_sent = c_arrived = c_dropped = c_in_flight = 0
        violations = []
        for st, (injected, rtx, delivered, dup, overflow, disc, drop, acks, naks_sent, cnps_sent, arrived,
                 ctrl_dropped) in zip(flows, map(_BALANCE_TERMS, flows)):
            fl = flying.get(id(st))
            fd, fc = (0, 0) if fl is None else fl
            out = injected + sum(rtx.values()) if rtx else injected
            thrown = overflow + disc
            sent += out
            accepted += delivered
            duplicate += dup
            discarded += thrown
            dropped += drop
            in_flight += fd
            if out != delivered + dup + thrown + drop + fd:
                violations.append(f"message {st.msg.id} data: sent {out} B != accepted {delivered} + duplicate "
                                  f"{dup} + discarded {thrown} + dropped {drop} + in flight {fd} B")
            c = acks + naks_sent + cnps_sent
            c_sent += c
            c_arrived += arrived
            c_dropped += ctrl_dropped
            c_in_flight += fc
            if c != arrived + ctrl_dropped + fc:
                violations.append(f"message {st.msg.id} control: sent {c} != arrived {arrived} + dropped "
                                  f"{ctrl_dropped} + in flight {fc} packets")
        data = dict(zip(("sent_payload_bytes", "accepted_payload_bytes", "duplicate_payload_bytes",
                         "discarded_payload_bytes", "dropped_payload_bytes", "in_flight_payload_bytes"),
                        (sent, accepted, duplicate, discarded, dropped, in_flight)))
        ctrl = dict(zip(("sent_packets", "arrived_packets", "dropped_packets", "in_flight_packets"),
                        (c_sent, c_arrived, c_dropped, c_in_flight)))
        if data["dropped_payload_bytes"] != self.dropped_payload:
            violations.append(f"dropped data payload: engine counted {self.dropped_payload} B, messages "
                              f"{data['dropped_payload_bytes']} B")
        if ctrl["dropped_packets"] != self.dropped_ctrl:
            violations.append(f"dropped control packets: engine counted {self.dropped_ctrl}, messages "
                              f"{ctrl['dropped_packets']}")
        return {"data": data, "control": ctrl, "holds": not violations, "violations": violations}

    def _config_warnings(self) -> list:
        """Parameter combinations that make results hard to read, said once per run."""
        out = []
        rto = self.sim.scenario.receiver.params.rto_high
        if self.pfc is None:
            worst = None
            for p in self.ports:
                size = p.buffer
                sw = self.switches.get(p.owner)
                if sw is not None and sw.shared is not None:
                    size = sw.shared.size if size is None else min(size, sw.shared.size)
                if size is not None:
                    drain = p.ser_ps(size)
                    if worst is None or drain > worst[0]:
                        worst = (drain, p, size)
            if worst is not None and worst[0] > rto:
                drain, p, size = worst
                out.append(f"a full buffer drains in {drain / 1e6:.0f} us ({size} B at {p.rate / 1e9:g} Gbps), longer "
                           f"than receiver.rto_high ({rto / 1e6:.0f} us): packets can wait in a queue past the "
                           f"retransmission timeout and be resent spuriously; raise rto_high or shrink the buffer")
        return out

    def _link_rows(self, now):
        """One dict per directed link: its counters at ``now``."""
        return [{
            "link_id": p.index, "src": p.owner, "dst": p.peer, "kind": p.kind, "rate_bps": p.rate,
            "delay_ps": p.delay, "tx_bytes": p.tx_bytes, "tx_data_bytes": p.tx_bytes - p.ctrl_bytes,
            "tx_control_bytes": p.ctrl_bytes, "tx_packets": p.tx_packets, "tx_control_packets": p.ctrl_packets,
            "peak_queue_bytes": p.peak_queue_bytes, "drops_buffer_full": p.drops,
            "dropped_bytes": p.dropped_bytes, "drops_control": p.ctrl_drops, "ecn_marked_packets": p.ecn_marks,
            "pfc_pause_events": p.pause_events,
            "pfc_paused_ps": p.paused_ps + ((now - p.paused_since) if p.paused else 0),
            # PFC figures only where the peer is a lossless switch accounting this link's ingress
            # (not towards hosts, not inside an NVLink credit domain): elsewhere 0
            "pfc_peak_ingress_bytes": p.ingress_peak if self._pfc_link(p) else 0,
            "pfc_headroom_bytes": self.pfc.headroom_bytes(p) if self._pfc_link(p) else 0,
        } for p in self.ports]

    def _pfc_link(self, p) -> bool:
        """True if ``p``'s peer pauses it by PFC (a lossless switch accounts its ingress bytes)."""
        return self.pfc is not None and isinstance(p, LosslessPort) and isinstance(
            self.switches.get(p.peer), LosslessSwitch)

    def _final_sample(self, now):
        self.link_samples.append(self._snapshot(now))

    def _snapshot(self, t):
        """One link sample: ``(t, [wire bytes that have left each port by t], [bytes queued at t])``.

        A lossy port (and a NIC port) counts a packet in ``tx_bytes`` when it is enqueued and its
        backlog is known exactly (Lindley), so what has left is ``tx_bytes - queued``, partial
        packets pro rata. A lossless switch port counts a packet when it starts serialising it and
        its ``queued_bytes`` include packets not started yet; what has left is ``tx_bytes`` less
        the packet on the wire, i.e. whole packets when their last bit is out.
        """
        sent, queued = [], []
        for p in self.ports:
            if isinstance(p, LosslessPort) and p.nic is None:
                queued.append(p.queued_bytes(t))
                sent.append(p.tx_bytes - (p.cur.wire if p.cur is not None else 0))
            elif isinstance(p, NvlinkPort) and p.nic is None:
                # an NVLink chip port waits for credit: whole units, counted until their last bit is out
                q = p.queued_bytes(t)
                queued.append(q)
                sent.append(p.tx_bytes - q)
            else:
                # a NIC port serialises by Lindley in both modes (its LosslessPort queue is unused)
                q = Port.queued_bytes(p, t)
                queued.append(q)
                sent.append(p.tx_bytes - q)
        return (t, sent, queued)
