"""The small interface every engine implements, and what it is given.

An engine receives a :class:`SimulationInput` (scenario, built topology, equal-cost paths,
messages, random streams) and a :class:`~fabricsim.analysis.recorder.Recorder`, runs, and
returns a :class:`RunOutcome`. Everything else (scenario parsing, topology, routing semantics,
traffic, the results schema and writers) is shared, so a flow-level engine only has to fill the
same recorder: message completions, packet latencies (if it models packets) and link counters.

The results schema an engine fills is declared here: :data:`MESSAGE_COLUMNS` (every engine),
:data:`TRANSPORT_COLUMNS` and the optional :data:`LINK_COLUMNS`, each with the figure group of
:data:`NOT_MODELLED_KEYS` it belongs to and its NA default. An engine reports what it models and
leaves the rest out; the results then hold NA there and ``summary["not_modelled"]`` names each
group left out with the engine's reason (``RunOutcome.not_modelled``) or :func:`not_reported`'s.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Protocol

from ..registry import Registry

ENGINES: Registry = Registry("engine", group="fabricsim.engines")


class Column(NamedTuple):
    """A declared result column: what it means, and, for a column an engine may leave out, the
    :data:`NOT_MODELLED_KEYS` group it belongs to and the pandas dtype of its NA default."""

    meaning: str
    #: "" = every engine reports it; else the ``not_modelled`` key of the group it belongs to
    group: str = ""
    #: pandas dtype of the column when the engine leaves it out (all NA, never 0)
    dtype: str = "Int64"


#: The figure groups an engine may leave out (the keys of ``RunOutcome.not_modelled`` and of
#: ``summary["not_modelled"]``) -> what each covers. An engine states why it does not produce a
#: group (``RunOutcome.not_modelled[key] = reason``); a group whose columns it leaves out (absent,
#: or NA throughout) without a reason gets :func:`not_reported`'s. ``nics`` follows ``transport``
#: (the table is built from those columns); ``packet_latency`` is left out when no packet latency
#: was recorded although payload was delivered; ``link_timeseries`` when the engine gave no link
#: sample although sampling was on.
NOT_MODELLED_KEYS = {
    "packet_latency": "one-way packet latency: latency_histogram.* and summary.packet_latency",
    "transport": "per-message transport statistics (retransmissions, reordering, ECN marks, CNPs, NAKs): "
                 "the messages table's TRANSPORT_COLUMNS, the links' ecn_marked_packets, summary.transport",
    "nics": "the per-host NIC table (nics.*), built from the messages' transport columns",
    "drops": "packet drops: the links' drops_buffer_full, dropped_bytes, drops_control; summary.drops",
    "queues": "queues and PFC: the links' peak_queue_bytes and pfc_* columns, the link time series' queue_bytes, "
              "summary.links.max_peak_queue_bytes",
    "control_bytes": "control packets (ACK/NAK/CNP): the links' tx_control_bytes and tx_control_packets",
    "packets": "packet counts: the links' tx_packets",
    "link_timeseries": "the per-link time series (link_timeseries.*) from periodic link samples",
}


def not_reported(engine: str, key: str) -> str:
    """The reason ``summary["not_modelled"][key]`` gives for a group the engine left out without
    a reason of its own.

    >>> not_reported("toy", "packets")
    "not reported by the 'toy' engine (packet counts: the links' tx_packets)"
    """
    return f"not reported by the {engine!r} engine ({NOT_MODELLED_KEYS[key]})"


#: The messages table's core columns (docs/metrics.md), in table order: every engine reports all
#: of them (rows through ``Recorder.on_message`` / ``on_messages``, or columns through
#: ``Recorder.hand_over``).
MESSAGE_COLUMNS = {
    "message_id": Column("message id"), "src": Column("source host"), "dst": Column("destination host"),
    "size_bytes": Column("payload bytes"), "qps": Column("queue pairs the message was spread over"),
    "start_ps": Column("earliest release time given by the traffic"),
    "release_ps": Column("when the message was handed to the source NIC (NA: never released)"),
    "end_ps": Column("arrival of its last payload byte (completed messages)"),
    "fct_ps": Column("end_ps - release_ps (completed messages)"),
    "delivered_bytes": Column("payload that arrived"), "dropped_bytes": Column("payload dropped in the network"),
    "completed": Column("all payload accepted"), "incomplete_reason": Column("why not ('' if completed)"),
}
#: The messages table's transport columns (docs/metrics.md, "Transport columns"), after the core
#: ones: the ``transport`` group, NA where an engine does not report them.
TRANSPORT_COLUMNS = {
    "retransmitted_bytes": Column("payload bytes sent again, all causes", "transport"),
    "rtx_sack_bytes": Column("resent because RACK presumed them lost", "transport"),
    "rtx_timeout_bytes": Column("resent after a retransmission timeout", "transport"),
    "rtx_nak_bytes": Column("resent after a go-back-N rewind", "transport"),
    "duplicate_bytes": Column("payload that arrived although already accepted", "transport"),
    "received_packets": Column("units received and not duplicates", "transport"),
    "out_of_order_fraction": Column("units that arrived after a later one of their queue pair", "transport", "Float64"),
    "reorder_distance_p50_packets": Column("median reorder distance", "transport"),
    "reorder_distance_p99_packets": Column("99th percentile reorder distance", "transport"),
    "reorder_distance_max_packets": Column("largest reorder distance", "transport"),
    "peak_reorder_bytes": Column("most bytes held beyond the in-order prefix", "transport"),
    "reorder_delay_mean_ps": Column("mean wait of a unit for the gap before it", "transport", "Float64"),
    "reorder_delay_max_ps": Column("longest such wait", "transport"),
    "ecn_marked_packets": Column("packets that arrived CE-marked", "transport"),
    "cnps": Column("CNPs the sender received", "transport"),
    "naks": Column("NAKs the sender received", "transport"),
    "reorder_overflow_bytes": Column("payload discarded, reorder buffer full", "transport"),
    "discarded_out_of_order_bytes": Column("payload discarded beyond a gap (go-back-N)", "transport"),
}

#: The links table's columns (``RunOutcome.links``: one dict per directed link, or one column
#: each; docs/metrics.md). Every engine fills ``REQUIRED_LINK_COLUMNS``; a column an engine
#: leaves out is NA in the results, and its group is in ``summary["not_modelled"]``.
LINK_COLUMNS = {
    "link_id": Column("directed link (flows.links.LinkTable numbering)"),
    "src": Column("node the link leaves"), "dst": Column("node it enters"), "kind": Column("link kind"),
    "rate_bps": Column("line rate"), "delay_ps": Column("propagation delay"),
    "tx_bytes": Column("wire bytes sent (data and control)"), "tx_data_bytes": Column("wire bytes of data packets"),
    "tx_control_bytes": Column("wire bytes of control packets (ACK, NAK, CNP)", "control_bytes"),
    "tx_packets": Column("packets sent", "packets"),
    "tx_control_packets": Column("control packets sent (of tx_packets)", "control_bytes"),
    "peak_queue_bytes": Column("largest backlog", "queues"),
    "drops_buffer_full": Column("packets dropped, buffer full", "drops"),
    "dropped_bytes": Column("wire bytes dropped", "drops"),
    "drops_control": Column("control packets dropped", "drops"),
    "ecn_marked_packets": Column("packets CE-marked", "transport"),
    "pfc_pause_events": Column("PFC pauses received", "queues"),
    "pfc_paused_ps": Column("time paused by PFC", "queues"),
    "pfc_peak_ingress_bytes": Column("peak ingress bytes at the lossless peer", "queues"),
    "pfc_headroom_bytes": Column("headroom the PFC response delay needs", "queues"),
}
REQUIRED_LINK_COLUMNS = tuple(n for n, c in LINK_COLUMNS.items() if not c.group)


#: The figures that follow from when messages end (summary keys, dotted; a table's columns as
#: "<table>.<column>"): what an engine whose timing is a model's estimate lists in
#: ``RunOutcome.fidelity["estimated"]`` (the flow engine; the packet engine with cells).
TIMED_FIGURES = ("pattern.last_end_ps", "pattern.duration_ps", "effective_bandwidth.goodput_bps",
                 "effective_bandwidth.goodput_fraction", "effective_bandwidth.nic_goodput_bps",
                 "effective_bandwidth.nic_goodput_fraction", "effective_bandwidth.completion_time_ratio",
                 "effective_bandwidth.goodput_while_all_active_fraction", "fct", "slowdown", "collectives",
                 "links.max_utilisation", "run.end_ps", "messages.release_ps", "messages.end_ps", "messages.fct_ps",
                 "messages.slowdown", "links.utilisation", "goodput_timeseries", "link_timeseries")


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
    #: what the run's figures stand on (``summary["fidelity"]``): ``engine``, ``model`` (one line),
    #: ``estimated`` (the summary keys, dotted, and "<table>.<column>" names whose values are
    #: estimates of that model; [] when none), optionally ``assumptions`` and ``not_simulated``
    #: (configured models the engine does not simulate -> what they are set to)
    fidelity: dict = field(default_factory=dict)
    #: figure groups this engine does not produce (keys of :data:`NOT_MODELLED_KEYS`) -> why
    #: (``summary["not_modelled"]``; their columns are NA, their summary figures null)
    not_modelled: dict = field(default_factory=dict)


class Engine(Protocol):
    name: str

    def __init__(self, sim: SimulationInput, recorder) -> None: ...

    def run(self, progress: Callable[[int], None] | None = None) -> RunOutcome: ...


#: what a plug-in of this family must be (fabricsim/registry.py, Registry.discover)
ENGINES.accepts(lambda obj: isinstance(obj, type) and callable(getattr(obj, "run", None)), "an engine class (with run())")
