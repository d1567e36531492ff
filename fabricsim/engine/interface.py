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

ENGINES: Registry = Registry("engine", group="fabricsim.engines")


#: the links table's columns (``RunOutcome.links``: one dict per directed link, or one column each): name -> meaning
#: (docs/metrics.md). Every engine fills ``REQUIRED_LINK_COLUMNS``; a column an engine leaves out is
#: NA in the results, and the engine says why in ``RunOutcome.not_modelled``.
LINK_COLUMNS = {
    "link_id": "directed link (flows.links.LinkTable numbering)",
    "src": "node the link leaves", "dst": "node it enters", "kind": "link kind",
    "rate_bps": "line rate", "delay_ps": "propagation delay",
    "tx_bytes": "wire bytes sent (data and control)", "tx_data_bytes": "wire bytes of data packets",
    "tx_control_bytes": "wire bytes of control packets (ACK, NAK, CNP)", "tx_packets": "packets sent",
    "tx_control_packets": "control packets sent (of tx_packets)",
    "peak_queue_bytes": "largest backlog", "drops_buffer_full": "packets dropped, buffer full",
    "dropped_bytes": "wire bytes dropped", "drops_control": "control packets dropped",
    "ecn_marked_packets": "packets CE-marked", "pfc_pause_events": "PFC pauses received",
    "pfc_paused_ps": "time paused by PFC", "pfc_peak_ingress_bytes": "peak ingress bytes at the lossless peer",
    "pfc_headroom_bytes": "headroom the PFC response delay needs",
}
REQUIRED_LINK_COLUMNS = ("link_id", "src", "dst", "kind", "rate_bps", "delay_ps", "tx_bytes", "tx_data_bytes")


@dataclass
class SimulationInput:
    scenario: object            # fabricsim.config.Scenario
    topology: object            # fabricsim.topology.Topology
    paths: object               # fabricsim.topology.paths.EqualCostPaths
    messages: list              # Sequence[Message]: a list, or a fabricsim.flows.MessageTable
    streams: object             # fabricsim.engine.rng.RandomStreams
    _ideal: object = field(default=None, init=False, repr=False, compare=False)
    _links: object = field(default=None, init=False, repr=False, compare=False)

    def ideal_model(self):
        """The run's :class:`~fabricsim.analysis.ideal.IdealModel`, built on first use and cached:
        one for the engine and the results, so they share its memos (per pair class, per
        (class, size, qps))."""
        if self._ideal is None:
            from ..analysis.ideal import IdealModel
            self._ideal = IdealModel(self)
        return self._ideal

    def link_table(self):
        """The topology's :class:`~fabricsim.flows.links.LinkTable`, built on first use and cached:
        one for the engine and the results."""
        if self._links is None:
            from ..flows.links import LinkTable
            self._links = LinkTable(self.topology)
        return self._links


@dataclass
class RunOutcome:
    """How a run ended and what it cost."""

    status: str                 # "complete" | "incomplete_failed" | "time_limit" | "interrupted" | "stalled"
    end_ps: int                 # simulated time at the end
    events: int
    packet_hops: int
    #: the directed links (see docs/metrics.md): one dict per link, or a dict of columns (each a
    #: sequence with one entry per link, as the flow engine reports them)
    links: list | dict = field(default_factory=list)
    counters: dict = field(default_factory=dict)
    #: [(time_ps, [wire bytes that had left each link's port by then], [queued bytes per link])],
    #: links in the order of ``links``
    link_samples: list = field(default_factory=list)
    link_samples_truncated: bool = False
    #: receiving host -> peak bytes held beyond in-order prefixes (all its queue pairs together)
    host_peak_hold: dict = field(default_factory=dict)
    #: configuration problems the run noticed (one line each), also printed by the CLI
    warnings: list = field(default_factory=list)
    #: figures this engine does not produce -> why (``summary["not_modelled"]``; the columns are NA)
    not_modelled: dict = field(default_factory=dict)


class Engine(Protocol):
    name: str

    def __init__(self, sim: SimulationInput, recorder) -> None: ...

    def run(self, progress: Callable[[int], None] | None = None) -> RunOutcome: ...


#: what a plug-in of this family must be (fabricsim/registry.py, Registry.discover)
ENGINES.accepts(lambda obj: isinstance(obj, type) and callable(getattr(obj, "run", None)), "an engine class (with run())")
