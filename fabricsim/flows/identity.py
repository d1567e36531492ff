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

import struct
from itertools import repeat
from typing import NamedTuple

import numpy as np

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
    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


#: a 64-bit draw times this is uniform in [0, 1)
UNIT = 2.0 ** -64


def packet_draw(salt: int, pkt, switch_id: int) -> int:
    """The counter-based random draw of packet ``pkt`` at node ``switch_id``: 64 bits fixed by the
    packet's identity (its queue pair's ``uid``, ``seq``, send time ``t_tx`` and ``kind``), the
    node and the decision's seeded ``salt``, not by a sequential stream, so a draw does not depend
    on how many draws came before it or in which order events ran. Every per-packet random
    choice of the packet engine takes it: spraying and adaptive routing's pick among tied ports
    (``draw % n``), RED's ECN marking (``draw * UNIT < p``); each has its own salt, so two
    decisions on one packet at one switch are independent.

    CPython's tuple hash of ints folds the fields into 64 bits (no per-process randomisation:
    that applies to str/bytes only) but does not avalanche: alone it makes consecutive PSNs of a
    flow repeat a port with probability 0.155, not 1/8. The splitmix64 finaliser on top gives
    independent draws (docs/fidelity/routing.md, Performance).

    >>> from types import SimpleNamespace as P
    >>> pkt = P(qp=P(uid=3), seq=10, t_tx=5000, kind=0)
    >>> packet_draw(7, pkt, 1) == packet_draw(7, pkt, 1) != packet_draw(7, pkt, 2)
    True
    >>> 0 <= packet_draw(7, pkt, 1) * UNIT < 1
    True
    """
    return mix64(hash((salt, pkt.qp.uid, pkt.seq, pkt.t_tx, pkt.kind, switch_id)))   # = packet_draw_fields


def packet_draw_fields(salt: int, uid: int, seq: int, t_tx: int, kind: int, node: int) -> int:
    """:func:`packet_draw` from the packet's fields: the one definition the compiled packet core
    compiles (numba's ``hash`` of a tuple of ints is CPython's, tests/test_packet_draws.py).
    :func:`packet_draw` writes the same expression inline (a call costs more than the hash on the
    Python hot path).

    >>> from types import SimpleNamespace as P
    >>> packet_draw_fields(7, 3, 10, 5000, 0, 1) == packet_draw(7, P(qp=P(uid=3), seq=10, t_tx=5000, kind=0), 1)
    True
    """
    return mix64(hash((salt, uid, seq, t_tx, kind, node)))


def _five_tuple_hash(salt, src, dst, sport, dport, proto, mix):
    # the one definition, for Python ints (mix64) and uint64 arrays (mix64_array): the products
    # are reduced modulo 2**64 by the mix (ints) or by uint64 arithmetic (arrays)
    h = mix(salt ^ src)
    h = mix(h ^ (dst * 0x9E3779B97F4A7C15))
    h = mix(h ^ (sport << 16) ^ dport)
    return mix(h ^ proto)


def _queue_pair_tuple(salt, src, dst, uid, mix):
    sport = 49152 + (uid & 0x3FFF)
    return sport, _five_tuple_hash(salt, src, dst, sport ^ (uid >> 14) * 7919, ROCE_DPORT, UDP, mix)


def five_tuple_hash(salt: int, src: int, dst: int, sport: int, dport: int = ROCE_DPORT, proto: int = UDP) -> int:
    """Seeded hash of (src, dst, sport, dport, proto)."""
    return _five_tuple_hash(salt, src, dst, sport, dport, proto, mix64)


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
    return _queue_pair_tuple(salt, src, dst, uid, mix64)


def queue_pair_tuples(salt: int, src, dst, uid) -> tuple[np.ndarray, np.ndarray]:
    """:func:`queue_pair_tuple` of arrays of queue pairs: (UDP source ports as int64, 5-tuple
    hashes as uint64), element by element the same (one definition, evaluated on uint64 arrays).

    >>> sport, h = queue_pair_tuples(7, [1, 2], [3, 4], [0, 20000])
    >>> [(int(a), int(b)) for a, b in zip(sport, h)] == [queue_pair_tuple(7, 1, 3, 0), queue_pair_tuple(7, 2, 4, 20000)]
    True
    """
    u64 = np.uint64
    src, dst, uid = (np.asarray(a, dtype=np.int64).astype(u64) for a in (src, dst, uid))
    with np.errstate(over="ignore"):
        sport, h = _queue_pair_tuple(u64(salt & MASK64), src, dst, uid, mix64_array)
    return sport.astype(np.int64), h


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


