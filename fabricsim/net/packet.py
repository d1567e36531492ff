"""Packets and queue pairs: the units the packet engine moves.

A :class:`QueuePair` is one transport flow (one 5-tuple) carrying part of a message: it holds
the sender's state (next sequence, acknowledged prefix, retransmission queue, congestion state)
and the receiver's state (in-order prefix, out-of-order set, reorder statistics). A
:class:`Packet` is one wire unit: data (an MTU packet, or a cell of several when
``simulation.cell_packets > 1``) or a control packet (ACK, NAK, CNP) on the reverse path.
Both use ``__slots__``: millions are created per run.

Sequence numbers count MTU packets (PSNs). A data unit starting at PSN ``s`` carries payload
bytes ``[s*mtu, min((s+cell)*mtu, size))`` of its queue pair.
"""
from __future__ import annotations

from collections import deque

# flow identity (5-tuples, hashes, the queue-pair split) is the engine-neutral layer's; re-exported here
from ..flows.identity import (  # noqa: F401
    FLOWS_SALT_STREAM, MASK64, ROCE_DPORT, UDP, UNIT, ConnectionTable, five_tuple_hash, mix64, packet_draw,
    queue_pair_tuple, split_bytes)

DATA, ACK, NAK, CNP = 0, 1, 2, 3
KIND_NAMES = ("data", "ack", "nak", "cnp")


