"""``switch:`` section: features every switch runs: priority classes, ECN marking, in-band
telemetry, buffer admission, PFC.

Priority classes (``strict_priority``): NVIDIA switch RoCE defaults put CNPs on TC6 with strict
priority and RoCE traffic (data and its ACK/NAK) on TC3 (Onyx ``show roce``). ``cnp`` (default)
does that: a CNP overtakes the data queue, ACKs and NAKs wait in it (and are paused with it under
PFC). ``control`` puts ACK, NAK and CNP in the strict class; ``none`` puts everything in one FIFO.

ECN (RED-style, on each egress queue): a data packet that sees ``q`` bytes of queue is marked CE
with probability 0 (q <= kmin), ``pmax (q-kmin)/(kmax-kmin)`` (kmin < q <= kmax) or 1 (q > kmax)
(DCQCN paper section 3.1). ``sample: dequeue`` (default, as both ns-3 reference codes: HPCC ns-3
switch-node.cc SwitchNotifyDequeue, DCQCN ns-3 broadcom-node.cc) takes q = the bytes queued
behind the packet when it starts to leave; ``enqueue`` takes the bytes queued ahead of it on
arrival. Defaults: NVIDIA Onyx RoCE thresholds 150 KB / 1500 KB; ``pmax`` 0.2 as in the HPCC ns-3
configuration (the vendor's value is not published) [EST].

Telemetry (INT, HPCC-style): each switch egress hop appends (departure time, the port's transmitted
bytes, a queue length sampled as ECN's ``sample``, the link rate, the port id) to data packets; the
receiver echoes the stack in its ACK. ``auto`` stamps only when the congestion-control algorithm
uses it. A stamped packet grows on the wire: ``int_header`` once, at its first hop, and
``int_hop`` per hop (HPCC ns-3 int-header.h: 2 B hop count + 8 B per hop).

Buffer (``buffer.admission``): ``static`` (default) uses the topology's ``buffer`` as it is (a
fixed limit per egress port, or one shared pool with no per-port limit). ``dynamic`` shares one
pool per switch among its egress ports with the Choudhury-Hahne dynamic threshold (IEEE/ACM ToN
1998): a packet of ``w`` bytes to port i is admitted iff ``q_i + w <= alpha * (B - used)`` and
``used + w <= B``, or ``q_i + w <= reserve`` (a per-port floor). ``B`` is ``buffer.size`` or, if
unset, the topology's buffer: the per-port size times the switch's port count (per_port) or the
pool size (shared). Spectrum-4 (SN5600) has a fully shared buffer whose size NVIDIA does not
publish (128 MB in third-party pages) [EST]; ``alpha`` 1 [EST] (Choudhury-Hahne's example; vendors
expose alpha as powers of two); ``reserve`` 0 [EST]. Lossy mode only (PFC mode never drops).

PFC (IEEE 802.1Qbb, lossless): bytes held in a switch are accounted to the ingress port they came
in by; above ``xoff`` the switch pauses the upstream transmitter of that link, below ``xon`` it
resumes it. The pause (or resume) takes effect after the link's propagation delay plus the peer's
``response`` time (``auto``: the IEEE 802.3 Annex 31B bound in pause quanta of 512 bit times at the
link rate: 60 at 10G, 394 at 25-100G, 905 at 200G and above; 25-50G and 200G/800G [EST]). The
lossless class (data, and ACK/NAK unless they are strict priority) is paused; the strict class
never is. No packet is dropped in lossless mode. Threshold defaults are htsim's (15 / 12 packets
of 9000 B: 135 KB / 108 KB).
"""
from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import BaseModel, Field, model_validator

from .types import STRICT, PositiveSize, Size, Time

#: IEEE 802.3 Annex 31B PFC response bound, in pause quanta (512 bit times), at listed link rates:
#: (rate in bit/s, quanta). 10G 60, 100G 394, 400G 905 [2nd: besthub.dev headroom note].
PFC_RESPONSE_QUANTA = ((10 * 10**9, 60), (100 * 10**9, 394), (400 * 10**9, 905))


