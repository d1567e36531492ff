"""Packet-level engine: every packet (or cell) crosses every hop as one scheduled callback.

Data path, per packet:

1. ``Nic.tx``: the source NIC picks the next queue pair round-robin, cuts one packet, serialises
   it on its port and schedules the packet's arrival at the peer switch.
2. ``Switch.arrive``: look up the equal-cost egress ports for the destination (cached), let the
   routing policy pick one, enqueue by Lindley's recursion (drop-tail if the buffer is full) and
   schedule the arrival at the next node at ``busy_until + propagation + its forwarding latency``.
3. The receiver model's ``on_packet`` at the destination host accounts the payload and completes
   the message.
"""
from __future__ import annotations

import gc
from collections import deque

from ..cc import CC
from ..planes import SPLITS
from ..receiver import RECEIVERS
from ..routing import ROUTING
from ..net.packet import Packet, QueuePair, five_tuple_hash
from ..traffic.message import Message
from ..net.port import PS_BITS, Port, SharedBuffer
from .interface import ENGINES, RunOutcome, SimulationInput
from .kernel import make_kernel


class MessageState:
    """Runtime state of one message."""

    __slots__ = ("msg", "size", "release", "end", "delivered", "dropped", "injected", "pending_deps",
                 "dependents", "done", "reason", "parent", "next_stage", "final")

    def __init__(self, msg, parent=None, final=True):
        self.msg = msg
        self.size = msg.size_bytes
        self.release = None
        self.end = None
        self.delivered = 0
        self.dropped = 0
        self.injected = 0
        self.pending_deps = len(msg.deps)
        self.dependents = []
        self.done = False
        self.reason = ""
        self.parent = parent      # PXN: the user's message this piece belongs to
        self.next_stage = None    # PXN: the piece to send from the relay once this one is in
        self.final = final        # delivered bytes reach the message's destination (count as goodput)


