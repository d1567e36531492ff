"""Switch: forwards each arriving packet to an egress port chosen by the routing policy.

Per packet (``arrive``): look up the equal-cost egress ports for the destination (cached), let the
routing policy pick one, enqueue it by Lindley's recursion (drop-tail if the port's or the shared
buffer is full), mark ECN by the bytes queued ahead of it (RED: kmin / kmax / pmax), stamp in-band
telemetry if enabled, and hand the arrival at the next node to the port's ``inflight`` queue
(see :mod:`fabricsim.net.port`).
"""
from __future__ import annotations

from .port import PS_BITS


class Switch:
    __slots__ = ("id", "name", "engine", "table", "route", "paths", "port_to", "choose", "shared", "ports",
                 "kernel", "push", "seq", "kmin", "kmax", "pmax", "rand", "stamp")

    def __init__(self, node, name, engine):
        self.id = node
        self.name = name
        self.engine = engine
        self.table = {}         # dst host -> tuple of egress ports
        self.route = {}         # dst host -> (the port if there is only one, else None; the ports)
        self.port_to = {}       # neighbour id -> list of ports
        self.ports = []
        self.shared = None
        self.kmin = None        # ECN: None = no marking; else thresholds in bytes
        self.kmax = 0
        self.pmax = 0.0
        self.rand = None
        self.stamp = False      # in-band telemetry on data packets

    def lookup(self, dst):
        ports = []
        for nbr in self.paths.next_hops(self.id, dst):
            ports.extend(self.port_to[nbr])
        if not ports:
            raise RuntimeError(f"switch {self.name} has no route to host {dst}")
        t = self.table[dst] = tuple(ports)
        r = self.route[dst] = (t[0] if len(t) == 1 else None, t)
        return r

    def mark(self, q: int) -> bool:
        """RED decision for a data packet that finds ``q`` bytes queued (q > kmin)."""
        if q > self.kmax:
            return True
        return self.rand() < self.pmax * (q - self.kmin) / (self.kmax - self.kmin)

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
            q = 0
        else:
            q = (bu - t) * port.rate // PS_BITS
            if port.buffer is not None and q + wire > port.buffer:
                self.engine.drop(port, pkt)
                return
        shared = self.shared
        if shared is not None and shared.used(t) + wire > shared.size:
            self.engine.drop(port, pkt)
            return
        kmin = self.kmin
        if kmin is not None and q > kmin and not pkt.kind and self.mark(q):
            pkt.ce = 1
            port.ecn_marks += 1
        k = port.ps_per_byte
        bu += wire * k if k else -((-wire * PS_BITS) // port.rate)     # = port.ser_ps(wire)
        port.busy_until = bu
        if bu - t > port.peak_ps:
            port.peak_ps = bu - t
        port.tx_bytes += wire
        port.tx_packets += pkt.npk
        if pkt.kind:
            port.ctrl_bytes += wire
        elif self.stamp:
            tel = pkt.tel
            if tel is None:
                pkt.tel = tel = []
            tel.append((bu, port.tx_bytes, q, port.rate, port.index))
        # = kernel.schedule(bu + port.offset, port.deliver, pkt), held in the port's inflight
        entry = (bu + port.offset, next(self.seq), port.deliver, pkt)
        pkt.hop = port
        inflight = port.inflight
        inflight.append(entry)
        if len(inflight) == 1:
            self.push(entry)