def _quanta_ps(quanta: int, rate_bps: int) -> int:
    return -((-quanta * 512 * 10**12) // rate_bps)


def pfc_response_ps(rate_bps: int) -> int:
    """Annex 31B response bound at ``rate_bps``, in ps (quanta x 512 bit times, rounded up).

    At a listed rate, its bound; between two listed rates, the slower one's bound as a time (so
    the response never grows with the link rate) [EST]; below 10G or above 400G, 60 or 905
    quanta at the link's own rate [EST].

    >>> pfc_response_ps(400 * 10**9)   # 905 quanta x 1.28 ns
    1158400
    >>> pfc_response_ps(100 * 10**9)   # 394 x 5.12 ns
    2017280
    >>> pfc_response_ps(200 * 10**9) == pfc_response_ps(100 * 10**9)
    True
    """
    pts = PFC_RESPONSE_QUANTA
    if rate_bps <= pts[0][0]:
        return _quanta_ps(pts[0][1], rate_bps)
    for (r0, q0), (r1, _q1) in zip(pts, pts[1:]):
        if rate_bps < r1:
            return _quanta_ps(q0, r0)
    return _quanta_ps(pts[-1][1], rate_bps)


class EcnConfig(BaseModel):
    model_config = STRICT
    enabled: bool = True
    kmin: Size = Field("150KB", description="queue below which nothing is marked (Onyx RoCE default 150 KB)")
    kmax: PositiveSize = Field("1500KB", description="queue above which every packet is marked (Onyx 1500 KB)")
    pmax: float = Field(0.2, gt=0, le=1, description="marking probability at kmax (HPCC ns-3 0.2) [EST]")
    sample: Literal["dequeue", "enqueue"] = Field("dequeue", description=(
        "when q is read, for ECN and INT: dequeue = bytes queued behind the packet as it starts to leave "
        "(both ns-3 reference codes); enqueue = bytes queued ahead of it on arrival"))

    @model_validator(mode="after")
    def _order(self):
        if self.kmin > self.kmax:
            raise ValueError(f"kmin ({self.kmin} B) must not exceed kmax ({self.kmax} B)")
        return self


class BufferConfig(BaseModel):
    """Admission to the switch packet buffer (see module doc)."""

    model_config = STRICT
    admission: Literal["static", "dynamic"] = Field("static", description=(
        "static: the topology's buffer (per-port limit or plain shared pool); dynamic: one pool per switch "
        "with the Choudhury-Hahne dynamic threshold"))
    alpha: float = Field(1.0, gt=0, description="dynamic threshold factor: q_i <= alpha x free pool [EST]")
    reserve: Size = Field("0B", description=(
        "bytes per egress port admitted without the dynamic-threshold test, as long as the pool has room [EST]"))
    size: Optional[PositiveSize] = Field(None, description=(
        "pool per switch; None = the topology's buffer (per-port size x ports, or the shared pool). "
        "SN5600: not published, 128 MB in third-party pages [EST]"))


class PfcConfig(BaseModel):
    model_config = STRICT
    enabled: bool = False
    xoff: PositiveSize = Field("135KB", description="ingress bytes above which the upstream port is paused "
                                                    "(htsim: 15 x 9000 B)")
    xon: Size = Field("108KB", description="ingress bytes below which it resumes (htsim: 12 x 9000 B)")
    response: Union[Time, Literal["auto"]] = Field("auto", description=(
        "the peer's reaction time to a pause frame, after its flight; auto = IEEE 802.3 Annex 31B bound at "
        "the link rate (905 quanta = 1.16 us at 400G)"))

    @model_validator(mode="after")
    def _order(self):
        if self.xon >= self.xoff:
            raise ValueError(f"xon ({self.xon} B) must be below xoff ({self.xoff} B)")
        return self

    def response_ps(self, rate_bps: int) -> int:
        """The peer's response time on a link of ``rate_bps``."""
        return pfc_response_ps(rate_bps) if self.response == "auto" else int(self.response)


class SwitchFeatures(BaseModel):
    """Features of every switch (see module doc)."""

    model_config = STRICT
    strict_priority: Literal["cnp", "control", "none"] = Field("cnp", description=(
        "packets in the strict-priority class: cnp (NVIDIA RoCE default: CNP on TC6), control (ACK, NAK, "
        "CNP), none (one FIFO)"))
    ecn: EcnConfig = Field(default_factory=EcnConfig)
    telemetry: Literal["auto", "on", "off"] = "auto"
    int_header: Size = Field("2B", description="INT bytes added once per stamped packet (HPCC ns-3: 2 B hop count)")
    int_hop: Size = Field("8B", description="INT bytes added per stamped hop (HPCC ns-3: 8 B)")
    buffer: BufferConfig = Field(default_factory=BufferConfig)
    pfc: PfcConfig = Field(default_factory=PfcConfig)