class Switch:
    __slots__ = ("id", "name", "engine", "table", "route", "paths", "port_to", "choose", "shared", "ports",
                 "kernel", "push", "seq")

    def __init__(self, node, name, engine):
        self.id = node
        self.name = name
        self.engine = engine
        self.table = {}         # dst host -> tuple of egress ports
        self.route = {}         # dst host -> (the port if there is only one, else None; the ports)
        self.port_to = {}       # neighbour id -> list of ports
        self.ports = []
        self.shared = None

    def lookup(self, dst):
        ports = []
        for nbr in self.paths.next_hops(self.id, dst):
            ports.extend(self.port_to[nbr])
        if not ports:
            raise RuntimeError(f"switch {self.name} has no route to host {dst}")
        t = self.table[dst] = tuple(ports)
        r = self.route[dst] = (t[0] if len(t) == 1 else None, t)
        return r

    def arrive(self, t, pkt):
        # Hot path (one call per packet per switch): attributes used twice are read once into
        # locals; see benchmarks/README.md for what each line costs.
        #
        # This packet's entry has left the agenda: the next arrival from the same port joins it
        # (only each port's first pending arrival is on the agenda, see fabricsim/net/port.py).
        inflight = pkt.hop.inflight
        inflight.popleft()
        if inflight:
            self.push(inflight[0])
        route = self.route.get(pkt.dst) or self.lookup(pkt.dst)
        port = route[0] or self.choose(self, route[1], pkt, t)
        wire = pkt.wire
        bu = port.busy_until
        if bu < t:
            bu = t
        elif port.buffer is not None and (bu - t) * port.rate // PS_BITS + wire > port.buffer:
            self.engine.drop(port, pkt)
            return
        shared = self.shared
        if shared is not None and shared.used(t) + wire > shared.size:
            self.engine.drop(port, pkt)
            return
        k = port.ps_per_byte
        bu += wire * k if k else -((-wire * PS_BITS) // port.rate)     # = port.ser_ps(wire)
        port.busy_until = bu
        if bu - t > port.peak_ps:
            port.peak_ps = bu - t
        port.tx_bytes += wire
        port.tx_packets += pkt.npk
        # = kernel.schedule(bu + port.offset, port.deliver, pkt), held in the port's inflight
        entry = (bu + port.offset, next(self.seq), port.deliver, pkt)
        pkt.hop = port
        inflight = port.inflight
        inflight.append(entry)
        if len(inflight) == 1:
            self.push(entry)


class Nic:
    """One NIC port of a host: round-robin over its active queue pairs, line-rate sending."""

    __slots__ = ("host", "port", "active", "busy", "kernel", "seg", "mtu", "header", "engine", "push", "seq",
                 "_tx")

    def __init__(self, host, port, engine, kernel, mtu, header, cell):
        self.host = host
        self.port = port
        self.active = deque()
        self.busy = False
        self.kernel = kernel
        self.push = kernel.push
        self.seq = kernel.seq
        self.mtu = mtu
        self.header = header
        self.seg = mtu * cell
        self.engine = engine
        self._tx = self.tx      # one bound method, not a new one per packet

    def add(self, t, qp):
        self.active.append(qp)
        if not self.busy:
            self.busy = True
            self.kernel.schedule(t, self._tx, None)

    def tx(self, t, _):
        active = self.active
        qp = active.popleft()
        remaining = qp.remaining
        while not remaining:
            # a queue pair shared with other ports (plane split per packet) that they finished
            if not active:
                self.busy = False
                return
            qp = active.popleft()
            remaining = qp.remaining
        payload = remaining if remaining < self.seg else self.seg
        qp.remaining = remaining = remaining - payload
        if remaining:
            active.append(qp)
        npk = -(-payload // self.mtu)
        wire = payload + npk * self.header
        port = self.port
        pkt = Packet(qp, qp.dst, wire, payload, qp.seq, t, npk, port)
        qp.seq += npk
        qp.msg.injected += payload
        k = port.ps_per_byte
        ser = wire * k if k else -((-wire * PS_BITS) // port.rate)      # = port.ser_ps(wire)
        done = t + ser
        port.busy_until = done
        port.tx_bytes += wire
        port.tx_packets += npk
        if ser > port.peak_ps:
            port.peak_ps = ser
        # = kernel.schedule(done + port.offset, port.deliver, pkt), held in the port's inflight
        seq = self.seq
        entry = (done + port.offset, next(seq), port.deliver, pkt)
        inflight = port.inflight
        inflight.append(entry)
        if len(inflight) == 1:
            self.push(entry)
        if active:
            self.push((done, next(seq), self._tx, None))
        else:
            self.busy = False


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
        self.routing = ROUTING.get(sc.routing.name)(sc.routing.params, streams)
        self.cc = CC.get(sc.congestion_control.name)(sc.congestion_control.params, streams)
        self.receiver = RECEIVERS.get(sc.receiver.name)(sc.receiver.params, self)
        self._push = self.kernel.push
        self._on_packet = self.receiver.on_packet
        self.dropped_payload = 0
        self.dropped_packets = 0
        # nodes
        self.switches: dict[int, Switch] = {}
        for n in topo.switches:
            sw = Switch(n, g.nodes[n]["name"], self)
            sw.paths = sim.paths
            sw.choose = self.routing.choose
            sw.kernel = self.kernel
            sw.push = self.kernel.push
            sw.seq = self.kernel.seq
            if g.nodes[n].get("buffer_mode") == "shared" and g.nodes[n].get("buffer_bytes") is not None:
                sw.shared = SharedBuffer(g.nodes[n]["buffer_bytes"])
            self.switches[n] = sw
        self.nics: dict[int, list[Nic]] = {h: [] for h in topo.hosts}
        self.ports: list[Port] = []
        for u, v, _k, d in topo.links():
            for a, b in ((u, v), (v, u)):
                peer_lat = g.nodes[b].get("switch_latency_ps", 0) if g.nodes[b]["type"] == "switch" else 0
                per_port_buf = None
                if g.nodes[a]["type"] == "switch" and g.nodes[a].get("buffer_mode") == "per_port":
                    per_port_buf = g.nodes[a].get("buffer_bytes")
                p = Port(len(self.ports), a, b, d["kind"], d["rate_bps"], d["delay_ps"], peer_lat, per_port_buf)
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
                    self.nics[a].append(Nic(a, p, self, self.kernel, simcfg.mtu, simcfg.header,
                                            simcfg.cell_packets))
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

    def _to_host(self, t, pkt):
        """Arrival at a host: advance the port's inflight (as Switch.arrive), then the receiver."""
        inflight = pkt.hop.inflight
        inflight.popleft()
        if inflight:
            self._push(inflight[0])
        self._on_packet(t, pkt)

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
            qp = QueuePair(uid, st, m.src, m.dst, sport, h, size)
            for nic in self.split.ports(qp, eligible):
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
        if piece.next_stage is not None:
            if piece.dropped:
                parent.dropped += piece.size          # the second stage never leaves the relay
            else:
                self.release(t, piece.next_stage)
                return
        else:
            parent.delivered += piece.delivered
            parent.dropped += piece.dropped
        if parent.delivered + parent.dropped == parent.size:
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
        if st.dropped:
            st.reason = "packet_dropped"
        self.remaining -= 1
        self.recorder.on_message(st)
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
        port.drops += 1
        port.dropped_bytes += pkt.wire
        self.dropped_payload += pkt.payload
        self.dropped_packets += pkt.npk
        st = pkt.qp.msg
        st.dropped += pkt.payload
        if st.delivered + st.dropped == st.size:
            self.message_done(st, self.kernel.now)

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
        if how == "drained" and self._sampler_overshot:
            now = self._last_t   # the link sampler outlived the last real event
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
                        st.reason = reason or ("packet_dropped" if st.dropped else "stalled")
                self.recorder.on_message(st)
        hops = sum(p.tx_packets for p in self.ports)
        links = [{
            "link_id": p.index, "src": p.owner, "dst": p.peer, "kind": p.kind, "rate_bps": p.rate,
            "delay_ps": p.delay, "tx_bytes": p.tx_bytes, "tx_packets": p.tx_packets,
            "peak_queue_bytes": p.peak_queue_bytes, "drops_buffer_full": p.drops,
            "dropped_bytes": p.dropped_bytes,
        } for p in self.ports]
        counters = {"dropped_packets": self.dropped_packets, "dropped_payload_bytes": self.dropped_payload,
                    "injected_payload_bytes": sum(st.injected for st in self.states.values())
                    + sum(p.injected for p in self.pieces if p.final)}
        if self.gpu_compute:
            counters["gpu_compute_busy_ps"] = dict(sorted(self.gpu_busy.items()))
        if hasattr(self.routing, "new_flowlets"):
            counters["new_flowlets"] = self.routing.new_flowlets
        if self.link_samples and self.link_samples[-1][0] < now:
            self._final_sample(now)
        return RunOutcome(status=status, end_ps=now, events=self.kernel.events, packet_hops=hops,
                          links=links, counters=counters, link_samples=self.link_samples,
                          link_samples_truncated=self.link_samples_truncated)

    def _final_sample(self, now):
        self.link_samples.append((now, [p.tx_bytes for p in self.ports], [p.queued_bytes(now) for p in self.ports]))
