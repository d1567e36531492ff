"""Deployment profiles: one scenario line (``profile: spectrum_x``) that stands for a whole fabric.

A profile is a set of section settings (routing, receiver, congestion control, switch features,
NIC) that together describe a real deployment. It is expanded *under* the scenario: every key the
scenario sets itself wins, so ``profile: spectrum_x`` with ``routing: {policy: ecmp}`` is
Spectrum-X without adaptive routing. Where the scenario names a different model than the profile
(another routing policy, receiver model, CC algorithm or plane split), the profile's parameters for
that model are dropped with it, since they belong to the model the profile chose.

``scenario.resolved.yaml`` records the profile's name and every setting it expanded to, so a
resolved scenario reloads to the same run. ``fabricsim profile show NAME`` prints a profile.

Profiles (docs/scenarios.md, values and sources in docs/fidelity.md):

``spectrum_x``
    NVIDIA Spectrum-X as deployed for AI training: per-packet adaptive routing on the switches,
    out-of-order direct data placement in the ConnectX SuperNIC, telemetry-driven congestion
    control (HPCC-like model of Spectrum-X CC), lossless RoCE (PFC on, ECN on).
``ethernet``
    Standard RoCEv2 over a classic Ethernet fabric: per-flow ECMP hashing, an in-order (go-back-N)
    responder, DCQCN, lossless RoCE (PFC on, ECN on).
``none``
    No profile: every field takes its own default (a lossy, uncontrolled fabric; useful as the
    raw reference).
"""
from __future__ import annotations

import copy
from typing import Any

from ..registry import Registry

PROFILES: Registry = Registry("profile", group="fabricsim.profiles")

#: sections whose model is chosen by name: section -> the key naming it
NAMED_SECTIONS = {"routing": "policy", "receiver": "model", "congestion_control": "algorithm",
                  "nic": "plane_split"}


class Profile:
    """A named deployment: ``settings`` maps scenario sections to the values the profile sets."""

    def __init__(self, name: str, summary: str, settings: dict):
        self.name = name
        self.summary = summary
        self.settings = settings

    def expand(self, data: dict) -> dict:
        """``data`` (a raw scenario mapping) with this profile's settings beneath it."""
        out = dict(data)
        for section, base in self.settings.items():
            out[section] = merge_section(section, copy.deepcopy(base), data.get(section))
        return out


def merge_section(section: str, base: dict, user: Any) -> Any:
    """The user's value for ``section`` laid over the profile's ``base`` (see module doc)."""
    if user is None:
        return base
    name_key = NAMED_SECTIONS.get(section)
    if name_key is not None and isinstance(user, str):
        user = {name_key: user}
    if not isinstance(user, dict):
        return user                       # let the section's own validation say what is wrong
    if name_key is not None and name_key in user and user[name_key] != base.get(name_key):
        return dict(user)                 # another model: the profile's parameters do not apply
    return deep_merge(base, user)


def deep_merge(base: dict, over: dict) -> dict:
    """``over`` laid over ``base``, recursively for nested mappings."""
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def apply_profile(data: dict) -> dict:
    """Expand ``data["profile"]`` (if any) beneath ``data``. Raises ValueError for an unknown name."""
    name = data.get("profile", "none")
    if not isinstance(name, str) or name not in PROFILES:
        raise ValueError("profile: " + PROFILES.unknown_message(name))
    return PROFILES.get(name).expand(data)


def _register(profile: Profile) -> None:
    PROFILES.register(profile.name)(profile)


_register(Profile("none", "no profile: every field takes its own default (lossy, no congestion control)", {}))

_register(Profile(
    "spectrum_x",
    "NVIDIA Spectrum-X: switch adaptive routing, ConnectX out-of-order placement (DDP), telemetry CC, "
    "lossless RoCE",
    {
        # per-packet AR on graded egress-queue quality with neighbour notifications
        # (docs/fidelity/routing.md); the policy's defaults are the Spectrum-X model
        "routing": {"policy": "adaptive"},
        # ConnectX OOO placement; adaptive retransmission with an RTT floor (PFC-paused queues
        # must not fire probes); one ACK per packet, as the telemetry controller updates per ACK
        "receiver": {"model": "ddp", "rto_mode": "adaptive", "rto_rttvar_mult": 4, "ack_every": 1},
        # HPCC-like INT controller with the multipath estimator (docs/fidelity/telemetry.md)
        "congestion_control": {"algorithm": "telemetry"},
        # NVIDIA switch RoCE defaults: lossless RoCE class, CNP strict priority, ECN from the
        # dequeue-time queue, fully shared buffer with dynamic thresholds
        "switch": {"pfc": {"enabled": True}, "ecn": {"enabled": True, "sample": "dequeue"},
                   "strict_priority": "cnp", "buffer": {"admission": "dynamic", "alpha": 1.0}},
    }))

_register(Profile(
    "ethernet",
    "standard RoCEv2 on classic Ethernet: ECMP, in-order (go-back-N) responder, ConnectX DCQCN, lossless RoCE",
    {
        # per-flow 5-tuple hashing, one queue pair per message unless the traffic says otherwise
        "routing": {"policy": "ecmp"},
        # an in-order RC responder (NAK + go-back-N), fixed IRN-style timers, coalesced ACKs
        "receiver": {"model": "go_back_n", "rto_mode": "fixed", "ack_every": 64},
        # the ConnectX firmware DCQCN with its DOCA defaults (docs/fidelity/switch.md)
        "congestion_control": {"algorithm": "dcqcn_cx"},
        "switch": {"pfc": {"enabled": True}, "ecn": {"enabled": True, "sample": "dequeue"},
                   "strict_priority": "cnp", "buffer": {"admission": "dynamic", "alpha": 1.0}},
    }))


#: what a plug-in of this family must be (fabricsim/registry.py, Registry.discover)
PROFILES.accepts(Profile, "a Profile")
