"""``ecmp``: per-flow hashing of the 5-tuple (src, dst, source port/QP, dest port, protocol).

Every switch salts the flow hash with its own seeded 64-bit value, so hash choices at different
switches are independent; all packets of a queue pair take one path (no reordering). The number
of QPs per message (``traffic.qps_per_message``) sets the entropy.
"""
from __future__ import annotations

from ..net.packet import mix64
from .base import ROUTING, RoutingPolicy


@ROUTING.register("ecmp")
class Ecmp(RoutingPolicy):
    reorders = False

    def __init__(self, params, streams):
        super().__init__(params, streams)
        self._salt = streams.u64("routing.ecmp.salt")
        self._cache: dict[int, object] = {}

    def choose(self, switch, ports, pkt, now):
        key = (pkt.qp.uid << 24) | switch.id
        port = self._cache.get(key)
        if port is None:
            h = mix64(pkt.qp.hash ^ mix64(self._salt ^ switch.id))
            port = self._cache[key] = ports[h % len(ports)]
        return port