class QueuePairs(NamedTuple):
    """Queue pairs opened by :meth:`ConnectionTable.open_many`, one entry each (int64 columns but
    ``hash``), grouped by message in the batch's order and in queue-pair order within a message."""

    msg: np.ndarray         #: index in the batch of the message the queue pair carries
    uid: np.ndarray         #: queue-pair number in the run
    sport: np.ndarray       #: UDP source port (:func:`queue_pair_tuple`)
    hash: np.ndarray        #: seeded 5-tuple hash, uint64
    size_bytes: np.ndarray  #: the message's bytes on it (:func:`split_bytes`; never 0)


def _int64(a) -> np.ndarray:
    return np.asarray(a, dtype=np.int64).reshape(-1)


#: a persistent connection's key in :class:`ConnectionTable`: (conn, src, dst) as native int64
_KEY = struct.Struct("=3q")


class ConnectionTable:
    """Opens a run's queue pairs: the one numbering of queue pairs and their 5-tuples.

    The packet engine asks it for the queue pairs of each message it starts (:meth:`open`), the
    flow engine for those of every message starting at once (:meth:`open_many`, the same answers
    as :meth:`open` message by message), and the analysis-side references that place a run's own
    flows (:func:`fabricsim.analysis.maxmin.ecmp_placement`) ask it the same questions in the same
    order, so all see the same uids, UDP source ports and 5-tuple hashes (:func:`queue_pair_tuple`).

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

    A connection is kept as its first uid and queue-pair count (16 bytes of columns and one
    dictionary entry keyed by the 24 bytes of ``(conn, src, dst)``: about 150 bytes in all, a third
    of a list of 5-tuples); its 5-tuples are recomputed from ``(salt, src, dst, uid)`` whenever it
    is used.
    """

    __slots__ = ("salt", "next_uid", "_conns", "_first", "_count", "_n")

    def __init__(self, salt: int):
        self.salt = salt
        self.next_uid = 0
        self._conns: dict[bytes, int] = {}          # _KEY of (conn, src, dst) -> connection number
        self._first = np.zeros(16, dtype=np.int64)  # per connection number: its first uid ...
        self._count = np.zeros(16, dtype=np.int64)  # ... and its queue-pair count (uids first .. first+count-1)
        self._n = 0                                 # connections opened (the columns' used length)

    def _add(self, first, count) -> int:
        """Register connections with these first uids and counts (int64 arrays); the number of the
        first of them (the columns grow by doubling: registering one at a time stays linear)."""
        c0, k = self._n, len(first)
        if c0 + k > len(self._first):
            grow = max(c0 + k, 2 * len(self._first))
            self._first = np.concatenate([self._first[:c0], np.zeros(grow - c0, dtype=np.int64)])
            self._count = np.concatenate([self._count[:c0], np.zeros(grow - c0, dtype=np.int64)])
        self._first[c0:c0 + k] = first
        self._count[c0:c0 + k] = count
        self._n = c0 + k
        return c0

    def open(self, src: int, dst: int, size_bytes: int, qps: int, conn: int = -1) -> list[tuple[int, int, int, int]]:
        """``(uid, sport, hash, bytes)`` of each queue pair a message of ``size_bytes`` uses
        (parts of 0 bytes left out). One message in Python ints (the packet engine's per-message
        path, a few microseconds): the table, key and 5-tuples of :meth:`open_many`, which the tests
        check gives the same answers, alone or interleaved with it."""
        if conn < 0:
            first, parts = self.next_uid, qps
            self.next_uid += min(qps, size_bytes)       # one fresh queue pair per non-empty part
        else:
            key = _KEY.pack(conn, src, dst)
            c = self._conns.get(key)
            if c is None:                               # the first message opens all qps of them
                c = self._conns[key] = self._add([self.next_uid], [qps])
                self.next_uid += qps
            first, parts = int(self._first[c]), int(self._count[c])
        out = []
        for q, size in enumerate(split_bytes(size_bytes, parts)):
            if not size:                                # the non-empty parts are the first ones
                break
            out.append((first + q,) + queue_pair_tuple(self.salt, src, dst, first + q) + (size,))
        return out

    def open_many(self, src, dst, size_bytes, qps, conn) -> QueuePairs:
        """The queue pairs of messages starting in this order (int arrays, one entry per message):
        the same as :meth:`open` called on each in turn, as columns (:class:`QueuePairs`). A
        connection may appear more than once: its first message opens it, the later ones reuse it.

        >>> t, u = ConnectionTable(salt=5), ConnectionTable(salt=5)
        >>> q = t.open_many([0, 0, 2, 0], [1, 1, 3, 1], [10, 7, 1, 3], [2, 5, 4, 1], [3, 3, -1, -1])
        >>> q.msg.tolist(), q.uid.tolist(), q.size_bytes.tolist()
        ([0, 0, 1, 1, 2, 3], [0, 1, 0, 1, 2, 3], [5, 5, 4, 3, 1, 3])
        >>> one = [u.open(*m) for m in [(0, 1, 10, 2, 3), (0, 1, 7, 5, 3), (2, 3, 1, 4, -1), (0, 1, 3, 1, -1)]]
        >>> one == [[tuple(qp) for j, *qp in zip(*(c.tolist() for c in q)) if j == i] for i in range(4)]
        True
        """
        src, dst, size, qps, conn = (_int64(a) for a in (src, dst, size_bytes, qps, conn))
        m = len(src)
        fresh = conn < 0
        # uids each message opens, in message order: a fresh message one per non-empty part, the
        # first message of a new connection the connection's qps, the others none
        opens = np.where(fresh, np.minimum(qps, size), 0)
        base, parts = qps.copy(), qps.copy()        # per message: its first uid and its split's divisor
        pj = np.flatnonzero(~fresh)
        if pj.size:
            # the keys as _KEY packs them: (conn, src, dst) as three native int64
            keys = np.ascontiguousarray(np.stack([conn[pj], src[pj], dst[pj]], axis=1)).view("V24").ravel().tolist()
            cid = np.fromiter(map(self._conns.get, keys, repeat(-1)), dtype=np.int64, count=len(keys))
            new = np.flatnonzero(cid < 0)
            if new.size:
                nkeys = [keys[x] for x in new.tolist()]
                first_at = dict(zip(reversed(nkeys), range(len(nkeys) - 1, -1, -1)))   # key -> first position
                pos = np.fromiter(map(first_at.__getitem__, nkeys), dtype=np.int64, count=len(nkeys))
                firsts = np.flatnonzero(pos == np.arange(len(nkeys)))                   # ascending
                c0 = self._n
                cid[new] = c0 + np.searchsorted(firsts, pos)
                self._conns.update(zip([nkeys[x] for x in firsts.tolist()], range(c0, c0 + len(firsts))))
                openers = pj[new[firsts]]
                opens[openers] = qps[openers]
            else:
                openers = None
        start = self.next_uid + np.cumsum(opens) - opens
        self.next_uid += int(opens.sum())
        base[fresh] = start[fresh]
        if pj.size:
            if openers is not None:
                self._add(start[openers], qps[openers])
            base[pj] = self._first[cid]
            parts[pj] = self._count[cid]
        # the non-empty parts of every message's split: the first min(parts, size)
        k = np.minimum(parts, np.maximum(size, 0))
        owner = np.repeat(np.arange(m, dtype=np.int64), k)
        q = np.arange(len(owner), dtype=np.int64) - np.repeat(np.cumsum(k) - k, k)
        whole, extra = np.divmod(size, parts)
        uid = base[owner] + q
        sport, h = queue_pair_tuples(self.salt, src[owner], dst[owner], uid)
        return QueuePairs(owner, uid, sport, h, whole[owner] + (q < extra[owner]))
