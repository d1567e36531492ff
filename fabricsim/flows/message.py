"""The point-to-point message: the traffic unit every engine replays.

A message is released at ``start_ps`` or, if it has dependencies, ``gap_ps`` after the last of
``deps`` completes, whichever is later. ``tag`` fields are free-form labels (collective,
phase, layer) that trace formats fill in. ``conn`` names the logical connection whose queue pairs
the message reuses (docs/traces.md, "Connections").
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Message:
    id: int
    src: int
    dst: int
    size_bytes: int
    start_ps: int = 0
    qps: int = 1
    deps: tuple[int, ...] = ()
    gap_ps: int = 0
    tags: dict = field(default_factory=dict, compare=False, hash=False)
    #: logical connection (trace column ``conn``): messages with the same ``conn`` and the same
    #: (src, dst) are sent on the same queue pairs (same 5-tuples); -1: fresh queue pairs
    conn: int = -1
