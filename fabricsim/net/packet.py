"""Packets and queue pairs: the units the packet engine moves.

A :class:`QueuePair` is one transport flow (one 5-tuple) carrying part of a message; a
:class:`Packet` is one wire unit (an MTU packet, or a cell of several when
``simulation.cell_packets > 1``). Both use ``__slots__``: millions are created per run.
"""
from __future__ import annotations

ROCE_DPORT = 4791
UDP = 17


class QueuePair:
    """One flow of a message. ``hash`` is the seeded 64-bit hash of its 5-tuple."""

    __slots__ = ("uid", "msg", "src", "dst", "sport", "hash", "remaining", "seq")

    def __init__(self, uid, msg, src, dst, sport, flow_hash, size):
        self.uid = uid
        self.msg = msg          # MessageState
        self.src = src
        self.dst = dst
        self.sport = sport
        self.hash = flow_hash
        self.remaining = size   # payload bytes not yet handed to the NIC port
        self.seq = 0


class Packet:
    """One wire unit. ``wire`` includes headers; ``t_tx`` is when its first bit left the source NIC;
    ``hop`` is the port it is crossing (whose ``inflight`` holds its pending arrival)."""

    __slots__ = ("qp", "dst", "wire", "payload", "seq", "t_tx", "npk", "hop")

    def __init__(self, qp, dst, wire, payload, seq, t_tx, npk, hop=None):
        self.qp = qp
        self.dst = dst
        self.wire = wire
        self.payload = payload
        self.seq = seq
        self.t_tx = t_tx
        self.npk = npk          # MTU packets this unit stands for (1 unless cells are used)
        self.hop = hop


MASK64 = (1 << 64) - 1


def mix64(x: int) -> int:
    """splitmix64 finaliser: a fast, well-distributed 64-bit mixing function.

    >>> mix64(1) != mix64(2)
    True
    """
    x &= MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def five_tuple_hash(salt: int, src: int, dst: int, sport: int, dport: int = ROCE_DPORT, proto: int = UDP) -> int:
    """Seeded hash of (src, dst, sport, dport, proto)."""
    h = mix64(salt ^ src)
    h = mix64(h ^ (dst * 0x9E3779B97F4A7C15))
    h = mix64(h ^ (sport << 16) ^ dport)
    return mix64(h ^ proto)
