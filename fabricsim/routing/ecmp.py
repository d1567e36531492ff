"""``ecmp``: per-flow hashing of the 5-tuple (src, dst, source port/QP, dest port, protocol).

Every switch salts the flow hash with its own seeded 64-bit value, so hash choices at different
switches are independent; all packets of a queue pair take one path (no reordering). The number
of QPs per message (``traffic.qps_per_message``, or ``traffic.qps_per_connection`` for messages
on a persistent connection) sets the entropy.

The two directions of a queue pair are two flows: data packets (``qp.src`` -> ``qp.dst``) hash
the queue pair's 5-tuple hash, its control packets (ACK / NAK / CNP, ``qp.dst`` -> ``qp.src``)
hash the reverse flow's hash (:func:`direction_hash`), as a switch hashing the reply's own
5-tuple would. Each direction picks among the equal-cost ports *towards its own destination*, so
the reverse path is always a shortest path; it is independent of the forward one.

:func:`ecmp_index` is the one definition of the choice: :meth:`Ecmp.choose` calls it for every
packet (through a per-(queue pair, direction, switch) cache) and an analysis-side reference
(for example a fluid max-min solver placing the run's own flows) calls it with the same salt
(:meth:`Ecmp.index`, or ``RandomStreams(seed).u64(SALT_STREAM)``) and the same candidate order
(the switch's equal-cost ports sorted by neighbour id, parallel links in link order).
"""
from __future__ import annotations

from ..flows.identity import MASK64, mix64, mix64_array
from ..net.packet import DATA
from .base import ROUTING, RoutingPolicy

#: name of the random stream the per-run ECMP salt is drawn from
SALT_STREAM = "routing.ecmp.salt"
#: tag mixed into a queue pair's hash to get the hash of its reverse (control) flow
REVERSE_TAG = 0xD6E8FEB86659FD93


def direction_hash(qp_hash: int, control: bool) -> int:
    """The flow hash ECMP uses for one direction of a queue pair.

    ``qp_hash`` is the queue pair's seeded 5-tuple hash (``QueuePair.hash``); data packets use it
    as is, control packets (``control=True``) a distinct hash for the reverse 5-tuple.

    >>> direction_hash(12345, False)
    12345
    >>> direction_hash(12345, True) != 12345
    True
    """
    if not control:
        return qp_hash & MASK64
    return mix64(qp_hash ^ REVERSE_TAG)


def ecmp_index(qp_hash: int, salt: int, switch_id: int, n_ports: int, control: bool = False) -> int:
    """Index (``0 <= i < n_ports``) of the equal-cost port ECMP takes at one switch.

    Parameters
    ----------
    qp_hash : int
        The queue pair's seeded 5-tuple hash (``QueuePair.hash``).
    salt : int
        The run's ECMP salt (64-bit, from the ``routing.ecmp.salt`` stream).
    switch_id : int
        The switch's node id; mixed with the salt so switches choose independently.
    n_ports : int
        Number of equal-cost egress ports towards the packet's destination, in the order the
        switch lists them (sorted by neighbour id; parallel links in link order).
    control : bool
        ``True`` for the queue pair's control packets (ACK / NAK / CNP), which travel the other
        way and hash the reverse flow (:func:`direction_hash`).

    Returns
    -------
    int
        ``mix64(direction_hash(qp_hash, control) ^ mix64(salt ^ switch_id)) % n_ports``.

    >>> ecmp_index(7, 99, 3, 1)
    0
    >>> all(0 <= ecmp_index(h, 99, 3, 4) < 4 for h in range(100))
    True
    >>> ecmp_index(7, 99, 3, 4) == ecmp_index(7, 99, 3, 4)
    True
    """
    if n_ports < 1:
        raise ValueError(f"ecmp_index needs at least one port, got n_ports={n_ports}")
    return ecmp_pick(qp_hash, salt, switch_id, n_ports, control)


def ecmp_pick(qp_hash: int, salt: int, switch_id: int, n_ports: int, control: bool) -> int:
    """:func:`ecmp_index` without the argument check: the expression itself, which the compiled
    packet core compiles from this source (on uint64 operands)."""
    return mix64(direction_hash(qp_hash, control) ^ mix64(salt ^ switch_id)) % n_ports


def ecmp_index_array(qp_hash, salt: int, switch_id, n_ports):
    """:func:`ecmp_index` (data direction) for arrays of queue-pair hashes, switch ids and port
    counts at once (numpy, broadcast), for placing many flows in one step; equal to
    :func:`ecmp_index` element by element (tests/test_flow_engine.py checks it).

    >>> import numpy as np
    >>> h = np.array([7, 8, 9], dtype=np.uint64)
    >>> ecmp_index_array(h, 99, 3, 4).tolist() == [ecmp_index(int(x), 99, 3, 4) for x in h]
    True
    """
    import numpy as np
    h = np.asarray(qp_hash, dtype=np.uint64)
    sw = np.asarray(switch_id, dtype=np.uint64)
    key = mix64_array(np.uint64(salt & MASK64) ^ sw)
    return (mix64_array(h ^ key) % np.asarray(n_ports, dtype=np.uint64)).astype(np.int64)


@ROUTING.register("ecmp")
class Ecmp(RoutingPolicy):
    """Per-flow (per queue pair and direction) hashing; see the module doc."""
    fluid = "per_flow"

    reorders = False

    def __init__(self, params, streams):
        super().__init__(params, streams)
        self._salt = streams.u64(SALT_STREAM)
        self._cache: dict[int, object] = {}

    @property
    def salt(self) -> int:
        """The run's 64-bit ECMP salt (the second argument of :func:`ecmp_index`)."""
        return self._salt

    def index(self, qp_hash: int, switch_id: int, n_ports: int, control: bool = False) -> int:
        """:func:`ecmp_index` with this run's salt: the port index ``choose()`` takes."""
        return ecmp_index(qp_hash, self._salt, switch_id, n_ports, control)

    def choose(self, switch, ports, pkt, now):
        # one entry per queue pair, direction (data, or its control packets on the way back)
        # and switch: the two directions go to different destinations, so they must never share
        # an entry (an ACK that took the data's port would head back towards the receiver)
        control = pkt.kind != DATA
        key = (pkt.qp.uid << 25) | (control << 24) | switch.id
        port = self._cache.get(key)
        if port is None:
            port = self._cache[key] = ports[ecmp_index(pkt.qp.hash, self._salt, switch.id, len(ports), control)]
        return port

    def flow_index(self, switch_ids, n_ports, hashes):
        """:func:`ecmp_index_array` with this run's salt (data direction)."""
        return ecmp_index_array(hashes, self._salt, switch_ids, n_ports)

    def weights(self, switch, ports, qp, control: bool = False, capacity_bps=None) -> list[float]:
        """One-hot: the whole flow on the port :func:`ecmp_index` picks."""
        w = [0.0] * len(ports)
        w[ecmp_index(qp.hash, self._salt, switch.id, len(ports), control)] = 1.0
        return w
