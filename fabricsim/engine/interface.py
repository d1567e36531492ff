"""The small interface every engine implements, and what it is given.

An engine receives a :class:`SimulationInput` (scenario, built topology, equal-cost paths,
messages, random streams) and a :class:`~fabricsim.analysis.recorder.Recorder`, runs, and
returns a :class:`RunOutcome`. Everything else (scenario parsing, topology, routing semantics,
traffic, the results schema and writers) is shared, so a flow-level engine only has to fill the
same recorder: message completions, packet latencies (if it models packets) and link counters.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

from ..registry import Registry

ENGINES: Registry = Registry("engine")


@dataclass
class SimulationInput:
    scenario: object            # fabricsim.config.Scenario
    topology: object            # fabricsim.topology.Topology
    paths: object               # fabricsim.topology.paths.EqualCostPaths
    messages: list              # list[fabricsim.traffic.Message]
    streams: object             # fabricsim.engine.rng.RandomStreams


@dataclass
class RunOutcome:
    """How a run ended and what it cost."""

    status: str                 # "complete" | "incomplete" | "time_limit" | "interrupted" | "stalled"
    end_ps: int                 # simulated time at the end
    events: int
    packet_hops: int
    links: list = field(default_factory=list)   # one dict per directed link (see docs/metrics.md)
    counters: dict = field(default_factory=dict)
    #: [(time_ps, [wire bytes that had left each link's port by then], [queued bytes per link])],
    #: links in the order of ``links``
    link_samples: list = field(default_factory=list)
    link_samples_truncated: bool = False
    #: receiving host -> peak bytes held beyond in-order prefixes (all its queue pairs together)
    host_peak_hold: dict = field(default_factory=dict)
    #: configuration problems the run noticed (one line each), also printed by the CLI
    warnings: list = field(default_factory=list)


class Engine(Protocol):
    name: str

    def __init__(self, sim: SimulationInput, recorder) -> None: ...

    def run(self, progress: Callable[[int], None] | None = None) -> RunOutcome: ...
