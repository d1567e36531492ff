"""Flow identity: how a message becomes queue pairs, and each queue pair's 5-tuple and hash.

The ground floor every engine and every analysis-side reference shares (docs/architecture.md):
:func:`split_bytes` is the queue-pair split, :func:`queue_pair_tuple` the UDP source port and
seeded 5-tuple hash of the queue pair numbered ``uid``, :class:`ConnectionTable` the one numbering
of a run's queue pairs (fresh, or reused by a persistent connection). ECMP's per-switch pick
(:func:`fabricsim.routing.ecmp.ecmp_index`) takes the hash from here, so a packet run and a flow
run of the same scenario and seed put the same queue pairs on the same paths when they open them
in the same order.
"""
from __future__ import annotations

ROCE_DPORT = 4791
UDP = 17

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


def mix64_array(x):
    """:func:`mix64` of every element of a numpy array (uint64 arithmetic wraps modulo 2**64, as
    the masks in :func:`mix64` do); the same function, for vectorised flow placement.

    >>> import numpy as np
    >>> [int(v) for v in mix64_array(np.array([1, 2], dtype=np.uint64))] == [mix64(1), mix64(2)]
    True
    """
    import numpy as np
    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def five_tuple_hash(salt: int, src: int, dst: int, sport: int, dport: int = ROCE_DPORT, proto: int = UDP) -> int:
    """Seeded hash of (src, dst, sport, dport, proto)."""
    h = mix64(salt ^ src)
    h = mix64(h ^ (dst * 0x9E3779B97F4A7C15))
    h = mix64(h ^ (sport << 16) ^ dport)
    return mix64(h ^ proto)


#: random stream of the per-run 5-tuple salt
FLOWS_SALT_STREAM = "flows.5tuple"


def queue_pair_tuple(salt: int, src: int, dst: int, uid: int) -> tuple[int, int]:
    """(UDP source port, seeded 5-tuple hash) of the queue pair numbered ``uid`` in a run.

    Queue pairs are numbered in the order the engine opens them (:class:`ConnectionTable`: a
    persistent connection's queue pairs are opened once and reused); the source port cycles through
    the RoCE ephemeral range 49152-65535 and the hash folds in the rest of ``uid``, so every queue
    pair of a run has its own 5-tuple hash. The one definition used by the engines and by the
    analysis-side references that place a run's own flows (:mod:`fabricsim.analysis.maxmin`).
    """
    sport = 49152 + (uid & 0x3FFF)
    return sport, five_tuple_hash(salt, src, dst, sport ^ (uid >> 14) * 7919)


def split_bytes(size_bytes: int, parts: int) -> list[int]:
    """The queue-pair split: ``size_bytes`` over ``parts`` queue pairs, the first
    ``size_bytes % parts`` one byte larger (a part may be 0 when ``size_bytes < parts``).

    >>> split_bytes(10, 4)
    [3, 3, 2, 2]
    >>> split_bytes(2, 4)
    [1, 1, 0, 0]
    """
    base, extra = divmod(size_bytes, parts)
    return [base + (1 if q < extra else 0) for q in range(parts)]


class ConnectionTable:
    """Opens a run's queue pairs: the one numbering of queue pairs and their 5-tuples.

    The packet engine asks it for the queue pairs of each message it starts, and the analysis-side
    references that place a run's own flows (:func:`fabricsim.analysis.maxmin.ecmp_placement`)
    ask it the same questions in the same order, so both see the same uids, UDP source ports and
    5-tuple hashes (:func:`queue_pair_tuple`).

    - ``conn == -1``: the message gets fresh queue pairs, one per non-empty part of
      :func:`split_bytes` over its ``qps`` (numbered in order, as before connections existed).
    - ``conn >= 0``: the message uses the queue pairs of connection ``(conn, src, dst)``. The first
      message on it opens ``qps`` of them (all, even if that message is too small to use every
      one); later messages reuse the same uids and 5-tuples, whatever their own ``qps``, and are
      split over the connection's count.

    >>> t = ConnectionTable(salt=1)
    >>> [uid for uid, _s, _h, _b in t.open(0, 1, 10, 2)]             # fresh
    [0, 1]
    >>> a = t.open(0, 1, 10, 2, conn=3); b = t.open(0, 1, 7, 5, conn=3)
    >>> [q[:3] for q in a] == [q[:3] for q in b], [q[3] for q in b]   # same 5-tuples, same split
    (True, [4, 3])
    >>> [q[0] for q in t.open(1, 0, 10, 2, conn=3)]                   # (conn, src, dst): a new connection
    [4, 5]
    """

    __slots__ = ("salt", "next_uid", "_conns")

    def __init__(self, salt: int):
        self.salt = salt
        self.next_uid = 0
        self._conns: dict[tuple[int, int, int], list[tuple[int, int, int]]] = {}

    def _new(self, src: int, dst: int) -> tuple[int, int, int]:
        uid = self.next_uid
        self.next_uid += 1
        sport, h = queue_pair_tuple(self.salt, src, dst, uid)
        return uid, sport, h

    def open(self, src: int, dst: int, size_bytes: int, qps: int, conn: int = -1) -> list[tuple[int, int, int, int]]:
        """``(uid, sport, hash, bytes)`` of each queue pair a message of ``size_bytes`` uses
        (parts of 0 bytes left out)."""
        if conn < 0:
            out = []
            for size in split_bytes(size_bytes, qps):
                if size:
                    out.append(self._new(src, dst) + (size,))
            return out
        key = (conn, src, dst)
        tuples = self._conns.get(key)
        if tuples is None:
            tuples = self._conns[key] = [self._new(src, dst) for _ in range(qps)]
        return [t + (size,) for t, size in zip(tuples, split_bytes(size_bytes, len(tuples))) if size]