class QueuePair:
    """One flow of a message. ``hash`` is the seeded 64-bit hash of its 5-tuple. ``queues``: whether
    it holds the sender's PSN queues and sets (False when the compiled core keeps them)."""

    __slots__ = (
        "uid", "msg", "src", "dst", "sport", "hash", "size", "npsn", "seq",
        # sender
        "una", "high", "rtx", "sacked", "lost", "resent", "reo", "outstanding", "out_bytes", "rack_t", "next_ok",
        "nics", "nicmask", "flow", "rto_at", "rto_armed", "timeouts", "goback_t", "gb_cause", "sent_done",
        "srtt", "rttvar", "rto_draws", "rto_u", "probed", "reo_t", "heir",
        # receiver
        "r_cum", "r_max", "r_maxt", "r_set", "r_hold", "r_arr", "r_unacked", "r_ce", "r_last_cnp", "r_nak", "r_port",
        "r_tack", "r_tsent", "r_tel", "r_acks", "r_last_rx",
    )

    def __init__(self, uid, msg, src, dst, sport, flow_hash, size, mtu=1, queues=True):
        self.uid = uid
        self.msg = msg          # MessageState
        self.src = src
        self.dst = dst
        self.sport = sport
        self.hash = flow_hash
        self.size = size        # payload bytes
        self.npsn = -(-size // mtu)   # PSNs (MTU packets) in the flow
        self.seq = 0            # next new PSN to send (snd_nxt)
        self.una = 0            # cumulative acknowledged PSN (snd_una)
        self.high = 0           # highest PSN + 1 ever sent (below it, a send is a retransmission)
        # (queues=False: a queue pair whose sender keeps these in its own arrays, the compiled core's
        #  per-PSN arena and lists: ~2 KB less per queue pair, none of it read after the run)
        self.rtx = deque() if queues else None      # (psn, cause) to retransmit before new data
        self.sacked = set() if queues else None     # PSNs >= una acknowledged selectively
        self.lost = set() if queues else None       # PSNs presumed lost and not yet resent
        self.resent = {} if queues else None        # PSN -> time of its latest retransmission (older sends are stale)
        self.reo = 0            # RACK reorder window of this QP (ps); 0 = the configured one
        self.outstanding = deque() if queues else None  # (psn, t_sent) in send order, for loss detection
        self.out_bytes = 0      # payload bytes sent, not acknowledged, not presumed lost
        self.rack_t = -1        # latest send time among acknowledged units (RACK)
        self.next_ok = 0        # pacing: earliest time of the next packet
        self.nics = ()          # NIC ports this QP may use
        self.nicmask = 0        # bit per NIC port whose active list holds this QP
        self.flow = None        # cc.Flow
        self.rto_at = 0
        self.rto_armed = False
        self.timeouts = 0       # consecutive timeouts without progress
        self.goback_t = -1      # go-back-N: time of the last rewind
        self.gb_cause = ""      # cause of PSNs resent after a rewind
        self.sent_done = False
        self.srtt = 0           # smoothed RTT (ps; 0 = no sample yet), RFC 6298, adaptive timeouts only
        self.rttvar = 0         # RTT variation (ps)
        self.heir = None        # persistent connection: this queue pair's state for the next message
        self.rto_draws = 0      # adaptive timeouts: counter of random draws (counter-based jitter)
        self.rto_u = 0          # adaptive timeouts: the current draw, uniform in [0, 2**24)
        self.probed = None      # adaptive timeouts: PSNs resent as timeout probes (set), not yet D-SACKed
        self.reo_t = -1         # D-SACK: when the reorder window was last widened
        self.r_cum = 0          # receiver: next expected PSN (everything below is in)
        self.r_max = 0          # receiver: highest PSN + npk seen
        self.r_maxt = -1        # receiver: latest send time among units received
        self.r_set = None       # receiver: PSNs held beyond r_cum (set), created on first gap
        self.r_hold = 0         # receiver: payload bytes held beyond r_cum
        self.r_arr = None       # receiver: PSN -> arrival time of held units (reorder delay)
        self.r_unacked = 0      # receiver: units accepted since the last ACK
        self.r_ce = 0           # receiver: CE-marked units since the last ACK
        self.r_last_cnp = None  # receiver: time of the last CNP sent
        self.r_nak = False      # receiver (go-back-N): a NAK is outstanding
        self.r_port = None      # receiver: NIC port the control packets leave by
        self.r_tack = -1        # receiver (coalescing): latest send time among units since the last ACK
        self.r_tsent = -1       # receiver (coalescing): latest send time reported by an ACK
        self.r_tel = None       # receiver (coalescing): telemetry of the latest unit since the last ACK
        self.r_acks = 0         # receiver: ACKs sent (token of the delayed-ACK timer)
        self.r_last_rx = 0      # receiver (coalescing): arrival time of the latest unit


class Packet:
    """One wire unit. ``wire`` includes headers; ``t_tx`` is when its first bit left the source NIC;
    ``hop`` is the port it is crossing (whose ``inflight`` holds its pending arrival).

    Data: ``seq`` is its first PSN, ``npk`` the MTU packets it stands for. Control packets (``kind``
    ACK/NAK/CNP) travel from ``qp.dst`` to ``qp.src``: ``seq`` is the cumulative PSN acknowledged
    (ACK) or expected (NAK), ``sack`` the PSN of the data unit that triggered them, ``t_data`` when
    that unit was sent. A coalesced ACK (``receiver.ack_every > 1``) instead carries ``sacks``, a
    bitmap (int) of the units held beyond ``seq`` (bit ``i``: the unit at PSN ``seq + i * cell``), with ``sack = -1`` and ``t_data`` the latest send time among the units it
    covers; ``dsack`` is the PSN of a duplicate that triggered the ACK (D-SACK, RFC 2883), else -1.
    ``ce`` is the ECN mark (data) or the count of marks echoed (ACK); ``tel``
    the in-band telemetry stack (list of (ts_ps, tx_bytes, qlen_bytes, rate_bps, port_id)) or None.
    """

    __slots__ = ("qp", "dst", "wire", "payload", "seq", "t_tx", "npk", "hop", "kind", "ce", "tel", "sack",
                 "t_data", "inport", "sacks", "dsack")

    def __init__(self, qp, dst, wire, payload, seq, t_tx, npk, hop=None, kind=DATA):
        self.qp = qp
        self.dst = dst
        self.wire = wire
        self.payload = payload
        self.seq = seq
        self.t_tx = t_tx
        self.npk = npk          # MTU packets this unit stands for (1 unless cells are used)
        self.hop = hop
        self.kind = kind
        self.ce = 0
        self.tel = None
        self.sack = 0
        self.t_data = 0
        self.inport = None      # lossless mode: the ingress port it is accounted to
