"""``switch:`` section: features every switch runs: ECN marking, in-band telemetry, PFC.

ECN (RED-style, on each egress queue): a data packet that finds ``q`` bytes queued ahead of it is
marked CE with probability 0 (q <= kmin), ``pmax (q-kmin)/(kmax-kmin)`` (kmin < q <= kmax) or 1
(q > kmax) (DCQCN paper section 3.1). Defaults: NVIDIA Onyx RoCE thresholds 150 KB / 1500 KB;
``pmax`` 0.2 as in the HPCC ns-3 configuration (the vendor's value is not published) [EST].

Telemetry (INT, HPCC-style): each switch egress hop appends (departure time, the port's transmitted
bytes, the bytes queued ahead of the packet, the link rate) to data packets; the receiver echoes
the stack in its ACK. ``auto`` stamps only when the congestion-control algorithm uses it.

PFC (IEEE 802.1Qbb, lossless): bytes held in a switch are accounted to the ingress port they came
in by; above ``xoff`` the switch pauses the upstream transmitter of that link (after the link's
propagation delay), below ``xon`` it resumes it. Control packets (ACK, NAK, CNP) travel on a
separate strict-priority class that is never paused. No packet is dropped in lossless mode.
Defaults are htsim's (15 / 12 packets of 9000 B: 135 KB / 108 KB).
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from .types import STRICT, PositiveSize, Size


class EcnConfig(BaseModel):
    model_config = STRICT
    enabled: bool = True
    kmin: Size = Field("150KB", description="queue below which nothing is marked (Onyx RoCE default 150 KB)")
    kmax: PositiveSize = Field("1500KB", description="queue above which every packet is marked (Onyx 1500 KB)")
    pmax: float = Field(0.2, gt=0, le=1, description="marking probability at kmax (HPCC ns-3 0.2) [EST]")

    @model_validator(mode="after")
    def _order(self):
        if self.kmin > self.kmax:
            raise ValueError(f"kmin ({self.kmin} B) must not exceed kmax ({self.kmax} B)")
        return self


class PfcConfig(BaseModel):
    model_config = STRICT
    enabled: bool = False
    xoff: PositiveSize = Field("135KB", description="ingress bytes above which the upstream port is paused "
                                                    "(htsim: 15 x 9000 B)")
    xon: Size = Field("108KB", description="ingress bytes below which it resumes (htsim: 12 x 9000 B)")

    @model_validator(mode="after")
    def _order(self):
        if self.xon >= self.xoff:
            raise ValueError(f"xon ({self.xon} B) must be below xoff ({self.xoff} B)")
        return self


class SwitchFeatures(BaseModel):
    """Features of every switch (see module doc)."""

    model_config = STRICT
    ecn: EcnConfig = Field(default_factory=EcnConfig)
    telemetry: Literal["auto", "on", "off"] = "auto"
    pfc: PfcConfig = Field(default_factory=PfcConfig)
