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
"""
from __future__ import annotations

import gc
from collections import deque

from ..analysis.ideal import path_hops, train_time
from ..cc import CC, CongestionControl, Flow
from ..planes import SPLITS
from ..receiver import RECEIVERS
from ..routing import ROUTING
from ..net.lossless import LosslessPort, LosslessSwitch, Pfc
from ..net.nic import Nic
from ..net.packet import DATA, QueuePair, five_tuple_hash
from ..net.port import Port, SharedBuffer
from ..net.sender import Sender
from ..net.switch import Switch
from ..traffic.message import Message
from .interface import ENGINES, RunOutcome, SimulationInput
from .kernel import make_kernel


class MessageState:
    """Runtime state of one message, and its transport statistics (see docs/metrics.md)."""

    __slots__ = ("msg", "size", "release", "end", "delivered", "dropped", "injected", "pending_deps",
                 "dependents", "done", "reason", "parent", "next_stage", "final", "qps",
                 # transport statistics
                 "rtx_bytes", "dup_bytes", "rx_units", "ooo_units", "reorder_hist", "peak_hold",
                 "reorder_wait_ps", "reorder_wait_max_ps", "ecn_marked", "cnps", "acks", "naks", "naks_sent",
                 "overflow_bytes", "discarded_bytes")

    def __init__(self, msg, parent=None, final=True):
        self.msg = msg
        self.size = msg.size_bytes
        self.release = None
        self.end = None
        self.delivered = 0
        self.dropped = 0          # payload bytes of this message's packets dropped by switches
        self.injected = 0         # payload bytes sent for the first time
        self.pending_deps = len(msg.deps)
        self.dependents = []
        self.done = False
        self.reason = ""
        self.parent = parent      # PXN: the user's message this piece belongs to
        self.next_stage = None    # PXN: the piece to send from the relay once this one is in
        self.final = final        # delivered bytes reach the message's destination (count as goodput)
        self.qps = []
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


@ENGINES.register("packet")
class PacketEngine:
    """Packet-level discrete-event engine (see module doc)."""

    name = "packet"

    def __init__(self, sim: SimulationInput, recorder):
        self.sim = sim
        self.recorder = recorder
        sc = sim.scenario
        simcfg = sc.simulation
        self.kernel = make_kernel(simcfg.kernel)
        self.time_limit = simcfg.time_limit
        topo = sim.topology
        g = topo.graph
        streams = sim.streams
        self.mtu = simcfg.mtu
        self.cell = simcfg.cell_packets
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
        ecn_rand = streams.py("switch.ecn").random
        self.dropped_payload = 0
        self.dropped_packets = 0
        self.dropped_ctrl = 0
        # nodes
        self.pfc = Pfc(feats.pfc, self.kernel, stamp) if feats.pfc.enabled else None
        switch_cls, port_cls = (LosslessSwitch, LosslessPort) if self.pfc else (Switch, Port)
        self.switches: dict[int, Switch] = {}
        for n in topo.switches:
            sw = switch_cls(n, g.nodes[n]["name"], self)
            if self.pfc:
                sw.pfc = self.pfc
            sw.paths = sim.paths
            sw.choose = self.routing.choose
            sw.kernel = self.kernel
            sw.push = self.kernel.push
            sw.seq = self.kernel.seq
            if g.nodes[n].get("buffer_mode") == "shared" and g.nodes[n].get("buffer_bytes") is not None:
                sw.shared = SharedBuffer(g.nodes[n]["buffer_bytes"])
            if ecn.enabled:
                sw.kmin, sw.kmax, sw.pmax, sw.rand = ecn.kmin, ecn.kmax, ecn.pmax, ecn_rand
            sw.stamp = stamp
            self.switches[n] = sw
        self.nics: dict[int, list[Nic]] = {h: [] for h in topo.hosts}
        self.ports: list[Port] = []
        for u, v, _k, d in topo.links():
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
                    if sw.shared is not None:
                        sw.shared.ports.append(p)
                else:
                    nic = Nic(a, p, self, self.kernel, simcfg.mtu, simcfg.header, simcfg.cell_packets,
                              1 << len(self.nics[a]))
                    if type(self.cc).on_send is not CongestionControl.on_send:
                        nic.on_send = self.cc.on_send
                    nic.arm = self.sender.arm
                    if self.pfc:
                        p.nic = nic
                    self.nics[a].append(nic)
        # messages
        self.states = {m.id: MessageState(m) for m in sim.messages}
        for st in self.states.values():
            for dep in st.msg.deps:
                self.states[dep].dependents.append(st)
        self._qp_uid = 0
        self._eligible: dict = {}
        self.split = SPLITS.get(sc.nic.name)(sc.nic.params, streams)
        self.pxn = bool(sc.nic.params and sc.nic.params.pxn)
        self.pxn_chunk = sc.nic.params.pxn_chunk if sc.nic.params else 0
        self.pieces: list[MessageState] = []   # PXN chunks (not in the messages table)
        self._last_t = 0                         # last message completion (end of a drained run)
        self.gpu_compute = simcfg.compute == "gpu"
        self._jobs: dict = {}                   # (sender, deps, gap) -> end of that compute job
        self.gpu_free: dict[int, int] = {}       # GPU -> when its current compute job ends
        self.gpu_busy: dict[int, int] = {}       # GPU -> total compute time so far
        self._salt = streams.u64("flows.5tuple")
        self.remaining = len(self.states)
        self._rtt: dict = {}
        self._final_links = None
        if self.cc.needs_fabric_base_rtt:   # e.g. HPCC ns-3 GLOBAL_T: one T for every flow
            self.cc.set_fabric_base_rtt(self.max_base_rtt())

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
        """The NIC port the receiver of ``qp`` sends its control packets by (fixed per queue pair)."""
        nics = self.eligible_nics(qp.dst, qp.src)
        nic = qp.r_port = nics[qp.hash % len(nics)]
        return nic

    def base_rtt(self, src: int, dst: int) -> int:
        """Round trip of one MTU packet and its ACK on an idle shortest path (ps)."""
        key = (src, dst)
        v = self._rtt.get(key)
        if v is None:
            topo, paths = self.sim.topology, self.sim.paths
            fwd = train_time(path_hops(topo, paths, src, dst), 1, self.mtu + self.header, [])
            back = train_time(path_hops(topo, paths, dst, src), 1, self.sim.scenario.receiver.params.ack_size, [])
            v = self._rtt[key] = fwd + back
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
        for q in st.qps:
            q.sent_done = True
            q.flow.active = False
            q.rtx.clear()
            q.seq = q.npsn
        if st.done:
            return
        st.reason = reason
        self.message_done(st, t)

    # ------------------------------------------------------------------ message lifecycle
    def release(self, t, st: MessageState):
        """Hand a message to its source NIC: split it over its queue pairs."""
        m = st.msg
        st.release = t
        if st.parent is None:   # PXN pieces are not messages of the pattern
            self.recorder.on_release(st, t)
        if self.pxn and st.parent is None:
            relay = self.sim.paths.pxn_relay(m.src, m.dst)
            if relay is not None:
                self._release_via(t, st, relay)
                return
        eligible = self.eligible_nics(m.src, m.dst)
        base, extra = divmod(m.size_bytes, m.qps)
        for q in range(m.qps):
            size = base + (1 if q < extra else 0)
            if size == 0:
                continue
            uid = self._qp_uid
            self._qp_uid += 1
            sport = 49152 + (uid & 0x3FFF)
            h = five_tuple_hash(self._salt, m.src, m.dst, sport ^ (uid >> 14) * 7919)
            qp = QueuePair(uid, st, m.src, m.dst, sport, h, size, self.mtu)
            nics = qp.nics = self.split.ports(qp, eligible)
            flow = qp.flow = Flow(uid, sum(n.port.rate for n in nics), self.base_rtt(m.src, m.dst), self.mtu)
            self.cc.start(flow, t)
            st.qps.append(qp)
            for nic in nics:
                nic.add(t, qp)

    def _release_via(self, t, st: MessageState, relay: int):
        """PXN: cut the message into chunks; each goes src -> relay (NVLink, not counted as
        goodput), then relay -> dst as soon as that chunk is in."""
        m = st.msg
        chunk = self.pxn_chunk
        for off in range(0, m.size_bytes, chunk):
            size = min(chunk, m.size_bytes - off)
            second = MessageState(Message(m.id, relay, m.dst, size, qps=m.qps), parent=st)
            first = MessageState(Message(m.id, m.src, relay, size, qps=1), parent=st, final=False)
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
            self._final_links = self._link_rows(t)
            self._final_snapshot = (t, [p.tx_bytes for p in self.ports], [p.queued_bytes(t) for p in self.ports])
            self.kernel.stop()
        if st.reason:
            self._fail_dependents(st)
            return
        for dep in st.dependents:
            dep.pending_deps -= 1
            if dep.pending_deps == 0:
                self.kernel.schedule(max(self._compute(t, dep.msg), dep.msg.start_ps), self.release, dep)

    def _compute(self, t: int, m) -> int:
        """When a message whose dependencies completed at ``t`` can leave: after its gap, and with
        ``simulation.compute: gpu`` after the sending GPU has finished the jobs queued before."""
        if not self.gpu_compute or not m.gap_ps:
            return t + m.gap_ps
        key = (m.src, m.deps, m.gap_ps)
        end = self._jobs.get(key)
        if end is None:
            start = max(t, self.gpu_free.get(m.src, 0))
            end = self._jobs[key] = start + m.gap_ps
            self.gpu_free[m.src] = end
            self.gpu_busy[m.src] = self.gpu_busy.get(m.src, 0) + m.gap_ps
        return end

    def _fail_dependents(self, st):
        for dep in st.dependents:
            if not dep.done and not dep.reason:
                dep.reason = "dependency_incomplete"
                self._fail_dependents(dep)

    def drop(self, port: Port, pkt):
        """A switch dropped ``pkt`` (buffer full): counted on the link; the transport recovers it."""
        port.drops += 1
        port.dropped_bytes += pkt.wire
        if pkt.kind != DATA:
            port.ctrl_drops += 1
            self.dropped_ctrl += 1
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
        self.link_samples.append((t, [p.tx_bytes for p in self.ports], [p.queued_bytes(t) for p in self.ports]))
        if len(self.link_samples) * len(self.ports) >= self._sample_budget:
            self.link_samples_truncated = True
            return
        self.kernel.schedule(t + self._sample_every, self._sample_links, None)

    def run(self, progress=None) -> RunOutcome:
        for st in self.states.values():
            if st.pending_deps == 0:
                self.kernel.schedule(st.msg.start_ps, self.release, st)
        every = self.sim.scenario.outputs.link_sample_interval
        self.link_samples: list = []
        self.link_samples_truncated = False
        self._sampler_overshot = False
        if every != "off" and self.ports and self.sim.scenario.outputs.link_sample_budget:
            self._sample_every = every
            self._sample_budget = self.sim.scenario.outputs.link_sample_budget
            self.kernel.schedule(0, self._sample_links, None)
        status = "complete"
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
        if how in ("drained", "stopped") and not self.remaining:
            # the last message completion ends the run; what ran after it (the last ACKs,
            # retransmission timers that found nothing to do, the link sampler) does not count
            now = self._last_t
            self.link_samples = [s for s in self.link_samples if s[0] <= now]
        if how == "time_limit":
            status = "time_limit"
        elif how == "interrupted":
            status = "interrupted"
        elif self.remaining:
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
        links = self._final_links if (self._final_links is not None and not self.remaining) else self._link_rows(now)
        hops = sum(row["tx_packets"] for row in links)   # up to the run's end, as the links table
        counters = {"dropped_packets": self.dropped_packets, "dropped_payload_bytes": self.dropped_payload,
                    "injected_payload_bytes": sum(st.injected for st in self.states.values())
                    + sum(p.injected for p in self.pieces if p.final)}
        counters["dropped_control_packets"] = self.dropped_ctrl
        counters["retransmission_timeouts"] = self.sender.timeouts
        counters["stale_naks_ignored"] = self.sender.naks_ignored
        counters["spurious_retransmissions_detected"] = self.sender.spurious
        counters["pfc_pause_events"] = sum(p.pause_events for p in self.ports)
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
        return RunOutcome(status=status, end_ps=now, events=self.kernel.events, packet_hops=hops,
                          links=links, counters=counters, link_samples=self.link_samples,
                          link_samples_truncated=self.link_samples_truncated, host_peak_hold=hosts,
                          warnings=warnings)

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
            "tx_control_bytes": p.ctrl_bytes, "tx_packets": p.tx_packets,
            "peak_queue_bytes": p.peak_queue_bytes, "drops_buffer_full": p.drops,
            "dropped_bytes": p.dropped_bytes, "drops_control": p.ctrl_drops, "ecn_marked_packets": p.ecn_marks,
            "pfc_pause_events": p.pause_events,
            "pfc_paused_ps": p.paused_ps + ((now - p.paused_since) if p.paused else 0),
        } for p in self.ports]

    def _final_sample(self, now):
        self.link_samples.append((now, [p.tx_bytes for p in self.ports], [p.queued_bytes(now) for p in self.ports]))
