"""Flow-level engine: queue pairs as fluid flows sharing max-min fair rates.

``simulation.engine: flow`` runs the same scenario (topology, routing, plane split, traffic and
traces with dependencies and compute gaps) without packets. Each queue pair the packet engine
would open (:class:`~fabricsim.flows.identity.ConnectionTable`, same numbering and 5-tuple
hashes) is a fluid flow; its share of every directed link comes from the routing policy's
flow-level meaning (:mod:`fabricsim.engine.spread`). At every instant the active flows get the
max-min fair allocation of the links' payload capacities (:func:`fabricsim.flows.fluid.max_min_fair`),
recomputed whenever a flow starts or finishes. Assumptions (docs/fidelity.md, "Flow engine"):

- **Framing is exact**: a link's capacity is its line rate x the payload share of a full packet
  of the framing it carries, and a queue pair is charged its exact wire bytes in that unit (its
  fluid size): every packet pays its header, a short last packet a whole one
  (:func:`queue_pair_wire_bytes`, the framing of :func:`~fabricsim.analysis.ideal.message_packets`),
  so a queue pair of whole packets has its payload as fluid size and a 1 KiB one 1106 x 4096 / 4178
  bytes. Link ``tx_bytes`` are the flows' exact wire bytes; delivered bytes and goodput are payload.

- **Congestion control is ideal**: it converges at once to the max-min fair rates, and nothing is
  lost (no drops, no retransmissions, no PFC). ``simulation.flow.efficiency`` scales every link's
  capacity by a factor a user measures with packet runs (per routing policy if a mapping); it is
  reported in the summary.
- **Adaptive routing balances the load** (``simulation.flow.adaptive: waterfill``, the default):
  at every switch the adaptive traffic towards a destination group fills its candidate links so as
  to level their load and the next switch's, the split and the max-min rates solved to a joint fixed
  point (:mod:`fabricsim.engine.balance`); ``proportional`` keeps a split in proportion to capacity.
  Where all candidates carry the same other traffic the two coincide and the run is the same.
- **No queues, no packets**: per-packet latency, reordering, queue depths and control traffic are
  not produced; those figures are absent from the results, each with the reason
  (``summary["not_modelled"]``).
- **Latency and serialisation**: a message ends at its fluid finish plus its idle path's pipeline
  latency (its idle-fabric packet-train time minus its idle fluid transfer time), and never before
  its release plus that packet-train time (:class:`~fabricsim.analysis.ideal.IdealModel`), so
  latency-bound messages are not instantaneous.
- **Grouped changes** (``simulation.flow.group``, default 0.01; ``quantum``, default 0): after the
  next change of the set of flows (a finish or a release), the step runs on for a window of
  ``max(quantum, group x the age of the oldest active flow)``. Flows finishing inside the window
  finish at their own times under the step's rates, and the capacity freed inside it is handed
  out at its end. A release already scheduled when the step begins ends the step there if waiting
  would cost its message more than ``group`` x its idle-fabric time (``releases: on_time``, the
  default); with ``releases: grouped`` every such release waits for the window's end. Work that a
  completion inside the window starts (its dependents, the next message on its connection, a PXN
  chunk's second leg) starts at the window's end in both modes. A message's release time, and so
  its completion time, counts any wait. ``group: 0`` (and ``quantum: 0``) recomputes the rates at every
  change, exactly. The window bounds each change's delay, relative to how long the flows have run
  (docs/fidelity.md, "Flow engine", has the error measured against exact recomputation).
"""
from __future__ import annotations

import gc
import heapq
import math
from typing import Literal, Union

import numpy as np
import scipy.sparse as sp
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..config.types import Time
from ..errors import SimulationError
from ..flows import advance as advance_ref
from ..flows.fluid import FluidProblem
from ..flows.identity import FLOWS_SALT_STREAM, ConnectionTable
from ..flows.pxn import legs as pxn_legs
from ..flows.replay import Connections, Replay
from ..flows.table import MessageTable
from ..net.nvlink import nvlink_wire_bytes
from ..planes import SPLITS
from ..routing import ROUTING
from .interface import ENGINES, TIMED_FIGURES, RunOutcome, SimulationInput
from .spread import SpreadBuilder

PS_PER_S = 10**12
#: rows opened per placement pass (:meth:`FlowEngine._flush_starts`)
FLUSH_CHUNK = 16384
_RELEASE, _DONE, _PIECE = 0, 1, 2
_NEVER = 2**62

#: what the flow engine does not produce, and why (summary["not_modelled"]; the keys are
#: engine.interface.NOT_MODELLED_KEYS; ``nics`` follows from ``transport``)
NOT_MODELLED = {
    "packet_latency": "the flow engine moves no packets (simulation.engine: flow)",
    "transport": "no packets: no retransmissions, reordering, ECN marks or CNPs (ideal congestion control, "
                 "lossless)",
    "drops": "lossless fluid model: nothing is dropped",
    "queues": "fluid model: links have no queues (peak_queue_bytes, PFC pauses, the link time series' "
              "queue_bytes)",
    "control_bytes": "control packets (ACK/NAK/CNP) are not modelled: tx_bytes holds data wire bytes only",
    "packets": "the flow engine moves no packets: no packet counts (tx_packets)",
}


#: what a flow run's figures stand on (summary["fidelity"]["model"])
MODEL = ("fluid: max-min fair rates over the links' payload capacities, recomputed when flows start or finish "
         "(ideal congestion control converging at once, lossless, no queues); a message ends at its fluid finish "
         "plus its idle path's pipeline latency, never before its idle packet-train time (docs/fidelity.md, "
         "'Flow engine'; measured against the packet engine in docs/fidelity/flow.md)")
#: the figures of a flow run that are estimates of that model (summary keys, dotted; a table's
#: columns as "<table>.<column>"): every time a message ends and what follows from it
#: (:data:`~fabricsim.engine.interface.TIMED_FIGURES`), and the links' bytes (the data's wire bytes
#: spread by the routing policy's flow-level shares: ECMP's own paths, the expected split of the
#: others; no control packets). Exact as in a packet run: the offered and delivered bytes, the
#: message counts, the lower bound (``pattern.ideal_duration_ps``), the ideal FCTs and the sender
#: capacity.
ESTIMATED = TIMED_FIGURES + ("links.tx_bytes", "links.tx_data_bytes")
#: the scenario sections that configure packet-level models the flow engine does not simulate:
#: section -> what the flow engine assumes instead
NOT_SIMULATED = {
    "congestion_control": "ideal congestion control: every flow at its max-min fair rate at once",
    "receiver": "in-order delivery at the receiver: no reordering, retransmission or ACK traffic",
    "switch": "no switch queues, ECN, PFC or buffer admission: lossless links at their payload capacity",
}


def not_simulated(sc) -> tuple[dict, list[str]]:
    """The packet-level models ``sc`` configures that the flow engine does not simulate
    (:data:`NOT_SIMULATED`): ``({section: what it configures}, [those set away from their defaults,
    as "section name (fields)"])``. The second list is what a user may expect to matter (a profile's
    telemetry CC, PFC): the run warns about it once."""
    from ..config.policy import CongestionControlSection, ReceiverSection
    from ..config.switch import SwitchFeatures
    configured, changed = {}, []
    for section, default in (("congestion_control", CongestionControlSection.model_validate({})),
                             ("receiver", ReceiverSection.model_validate({}))):
        cfg = getattr(sc, section)
        configured[section] = cfg.name
        mine, base = cfg.model_dump(mode="json"), default.model_dump(mode="json")
        if cfg.name != default.name:
            changed.append(f"{section} {cfg.name}")
        elif mine != base:
            changed.append(f"{section} {cfg.name} ({', '.join(k for k in mine if mine.get(k) != base.get(k))})")
    mine, base = sc.switch.model_dump(mode="json"), SwitchFeatures().model_dump(mode="json")
    fields = [k for k in mine if mine[k] != base.get(k)]
    configured["switch"] = fields or "defaults"
    if fields:
        changed.append(f"switch ({', '.join(fields)})")
    return configured, changed


#: the per-flow columns (grown together, compacted together)
_FLOW_COLUMNS = ("f_rem", "f_row", "f_size", "f_payload", "f_alive", "f_t0", "f_tail", "f_good", "f_base")

class _FlowRows:
    """``F``'s rows (segments and weights of each flow) as CSR arrays that grow in place:
    appending a batch of flows costs the batch, and :meth:`matrix` is a view of the rows so far,
    not a copy (a copy per rate recomputation is tens of MB at cluster scale). Indices are int32,
    as scipy keeps them for a matrix of this size, while they fit (int64 beyond)."""

    __slots__ = ("ptr", "ind", "dat", "n", "nnz")

    def __init__(self):
        self.ptr = np.zeros(1025, np.int32)
        self.ind = np.zeros(1024, np.int32)
        self.dat = np.zeros(1024)
        self.n = 0
        self.nnz = 0

    def append(self, counts: np.ndarray, segs: np.ndarray, ws: np.ndarray):
        """Rows of ``counts[i]`` entries each, their segments ``segs`` and weights ``ws`` in row
        order. They are kept in canonical form (a row's segments ascending, duplicates summed,
        zeros dropped: what :class:`~fabricsim.flows.fluid.FluidProblem` would make of them), so
        that the matrix can be handed over as it is."""
        k = len(counts)
        ptr = np.zeros(k + 1, np.int64)
        np.cumsum(counts, out=ptr[1:])
        batch = sp.csr_matrix((np.array(ws, np.float64), np.array(segs), ptr),     # (copies: sorted in place)
                              shape=(k, int(segs.max()) + 1 if len(segs) else 1))
        batch.sum_duplicates()
        batch.eliminate_zeros()
        counts, segs, ws = np.diff(batch.indptr), batch.indices, batch.data
        m = len(segs)
        n, nnz = self.n + k, self.nnz + m
        wide = nnz > np.iinfo(np.int32).max or (m and int(segs.max()) > np.iinfo(np.int32).max)
        if wide and self.ind.dtype != np.int64:
            self.ptr, self.ind = self.ptr.astype(np.int64), self.ind.astype(np.int64)
        if n + 1 > len(self.ptr):
            self.ptr = np.concatenate([self.ptr, np.zeros(max(n + 1, len(self.ptr) * 3 // 2) - len(self.ptr),
                                                          self.ptr.dtype)])
        if nnz > len(self.ind):
            grow = max(nnz, len(self.ind) * 3 // 2) - len(self.ind)     # (by half again: memory)
            self.ind = np.concatenate([self.ind, np.zeros(grow, self.ind.dtype)])
            self.dat = np.concatenate([self.dat, np.zeros(grow)])
        self.ind[self.nnz:nnz] = segs
        self.dat[self.nnz:nnz] = ws
        np.cumsum(counts, out=self.ptr[self.n + 1:n + 1])
        self.ptr[self.n + 1:n + 1] += self.nnz
        self.n, self.nnz = n, nnz

    def matrix(self, n_seg: int) -> sp.csr_matrix:
        """The rows so far as a CSR matrix of ``n_seg`` columns (views of the arrays; appending
        later writes past its end)."""
        m = sp.csr_matrix((self.dat[:self.nnz], self.ind[:self.nnz], self.ptr[:self.n + 1]),
                          shape=(self.n, n_seg))
        m.has_canonical_format = True
        return m


#: finished flows are dropped from the flow columns and ``F`` (:meth:`FlowEngine._compact`) once
#: more than this many were opened and at most half are active
COMPACT_MIN = 4096


class FlowParams(BaseModel):
    """``simulation.flow``: the flow engine's parameters."""

    model_config = ConfigDict(extra="forbid", validate_default=True)
    quantum: Time = Field("0ps", description=(
        "completions within this time of the earliest one share one rate recomputation (0: exact)"))
    group: float = Field(0.01, ge=0, le=0.1, description=(
        "grouping window as a fraction of the age of the oldest active flow: flows finishing and "
        "messages released within it of the next change share one rate recomputation (0: exact)"))
    releases: Literal["on_time", "grouped"] = Field("on_time", description=(
        "with grouping: on_time ends a grouped step at a scheduled release that would otherwise wait "
        "more than group x its message's idle-fabric time; grouped lets every release inside the window "
        "wait for its end (fewer rate recomputations at cluster scale, larger per-message error: "
        "docs/fidelity.md). Work started by a completion inside the window waits for its end in both"))
    solver: Literal["auto", "compiled", "vectorised"] = Field("auto", description=(
        "max-min solver (fabricsim.flows.fluid): compiled (numba), vectorised (numpy / scipy.sparse), "
        "or auto (compiled when numba is installed); the same rates within rounding"))
    warm_start: bool = Field(True, description=(
        "compiled solver: a rate recomputation keeps the rates that provably cannot change (flows "
        "below the lowest level the changes since the last one can reach) and refills the rest; the "
        "same rates as a full recomputation within rounding"))
    adaptive: Literal["waterfill", "proportional"] = Field("waterfill", description=(
        "flow-level meaning of adaptive routing (policies adaptive, flowlet): waterfill = at each "
        "switch the traffic towards a destination group fills its candidate links so as to level "
        "their load, other traffic and the next switch's links included, solved jointly with the "
        "max-min rates (fabricsim.engine.balance); proportional = a fixed split in proportion to each "
        "candidate's capacity (the same where every candidate carries the same other traffic, e.g. "
        "a symmetric fabric where all traffic is adaptive: detected, and run as proportional)"))
    waterfill_tolerance: float = Field(1e-3, gt=0, le=0.1, description=(
        "adaptive: waterfill: the split is a fixed point when re-filling it would move no candidate "
        "link's load by more than this fraction of the link's capacity"))
    waterfill_iterations: int = Field(30, ge=1, le=1000, description=(
        "adaptive: waterfill: max-min re-solves per rate recomputation at most (a recomputation that "
        "reaches it keeps the last split and is counted in run.flow_waterfill_unconverged)"))
    efficiency: Union[float, dict[str, float]] = Field(1.0, description=(
        "fraction of each link's payload capacity the transport reaches, as measured by packet runs; "
        "a number, or a mapping routing policy -> number (policies not named: 1.0)"))

    @field_validator("efficiency")
    @classmethod
    def _efficiency(cls, v):
        values = v.values() if isinstance(v, dict) else [v]
        for x in values:
            if not (0 < x <= 1):
                raise ValueError(f"got {x!r} (allowed: a number in (0, 1])")
        return v

    def efficiency_for(self, policy: str) -> float:
        e = self.efficiency
        return float(e.get(policy, 1.0)) if isinstance(e, dict) else float(e)


def share_terms(unit: int, header: int, packet_payload: int | None) -> tuple[int, int]:
    """(payload bytes, wire bytes) of one full packet of a framing (:meth:`IdealModel.framing`'s
    triple): ``(unit, unit + header)`` for MTU packets, ``(packet_payload, packet_payload + header)``
    for NVLink packets; their ratio is :func:`payload_share`."""
    if packet_payload is None:
        return unit, unit + header
    return packet_payload, packet_payload + header


def payload_share(unit: int, header: int, packet_payload: int | None) -> float:
    """Payload bytes per wire byte of a full packet of a framing (:meth:`IdealModel.framing`'s
    triple): MTU packets ``unit / (unit + header)``, or NVLink packets of ``packet_payload`` bytes
    with ``header`` each.

    >>> round(payload_share(4096, 82, None), 4), round(payload_share(4096, 16, 256), 4)
    (0.9804, 0.9412)
    """
    num, den = share_terms(unit, header, packet_payload)
    return num / den


def queue_pair_wire_bytes(nbytes, unit, header, packet_payload):
    """Wire bytes (first transmissions) of queue pairs carrying ``nbytes`` each (an int array),
    framed as :func:`~fabricsim.analysis.ideal.message_packets` frames one queue pair: its whole
    units, then one short last unit, every packet with its own header
    (:func:`~fabricsim.net.nvlink.nvlink_wire_bytes`: payload in packets of at most ``per`` bytes,
    ``per`` = the MTU, or the NVLink packet payload inside a unit). ``unit``, ``header`` and
    ``packet_payload`` (0 for MTU framing) broadcast against ``nbytes``.

    >>> queue_pair_wire_bytes(np.array([0, 1024, 4096, 5000]), 4096, 82, 0).tolist()
    [0, 1106, 4178, 5164]
    >>> queue_pair_wire_bytes(np.array([1000, 4096 + 1000]), 4096, 16, 256).tolist()
    [1064, 5416]
    """
    nbytes = np.asarray(nbytes, dtype=np.int64)
    unit = np.asarray(unit, dtype=np.int64)
    pp = np.asarray(packet_payload, dtype=np.int64)
    per = np.where(pp > 0, pp, unit)
    full, rest = np.divmod(nbytes, unit)
    return full * nvlink_wire_bytes(unit, per, header) + nvlink_wire_bytes(rest, per, header)


def _whole(values) -> list[int]:
    """Fractional byte counts as integers with the same running total (largest-remainder free:
    each value is the rounded cumulative sum minus the previous one)."""
    out, acc, prev = [], 0.0, 0
    for v in values:
        acc += v
        cur = int(round(acc))
        out.append(cur - prev)
        prev = cur
    return out


class _Msg:
    """The columns of one message the idle-fabric references read (a row view without its
    dependency list and tags): a PXN piece's, or a representative row's."""

    __slots__ = ("id", "src", "dst", "size_bytes", "qps", "start_ps", "conn")

    def __init__(self, t, i: int):
        self.id = int(t.id[i])
        self.src = int(t.src[i])
        self.dst = int(t.dst[i])
        self.size_bytes = int(t.size_bytes[i])
        self.qps = int(t.qps[i])
        self.start_ps = int(t.start_ps[i])
        self.conn = int(t.conn[i])


class _Instants:
    """Instants a run must stop at that carry no work of their own (messages' first arrivals, a
    figure of the recorder), added in batches: a heap of sorted batches, so the agenda holds one
    entry per batch, not one per message. A step ends at the next of them as at the next event.

    >>> d = _Instants(); d.add([30, 10]); d.add([20])
    >>> d.next(), d.pop_through(25), d.next(), d.pop_through(100), d.next()
    (10, 20, 30, 30, None)
    """

    def __init__(self):
        self._heap: list = []        # (head time, batch number, sorted times, head index)
        self._batches = 0

    def add(self, times: list):
        if times:
            a = np.sort(np.asarray(times, dtype=np.int64))
            heapq.heappush(self._heap, (int(a[0]), self._batches, a, 0))
            self._batches += 1

    def next(self):
        """The earliest pending instant (int ps), or None."""
        return self._heap[0][0] if self._heap else None

    def pop_through(self, t: float):
        """Remove the instants ``<= t``; the latest of them, or None."""
        latest = None
        h = self._heap
        while h and h[0][0] <= t:
            _head, k, a, i = heapq.heappop(h)
            j = int(np.searchsorted(a, t, side="right"))
            last = int(a[j - 1])
            if latest is None or last > latest:
                latest = last
            if j < len(a):
                heapq.heappush(h, (int(a[j]), k, a, j))
        return latest


class _Agenda:
    """The run's events ``(at, kind, row)`` in time order, ties in the order they were added (a
    heap's ``(at, seq)`` order), added and taken in batches: a heap of sorted batches (one entry
    per batch, not per event), and :meth:`pop_through` takes every event up to a time at once as
    columns.

    >>> a = _Agenda(); a.add([30, 10, 10], 0, [1, 2, 3]); a.add([10, 20], 1, [4, 5])
    >>> at, seq, kinds, rows = a.pop_through(20)
    >>> at.tolist(), kinds.tolist(), rows.tolist()
    ([10, 10, 10, 20], [0, 0, 1, 1], [2, 3, 4, 5])
    >>> a.restore(at[3:], seq[3:], kinds[3:], rows[3:]); a.next()
    20
    >>> a.pop_through(15), a.pop_through(25)[3].tolist(), a.next()
    (None, [5], 30)
    """

    def __init__(self):
        self._heap: list = []        # (head time, head seq, batch number)
        self._batches: dict = {}     # batch number -> [times, seqs, kinds, rows, head index]
        self._n = 0                  # batches made
        self._seq = 0                # events added

    def add(self, at, kind, rows):
        """Add events in this order: times ``at`` (int ps), one ``kind`` or one per event, rows."""
        at = np.asarray(at, dtype=np.int64).ravel()
        k = len(at)
        if not k:
            return
        kinds = np.broadcast_to(np.asarray(kind, dtype=np.int8), (k,))
        rows = np.asarray(rows, dtype=np.int64).ravel()
        seq = np.arange(self._seq, self._seq + k, dtype=np.int64)
        self._seq += k
        if k > 1 and (at[1:] < at[:-1]).any():
            o = np.argsort(at, kind="stable")
            at, seq, kinds, rows = at[o], seq[o], kinds[o], rows[o]
        else:
            kinds = kinds.copy()
        b = self._n
        self._n += 1
        self._batches[b] = [at, seq, kinds, rows, 0]
        heapq.heappush(self._heap, (int(at[0]), int(seq[0]), b))

    def next(self):
        """The earliest event's time (int ps), or None."""
        return self._heap[0][0] if self._heap else None

    def pop_through(self, due):
        """Take every event at or before ``due``: ``(times, seqs, kinds, rows)`` arrays in order, or
        None."""
        h = self._heap
        if not h or h[0][0] > due:
            return None
        parts = []
        while h and h[0][0] <= due:
            _a, _s, b = heapq.heappop(h)
            at, seq, kinds, rows, i = batch = self._batches[b]
            j = int(np.searchsorted(at, due, side="right")) if at[-1] > due else len(at)
            parts.append((at[i:j], seq[i:j], kinds[i:j], rows[i:j]))
            if j < len(at):
                batch[4] = j
                heapq.heappush(h, (int(at[j]), int(seq[j]), b))
            else:
                del self._batches[b]
        if len(parts) == 1:
            at, seq, kinds, rows = parts[0]
        else:
            at, seq, kinds, rows = (np.concatenate([p[c] for p in parts]) for c in range(4))
            o = np.lexsort((seq, at))
            at, seq, kinds, rows = at[o], seq[o], kinds[o], rows[o]
        return at, seq, kinds, rows

    def restore(self, at, seq, kinds, rows):
        """Put back events taken by :meth:`pop_through` (a tail of what it gave, in order), with
        their places in the order."""
        if len(at):
            b = self._n
            self._n += 1
            self._batches[b] = [at, seq, kinds, rows, 0]
            heapq.heappush(self._heap, (int(at[0]), int(seq[0]), b))

    def before(self, end):
        """The events earlier than ``end`` (not taken), in order: ``(times, kinds, rows)`` arrays."""
        parts = []
        for at, seq, kinds, rows, i in self._batches.values():
            j = int(np.searchsorted(at, end, side="left"))
            if j > i:
                parts.append((at[i:j], seq[i:j], kinds[i:j], rows[i:j]))
        if not parts:
            e = np.zeros(0, dtype=np.int64)
            return e, e.astype(np.int8), e
        at, seq, kinds, rows = (np.concatenate([p[c] for p in parts]) for c in range(4))
        o = np.lexsort((seq, at))
        return at[o], kinds[o], rows[o]


@ENGINES.register("flow")
class FlowEngine:
    """Fluid max-min flow engine (see the module doc)."""

    name = "flow"
    Params = FlowParams
    #: result figures this engine produces (the rest: NOT_MODELLED)
    not_modelled = NOT_MODELLED

    @classmethod
    def check_scenario(cls, sc) -> None:
        """Combinations the flow engine cannot run, found while the scenario is validated (before
        anything is written): ``ValueError("field: what is allowed")``."""
        from ..routing import ROUTING
        from .spread import fluid_kind
        try:
            fluid_kind(ROUTING.get(sc.routing.name))
        except ValueError as exc:
            raise ValueError(f"routing.policy: {exc}") from None

    def __init__(self, sim: SimulationInput, recorder):
        self.sim = sim
        self.recorder = recorder
        sc = sim.scenario
        self.params: FlowParams = sc.simulation.engine_params or FlowParams()
        self.table = sim.messages if isinstance(sim.messages, MessageTable) else MessageTable.from_messages(sim.messages)
        self.links = sim.link_table()
        streams = sim.streams
        self.policy = ROUTING.get(sc.routing.name)(sc.routing.params, streams)
        self.split = SPLITS.get(sc.nic.name)(sc.nic.params, streams)
        self.pxn = bool(sc.nic.params is not None and sc.nic.params.pxn)
        self.pxn_chunk = sc.nic.params.pxn_chunk if sc.nic.params is not None else 0
        self.spread = SpreadBuilder(self.links, sim.paths, self.policy, self.split)
        self.connections = ConnectionTable(streams.u64(FLOWS_SALT_STREAM))
        self.efficiency = self.params.efficiency_for(sc.routing.name)
        self.time_limit = sc.simulation.time_limit
        self.quantum = float(self.params.quantum)
        self.group = float(self.params.group)
        self.on_time = self.params.releases == "on_time"
        self.solver = self.params.solver
        self.warm_start = self.params.warm_start
        # the step's arithmetic (flows.advance) and the replay's count-down: compiled with the
        # compiled solver, the same numbers
        self._compiled_steps = self._solver_used() == "compiled"
        if self._compiled_steps:
            from ..flows import advance_compiled as advance
        else:
            advance = advance_ref
        self._advance = advance
        self.cap = self._capacities()
        # adaptive routing under load (fabricsim.engine.balance): a split that follows the rates
        self.balance = None
        if self.spread.kind == "balanced" and self.params.adaptive == "waterfill":
            from .balance import AdaptiveBalance
            self.balance = AdaptiveBalance(self.spread, self.cap, self.params.waterfill_tolerance,
                                           self.params.waterfill_iterations, compiled=self._compiled_steps)
        self.warnings: list[str] = []
        if self.policy.fluid_caveat:      # where the policy's flow-level share and a packet run part ways
            self.warnings.append(self.policy.fluid_caveat)
        self.not_simulated, changed = not_simulated(sc)
        if changed:
            self.warnings.append(
                f"{'; '.join(changed)}: packet-level models the flow engine does not simulate; it assumes ideal "
                f"congestion control (max-min fair rates at once), lossless links and in-order delivery "
                f"(docs/fidelity.md, 'Flow engine'; simulation.flow.efficiency applies a factor measured with "
                f"packet runs)")

    # ------------------------------------------------------------------ set-up
    def _capacities(self) -> np.ndarray:
        """Payload capacity of every directed link in bytes per ps: line rate x the payload share
        of the framing it carries (MTU packets with ``simulation.header``; NVLink units with their
        own framing inside a credit domain) x the efficiency."""
        sc = self.sim.scenario
        g = self.sim.topology.graph
        mtu, hdr = sc.simulation.mtu, sc.simulation.header
        share = np.full(len(self.links), payload_share(mtu, hdr, None))
        # per node, the share of its credit domain's framing (NaN outside one); a link takes its
        # source's, else its destination's
        node_share = np.full(max(g.nodes, default=-1) + 1, np.nan)
        for n, d in g.nodes(data=True):
            if d.get("nvlink_transport") == "credit":
                pp, ph = d["nvlink_packet_payload_bytes"], d["nvlink_packet_header_bytes"]
                node_share[n] = payload_share(d["nvlink_unit_bytes"], ph, pp)
        src, dst = node_share[self.links.src], node_share[self.links.dst]
        credit = ~np.isnan(dst)
        share[credit] = dst[credit]
        credit = ~np.isnan(src)
        share[credit] = src[credit]
        self.payload_share = share
        return self.links.rate_bps.astype(np.float64) / 8e12 * share * self.efficiency

    # ------------------------------------------------------------------ run
    def run(self, progress=None) -> RunOutcome:
        """Run to the last completion (or the time limit). Status ``complete``, ``time_limit``,
        ``interrupted`` or ``stalled`` (nothing can progress, messages unfinished), as the packet
        engine's. The cyclic garbage collector is paused meanwhile (the run creates no cycles; its
        passes over the run's containers cost more than the rate computations)."""
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._run(progress)
        except KeyboardInterrupt:
            # Ctrl-C: what finished is kept, the rest is reported unfinished ("interrupted")
            if not hasattr(self, "stats"):
                raise
            return self._outcome("interrupted")
        finally:
            # the recorder's figures are settled: it no longer asks the engine (and does not keep
            # the engine's working state alive while the results are built)
            self.recorder.delivered_by = None
            if gc_was_enabled:
                gc.enable()

    def _run(self, progress) -> RunOutcome:
        t = self.table
        n = len(t)
        self.ideal = self.sim.ideal_model()        # shared with build_result (its memos)
        self._fct = self.ideal.fct_rows(t)          # every message's idle-fabric time, at once
        self._framings: dict = {}                   # framing triple -> id (:meth:`_frame_ids`)
        cls = self.ideal.pair_classes(t.src, t.dst)
        self._frame = self._frame_ids(cls)          # every unit's framing id (PXN pieces appended)
        self._tail = np.maximum(0.0, self._fct - self._alone_rows(t, cls))   # and its pipeline latency
        self.replay = Replay(t, self.sim.scenario.simulation.compute, compiled=self._compiled_steps)
        self.conns = Connections(t)
        self.recorder.stream_only()              # rows streamed; the table is handed over as columns
        self.recorder.delivered_by = self._delivered_by
        self.agenda = _Agenda()             # releases, completions, PXN pieces' arrivals
        self._min_gap = self.replay.min_gap()
        first = self.replay.initial()
        self.agenda.add([at for at, _i in first], _RELEASE, [i for _at, i in first])
        # flows (queue pairs): growable columns, and F in CSR pieces
        # a flow's size and what remains of it are fluid bytes: its exact wire bytes (every
        # packet's header, short last packets included) x the payload share of its framing, the
        # unit of the links' capacities (:meth:`_fluid_bytes`); f_payload holds its payload
        self.f_row = np.zeros(1024, dtype=np.int64)
        self.f_rem = np.zeros(1024)
        self.f_alive = np.zeros(1024, dtype=bool)
        self.f_size = np.zeros(1024)
        self.f_payload = np.zeros(1024)
        self.f_t0 = np.zeros(1024)            # when each flow started
        self.f_tail = np.zeros(1024)          # its message's pipeline latency
        self.f_good = np.zeros(1024)          # payload per fluid byte reaching the message's destination
                                              # (goodput; 0 for PXN first legs)
        self.f_base = np.zeros(1024)          # fluid bytes already written to link_fluid (V changed since)
        self.f_version = 0                    # bumped whenever F changes
        self.compactions = 0                  # bumped whenever F's rows are renumbered
        self.flows_opened = 0
        self.link_fluid = np.zeros(len(self.links))   # fluid bytes of flows compacted away, per link
        self.nf = 0
        self._dirty = False
        self.f_rows = _FlowRows()      # F's rows
        self._f_cache = None
        self._to_start: list = []
        # units that open queue pairs: the n messages, then PXN pieces (each chunk of a relayed
        # message: src -> relay over NVLink, then relay -> dst), as the packet engine cuts them
        self._plan_pieces()
        units = n + len(self.u_src)
        if units > n:
            pieces = self.ideal.pair_classes(self.u_src, self.u_dst)
            self._frame = np.concatenate([self._frame, self._frame_ids(pieces)])
        # per message (and PXN piece) state as columns: release (-1: not released), and of the n
        # messages their completion, delivered payload and reason (a row of the messages table)
        self.rel = np.full(units, -1, dtype=np.int64)
        self.end = np.full(n, -1, dtype=np.int64)
        self.dlv = np.zeros(n, dtype=np.int64)
        self.done = np.zeros(n, dtype=bool)
        self.reason = np.full(n, "", dtype=object)
        self._ended: list = []               # rows ended in this round, streamed at its end
        self._first_due = _Instants()        # messages' first arrivals (the recorder's figure)
        self.qps_left = np.zeros(units, dtype=np.int64)
        self._lat: dict = {}
        self.fluid_end = np.zeros(units)
        self.delivered = np.zeros(units)     # payload of the unit's finished queue pairs (the live
                                             # ones' part is added at the end: :meth:`_outcome`)
        self._arrivals: list = []            # (arrival start, arrival end, bytes) per step
        self._arr_head = 0                   # arrivals before it are settled ...
        self._arrived = 0.0                  # ... and their bytes summed
        self.remaining = n
        self.last_end = 0
        self.now = 0.0
        problem = None
        built_flows = built_segments = built_compactions = -1
        self.stats = {"solves": 0, "iterations": 0, "steps": 0, "peak": 0, "kept": 0,
                      "wf_rounds": 0, "wf_solves": 0, "wf_unconverged": 0, "wf_residual": 0.0}
        # the last solve's rates (nan: flow not active in it) and the lowest of them among flows
        # finished since: the warm start of the next solve (FluidProblem.solve)
        self._earlier = np.zeros(0)
        self._r_gone = math.inf
        st = self.stats
        rates = np.zeros(0)
        status = None
        limit = float(self.time_limit)
        out = self.sim.scenario.outputs
        self.link_samples: list = []
        self.link_samples_truncated = False
        self._sample_every = 0 if (out.link_sample_interval == "off" or not out.link_sample_budget) \
            else int(out.link_sample_interval)
        self._sample_budget = out.link_sample_budget
        self._next_sample = 0.0
        while True:
            # a round: every event due now, in time order (the times of a round never decrease)
            due = self.now * (1 + 1e-15)
            last = None
            self._released = None
            while True:
                got = self.agenda.pop_through(due)
                if got is None:
                    break
                at, seq, kinds, rows = got
                k = self._events(at, kinds, rows)
                last = int(at[k - 1])
                self.agenda.restore(at[k:], seq[k:], kinds[k:], rows[k:])
            if self._released is not None:
                self._record_releases()
            first = self._first_due.pop_through(due)
            if first is not None:
                self.recorder.on_first_arrival(None, first)
                last = first if last is None or first > last else last
            self._stream_ended()
            if last is not None:
                self._settle(last)
            if self.remaining == 0:
                status = "complete"
                break
            while self._to_start:           # (a flush may start PXN pieces: flush again)
                self._flush_starts()
            alive = np.flatnonzero(self.f_alive[:self.nf])
            if not len(alive):
                nxt = self._next_event()
                if nxt is None:
                    status = "stalled"
                    break
                if nxt > limit:
                    self.now = limit
                    status = "time_limit"
                    break
                self.now = float(nxt)
                continue
            if self.now >= limit:
                status = "time_limit"
                break
            if self._dirty:
                if self.balance is not None and self.balance.sync():
                    self._v_cache = None           # (new segments take the current split)
                    built_segments = -1
                if self.spread.segments != built_segments:
                    problem = FluidProblem(self._f_matrix(), self._v_matrix(), self.cap)
                    built_segments, built_flows = self.spread.segments, self.f_version
                elif self.f_version != built_flows:
                    # rows appended since (no compaction): the solver's view of them is extended
                    problem = problem.with_flows(self._f_matrix(), canonical=True,
                                                 extends=self.compactions == built_compactions)
                    built_flows = self.f_version
                built_compactions = self.compactions
                sol = problem.solve(active=self.f_alive[:self.nf], method=self.solver,
                                    warm=(self._earlier, self._r_gone) if self.warm_start else None)
                if self.balance is not None and self.balance.needed:
                    problem, sol = self._rebalance(problem, sol)
                rates = sol.rates
                if self.warm_start:
                    self._earlier = np.where(self.f_alive[:self.nf], rates, np.nan)
                    self._r_gone = math.inf
                st["solves"] += 1
                st["iterations"] += sol.iterations
                st["kept"] += sol.kept
                self._dirty = False
                st["peak"] = max(st["peak"], len(alive))
                if progress is not None:
                    progress(int(self.now))
            # the step's arithmetic runs over all nf flows, contiguous (finished ones: no rate,
            # nothing left, inf): a gather of the active flows' columns costs more than the
            # arithmetic; what is summed is gathered first, so the sums are the active flows' own
            nf = self.nf
            on = self.f_alive[:nf]
            r = rates[:nf]
            rem = self.f_rem[:nf]
            tf, dt, t0_min = self._advance.finish_times(on, r, rem, self.f_t0[:nf])
            nxt = self._next_event()
            t_ev = (nxt - self.now) if nxt is not None else math.inf
            if not math.isfinite(dt) and not math.isfinite(t_ev):
                status = "stalled"
                break
            # the step: to the first fluid finish or event, exactly; with grouping, on to the end of
            # the window after it: flows finishing inside it finish at their own times under this
            # step's rates, and events inside it (releases) take effect at its end
            window = max(self.quantum, self.group * (self.now - t0_min)) if self.group else self.quantum
            first = min(dt, t_ev)
            horizon = min(first + window, limit - self.now)
            if window and self.on_time and nxt is not None and nxt < self.now + horizon:
                horizon = self._release_horizon(horizon)
            # flows finishing within the horizon finish (with no window, the step runs on to the
            # last of them); the others move rate x step (flows.advance)
            adv = self._advance.advance(tf, on, r, rem, self.f_good[:nf], self.f_tail[:nf], horizon,
                                        horizon if window else min(first, horizon), not window)
            step = adv.step
            st["steps"] += 1
            if self._sample_every and self._next_sample <= self.now + step:
                self._take_samples(alive, r[alive], step)
            self.f_rem[:nf] = adv.rem
            good = adv.good                 # payload per active flow; PXN first legs are not goodput
            total = float(good.sum())
            if total > 0:
                # the bytes that left in this step arrive a pipeline latency later: their mean
                # over the step's bytes shifts the goodput series and the recorder's delivered count
                # (a product and sum, not np.dot: BLAS wakes its threads, which then spin on the
                # other core; the run is meant for one)
                lag = float(adv.lagged.sum()) / total
                self._goodput(self.now + lag, self.now + step + lag, total)
                self._arrivals.append((self.now + lag, self.now + step + lag, total))
            done_flows = adv.done
            finish_at = self.now + tf[done_flows]
            self.now += step
            if len(done_flows):
                self.f_alive[done_flows] = False
                self._r_gone = min(self._r_gone, float(r[done_flows].min()))
                np.add.at(self.delivered, self.f_row[done_flows], self.f_payload[done_flows])
                self._dirty = True
                order = np.argsort(finish_at, kind="stable")       # in the order they finish
                rows, finish_at = self.f_row[done_flows[order]], finish_at[order]
                np.subtract.at(self.qps_left, rows, 1)
                np.maximum.at(self.fluid_end, rows, finish_at)
                # rows whose last queue pair finished, in the order of that finish
                last = np.flatnonzero(self.qps_left[rows] == 0)
                if len(last):
                    back = rows[last][::-1]
                    _u, k = np.unique(back, return_index=True)
                    self._fluid_done_rows(rows[np.sort(last[len(last) - 1 - k])])
                if self.nf > COMPACT_MIN and self.nf > 2 * (len(alive) - len(done_flows)):
                    self._compact()
        return self._outcome(status)

    # ------------------------------------------------------------------ message lifecycle
    def _push(self, at: int, kind: int, row: int):
        self.agenda.add([at], kind, [row])

    def _events(self, at: np.ndarray, kinds: np.ndarray, rows: np.ndarray) -> int:
        """Handle the events ``(at, kinds, rows)`` (in time order) as they would be one by one, as
        many as can be at once: returns how many were (the rest go back to the agenda).

        They are taken up to the first event later than the earliest event one of those before it
        can make (a completion's dependents are released a compute gap after it at the earliest,
        :meth:`Replay.min_gap`; a PXN piece's arrival makes its next stage at once): up to there,
        the events made come after all of them, as one by one. Those are then handled as two
        batches, the releases (:meth:`_release_many`) and the completions
        (:meth:`_done_many`), when that changes nothing: no PXN piece, and the posts and
        completions separable (:meth:`Connections.separable`);
        else one by one, up to a completion that does not (rows deferred behind it complete with
        it, and their dependents may come sooner)."""
        n = len(at)
        if n > 1:
            done = kinds == _DONE
            made = np.full(n, _NEVER, dtype=np.int64)       # the earliest event each can make
            made[done] = at[done] + self._min_gap[rows[done]]
            piece = kinds == _PIECE
            made[piece] = at[piece]
            first = np.minimum.accumulate(made)
            late = np.flatnonzero(at[1:] > first[:-1])
            if len(late):
                n = int(late[0]) + 1
                at, kinds, rows = at[:n], kinds[:n], rows[:n]
        rel = kinds == _RELEASE
        done = kinds == _DONE
        if not (kinds == _PIECE).any():
            r_rows, d_rows = rows[rel], rows[done]
            if self.conns.separable(r_rows, d_rows):
                if len(r_rows):
                    self._release_many(r_rows, at[rel])
                if len(d_rows):
                    self._done_many(d_rows, at[done])
                return n
        for k in range(n):
            kind, row, a = int(kinds[k]), rows[k:k + 1], at[k:k + 1]
            if kind == _RELEASE:
                self._release_many(row, a)
            elif kind == _DONE:
                alone = self.conns.finishes_alone(int(row[0]))
                self._done_many(row, a)
                if not alone:             # rows deferred behind it complete too (or it starts one)
                    return k + 1
            else:
                self._piece_done(int(row[0]), int(a[0]))
        return n

    def _next_event(self):
        """The time of the next event or first arrival (int ps), or None."""
        a = self.agenda.next()
        b = self._first_due.next()
        if a is None or (b is not None and b < a):
            return b
        return a

    def _release_many(self, rows: np.ndarray, at: np.ndarray):
        """Rows ``rows`` are posted at ``at`` (in this order): each starts, or queues on its busy
        connection (:meth:`Connections.post_many`)."""
        self.rel[rows] = at
        lo, hi = int(at.min()), int(at.max())
        r = self._released
        if r is None:
            self._released = [lo, hi]
        else:
            r[0], r[1] = min(r[0], lo), max(r[1], hi)
        start = self.conns.post_many(rows)
        self._to_start.extend(zip(rows[start].tolist(), at[start].tolist()))

    def _record_releases(self):
        """Tell the recorder of the round's releases: their earliest and latest time are all its
        figures keep (the first release, and the last with what was delivered by then, which
        changes only between rounds)."""
        lo, hi = self._released
        self.recorder.on_release(None, lo)
        if hi != lo:
            self.recorder.on_release(None, hi)
        self._released = None

    def _start(self, i: int, at: int):
        """Row ``i`` starts sending at ``at``: queued, and opened with the others starting at the
        same step (:meth:`_flush_starts`), so their paths are placed in one vectorised pass."""
        self._to_start.append((i, at))

    def _flush_starts(self):
        """Open the queue pairs of the rows started since the last flush (the packet engine's
        numbering, in start order) as fluid flows, and their rows of ``F``: in chunks of
        :data:`FLUSH_CHUNK` rows, so that the placement's temporaries stay small when half a
        million messages start at once (the same flows and segments as in one pass; segments may
        be numbered in another order, so sums over them can differ in the last bits)."""
        todo, self._to_start = self._to_start, []
        for a in range(0, len(todo), FLUSH_CHUNK):
            self._open_flows(todo[a:a + FLUSH_CHUNK])

    def _open_flows(self, todo):
        """Open the queue pairs of the rows ``todo`` (``(row, start ps)`` in start order) as
        fluid flows: one :meth:`ConnectionTable.open_many` for the batch, so the flows, their
        order and numbering are those of opening the rows one by one. A PXN parent opens nothing:
        its pieces start now (queued for the next flush, in order)."""
        t = self.table
        n = len(t)
        rows_at = np.array(todo, dtype=np.int64).reshape(-1, 2)
        rows, at = rows_at[:, 0], rows_at[:, 1]
        parent = np.zeros(len(rows), dtype=bool)
        if self.pieces_of:
            parent = np.fromiter((bool(self.pieces_of.get(i)) for i in rows.tolist()), dtype=bool, count=len(rows))
        own = np.flatnonzero(~parent)                  # rows that open queue pairs, in order
        o_rows, o_at = rows[own], at[own]
        src, dst, size, qps, conn = self._unit_columns(o_rows)
        opened = self.connections.open_many(src, dst, size, qps, conn)
        per_row = np.bincount(opened.msg, minlength=len(own))
        self.qps_left[o_rows] = per_row
        self.fluid_end[o_rows] = o_at
        # first arrivals: every PXN parent, and every non-empty message (not its pieces)
        first = parent | (~parent & (rows < n))
        first[own] &= size > 0
        fr = rows[first]
        self._first_due.add(np.ceil(at[first] + self._tail[fr]).astype(np.int64).tolist())
        # rows that open nothing end now; PXN parents start their pieces: in start order, as
        # both queue rows to start and push events
        empty = np.zeros(len(rows), dtype=bool)
        empty[own] = per_row == 0
        for x in np.flatnonzero(parent | empty).tolist():
            i, a = int(rows[x]), int(at[x])
            if parent[x]:
                for p in self.pieces_of[i]:
                    self.rel[p] = a
                    self._to_start.append((p, a))
            else:
                self._fluid_done(i, float(a))
        if len(opened.uid):
            owner = opened.msg
            self._add_flows(src[owner], dst[owner], opened.uid, opened.hash, opened.size_bytes,
                            o_rows[owner], o_at[owner])

    def _add_flows(self, src, dst, uid, hashes, size, rows, t0):
        """Append queue pairs as fluid flows (int arrays, one entry each: hosts, uid, 5-tuple hash,
        payload bytes, the unit they carry, start ps): their placement (rows of ``F``) and their
        columns (size and remaining fluid bytes, pipeline latency, goodput share)."""
        n = len(self.table)
        k = len(uid)
        counts, segs, ws = self.spread.rows(src, dst, uid, hashes)
        need = self.nf + k
        if need > len(self.f_rem):
            grow = max(need, 2 * len(self.f_rem))
            for name in _FLOW_COLUMNS:
                a = getattr(self, name)
                setattr(self, name, np.concatenate([a, np.zeros(grow - len(a), dtype=a.dtype)]))
        sl = slice(self.nf, need)
        self.f_t0[sl] = t0
        msg = rows < n
        tail = np.empty(k)
        tail[msg] = self._tail[rows[msg]]                  # (as _latency)
        tail[~msg] = [self._latency(i)[1] for i in rows[~msg].tolist()]
        self.f_tail[sl] = tail
        final = msg.copy()                                 # PXN first legs are not goodput
        final[~msg] = [self.u_final[i - n] for i in rows[~msg].tolist()]
        payload = size.astype(np.float64)
        fluid = self._fluid_bytes(size, self._frame[rows])
        self.f_good[sl] = np.where(final, payload / fluid, 0.0)
        self.f_base[sl] = 0.0
        self.f_payload[sl] = payload
        self.f_rem[sl] = fluid
        self.f_size[sl] = fluid
        self.f_alive[sl] = True
        self.f_row[sl] = rows
        self.f_rows.append(counts, segs, ws)
        self.nf = need
        self.flows_opened += k
        self._f_cache = None
        self.f_version += 1
        self._dirty = True

    def _fluid_done_rows(self, rows: np.ndarray):
        """Every byte of the units ``rows`` (message rows or PXN pieces, in the order their last
        queue pair finished, at their ``fluid_end``) has left its sender: each completes after its
        path's pipeline latency, never before its release plus its idle-fabric time (the times of
        all at once, exact in float64 below 2**53 ps); then, in that order, each message's
        connection may start its next message (:meth:`Connections.sent_many`), and the completions
        (a piece's: its next stage) are scheduled as one batch of events."""
        n = len(self.table)
        tf = self.fluid_end[rows]
        msg = rows < n
        if msg.all():
            fct, tail = self._fct[rows], self._tail[rows]
        else:                                          # PXN pieces among them
            lat = [self._latency(i) for i in rows.tolist()]
            fct = np.array([x[0] for x in lat], dtype=np.int64)
            tail = np.array([x[1] for x in lat], dtype=np.float64)
        end = np.ceil(np.maximum(tf + tail, (self.rel[rows] + fct).astype(np.float64))).astype(np.int64)
        sent = np.ceil(tf).astype(np.int64)
        handed = self.conns.sent_many(rows[msg])
        if handed:
            at = dict(zip(rows.tolist(), sent.tolist()))
            self._to_start.extend((nxt, at[i]) for i, nxt in handed)
        self.agenda.add(end, np.where(msg, _DONE, _PIECE), rows)

    def _unit_columns(self, rows: np.ndarray) -> tuple:
        """(src, dst, size_bytes, qps, conn) of the units ``rows`` as int64 arrays: messages'
        from the table, PXN pieces' (rows ``>= n``) from their plan (:meth:`_plan_pieces`)."""
        t = self.table
        n = len(t)
        cols = [np.asarray(c, dtype=np.int64)[np.minimum(rows, n - 1)] if n else np.zeros(len(rows), dtype=np.int64)
                for c in (t.src, t.dst, t.size_bytes, t.qps, t.conn)]
        piece = np.flatnonzero(rows >= n)
        if piece.size:
            ks = (rows[piece] - n).tolist()
            for c, u in zip(cols, (self.u_src, self.u_dst, self.u_size, self.u_qps, self.u_conn)):
                c[piece] = [u[k] for k in ks]
        return tuple(cols)

    def _fluid_done(self, i: int, tf: float):
        """:meth:`_fluid_done_rows` of unit ``i``, its last byte out at ``tf``."""
        self.fluid_end[i] = tf
        self._fluid_done_rows(np.array([i], dtype=np.int64))

    def _piece_done(self, p: int, at: int):
        """PXN piece ``p`` is all in at ``at``: its chunk goes on from the relay, or (the last leg
        of the last chunk) the message is complete, never before its own idle-fabric time."""
        k = p - len(self.table)
        nxt = self.u_next[k]
        if nxt >= 0:
            self.rel[nxt] = at
            self._start(nxt, at)
            return
        parent = self.u_parent[k]
        self.pieces_left[parent] -= 1
        if self.pieces_left[parent] == 0:
            self._push(max(at, int(math.ceil(int(self.rel[parent]) + self._latency(parent)[0]))), _DONE, parent)

    def _plan_pieces(self):
        """The PXN pieces of every relayed message (``nic.pxn``): chunks of ``pxn_chunk`` bytes,
        each a first leg ``src -> relay`` (one queue pair, not goodput) and a second leg
        ``relay -> dst`` (the message's queue pairs and connection), as the packet engine."""
        t = self.table
        n = len(t)
        self.u_src, self.u_dst, self.u_size, self.u_qps, self.u_conn = [], [], [], [], []
        self.u_parent, self.u_next, self.u_final = [], [], []
        self.pieces_of: dict = {}
        self.pieces_left: dict = {}
        if not self.pxn:
            return
        for i in range(n):
            src, dst, size = int(t.src[i]), int(t.dst[i]), int(t.size_bytes[i])
            relay = self.sim.paths.pxn_relay(src, dst)
            if relay is None or not size:
                continue
            firsts = []
            for a, b in pxn_legs(src, dst, relay, size, int(t.qps[i]), int(t.conn[i]), self.pxn_chunk):
                k = len(self.u_src)
                # first leg k, second leg k + 1
                self.u_src += [a.src, b.src]
                self.u_dst += [a.dst, b.dst]
                self.u_size += [a.size_bytes, b.size_bytes]
                self.u_qps += [a.qps, b.qps]
                self.u_conn += [a.conn, b.conn]
                self.u_parent += [i, i]
                self.u_next += [n + k + 1, -1]
                self.u_final += [a.final, b.final]
                firsts.append(n + k)
            self.pieces_of[i] = firsts
            self.pieces_left[i] = len(firsts)

    def _piece_msg(self, k: int) -> _Msg:
        """PXN piece ``k`` as a message (its leg's hosts, size, queue pairs, connection)."""
        m = _Msg.__new__(_Msg)
        m.id, m.src, m.dst, m.size_bytes = int(self.table.id[self.u_parent[k]]), self.u_src[k], self.u_dst[k], \
            self.u_size[k]
        m.qps, m.start_ps, m.conn = self.u_qps[k], 0, self.u_conn[k]
        return m

    def _done_many(self, rows: np.ndarray, at: np.ndarray):
        """Rows ``rows`` have all their bytes in at ``at`` (in this order): each completes, with the
        rows deferred behind it on its connection (in-order completion), and releases its
        dependents: their connections (:meth:`Connections.done_many`), then the rows that finish
        (columns), then their dependents' releases (one batch of events)."""
        sk, sr, k, x = self.conns.done_many_arrays(rows)
        if len(sk):
            self._to_start.extend(zip(sr.tolist(), at[sk].tolist()))      # (as _start, in order)
        if not len(x):
            return
        t = at[k]
        self.end[x] = t
        self.done[x] = True
        self.dlv[x] = self.table.size_bytes[x]
        self.remaining -= len(x)
        self.last_end = max(self.last_end, int(t.max()))
        self._ended.extend(x.tolist())
        rel, dependents = self.replay.completed_many(x, t)
        self.agenda.add(rel, _RELEASE, dependents)

    def _stream_ended(self):
        """Hand the rows that ended since the last call to the recorder (its figures, the
        streamed ``messages.partial.csv``), as :data:`MESSAGE_COLUMNS` tuples."""
        if not self._ended:
            return
        idx = np.asarray(self._ended, dtype=np.int64)
        self._ended = []
        t = self.table
        ok_a = self.done[idx] & (self.reason[idx] == "")

        def rows():
            ok = ok_a.tolist()
            return [(mid, s, d, b, q, st, None if r < 0 else r, e if c else None, (e - r) if c else None, dv, 0, c, why)
                    for mid, s, d, b, q, st, r, e, dv, c, why in zip(
                        t.id[idx].tolist(), t.src[idx].tolist(), t.dst[idx].tolist(), t.size_bytes[idx].tolist(),
                        t.qps[idx].tolist(), t.start_ps[idx].tolist(), self.rel[idx].tolist(), self.end[idx].tolist(),
                        self.dlv[idx].tolist(), ok, self.reason[idx].tolist())]
        self.recorder.on_ended(self.end[idx][ok_a], rows)

    def _take_samples(self, alive: np.ndarray, r: np.ndarray, step: float):
        """Link samples (``outputs.link_sample_interval``) falling inside this step: the wire bytes
        each link has carried by then (the flows' rates are constant within the step); no queue
        (fluid). Stops, and says so, at ``outputs.link_sample_budget`` values."""
        V, F = self._v_matrix(), self._f_matrix()
        end = self.now + step
        while self._next_sample <= end:
            ts = self._next_sample
            sent = self._sizes_sent(np.arange(self.nf))
            # a sample due in an idle gap before this step sees the bytes as they were (clip at 0)
            sent[alive] += np.minimum(r * max(ts - self.now, 0.0), self.f_rem[alive])
            fluid = self.link_fluid + V.T @ (F.T @ sent)
            self.link_samples.append((int(ts), np.rint(fluid / self.payload_share).astype(np.int64).tolist(), None))
            if len(self.link_samples) * len(self.links) >= self._sample_budget:
                self.link_samples_truncated = True
                self._sample_every = 0
                return
            self._next_sample = ts + self._sample_every

    def _settled_by(self, t: float) -> tuple[int, float]:
        """The arrivals settled by ``t``: (index of the first one still open, bytes of all before
        it), continuing from those settled at the end of the last round (:meth:`_settle`)."""
        arr = self._arrivals
        i, done = self._arr_head, self._arrived
        while i < len(arr) and arr[i][1] <= t:
            done += arr[i][2]
            i += 1
        return i, done

    def _settle(self, t: float):
        """End of a round whose last event was at ``t``: the arrivals ended by ``t`` are settled
        (and dropped once they are most of the list: a long run keeps only the open ones)."""
        self._arr_head, self._arrived = self._settled_by(t)
        if self._arr_head > 4096 and 2 * self._arr_head > len(self._arrivals):
            del self._arrivals[:self._arr_head]
            self._arr_head = 0

    def _delivered_by(self, t: float) -> int:
        """Payload arrived at its receivers by ``t``, an instant of the current round (the steps'
        bytes, each spread evenly over its arrival interval); the recorder asks when it needs it."""
        arr = self._arrivals
        i, done = self._settled_by(t)
        part = 0.0
        for k in range(i, len(arr)):
            a0, a1, b = arr[k]
            if a0 >= t:
                break
            part += b * min(1.0, (t - a0) / (a1 - a0)) if a1 > a0 else b
        return int(done + part)

    def _goodput(self, t0: float, t1: float, nbytes: float):
        """Add ``nbytes`` delivered evenly over ``[t0, t1)`` to the recorder's goodput bins."""
        if nbytes <= 0:
            return
        bins = self.recorder.goodput
        width = self.recorder.goodput_bin_ps
        b0, b1 = int(t0 // width), int(t1 // width)
        if len(bins) <= b1:
            bins.extend([0] * (b1 + 1 - len(bins)))
        if b0 == b1 or t1 <= t0:
            bins[b0] += nbytes
            return
        rate = nbytes / (t1 - t0)
        for b in range(b0, b1 + 1):
            lo, hi = max(t0, b * width), min(t1, (b + 1) * width)
            if hi > lo:
                bins[b] += rate * (hi - lo)

    def _outcome(self, status) -> RunOutcome:
        st = self.stats
        solves, iterations, steps, peak = st["solves"], st["iterations"], st["steps"], st["peak"]
        t = self.table
        n = len(t)
        end_ps = int(self.last_end) if status == "complete" else int(self.now)
        reason = {"time_limit": "time_limit", "interrupted": "interrupted"}.get(status, "")
        if getattr(self, "_released", None) is not None:
            self._record_releases()          # (an interrupted round)
        self._stream_ended()
        unfinished = np.flatnonzero(~self.done).tolist()
        live = np.flatnonzero(self.f_alive[:self.nf])
        if unfinished and len(live):
            # the payload share of what the live queue pairs have sent (their fluid bytes' share)
            part = (self.f_size[live] - self.f_rem[live]) / self.f_size[live] * self.f_payload[live]
            np.add.at(self.delivered, self.f_row[live], part)
        for i in unfinished:
            if self.rel[i] < 0:
                self.reason[i] = reason or "not_released"
            else:
                self.reason[i] = reason or "stalled"
                d = float(self.delivered[i])
                for p in self.pieces_of.get(i, ()):
                    d += float(self.delivered[self.u_next[p - n]])      # second legs: what arrived
                self.dlv[i] = int(round(d))
        self._ended = unfinished
        self._stream_ended()
        self.recorder.hand_over(self._messages_frame())
        # goodput bins hold whole bytes
        self.recorder.goodput[:] = _whole(self.recorder.goodput)
        sent = self._sizes_sent(np.arange(self.nf))
        link_fluid = self.link_fluid + self._v_matrix().T @ (self._f_matrix().T @ sent)
        # the fluid model has nothing in flight: a byte that left its sender is delivered
        # (its arrival is the pipeline latency later), so injected = delivered, per message
        counters = {"injected_payload_bytes": int(self.dlv.sum()),
                    "dropped_payload_bytes": 0, "dropped_packets": 0,
                    "flow_rate_recomputations": solves, "flow_solver_iterations": iterations, "flow_steps": steps,
                    "flow_solver": self._solver_used(), "flow_rates_kept": st["kept"],
                    "flows": self.flows_opened, "flow_segments": self.spread.segments, "flow_peak_concurrent": peak,
                    "flow_efficiency": self.efficiency, "flow_quantum_ps": int(self.quantum),
                    "flow_group": self.group, "flow_releases": self.params.releases,
                    "flow_adaptive": self.params.adaptive if self.spread.kind == "balanced" else None,
                    "flow_waterfill_rounds": st["wf_rounds"], "flow_waterfill_solves": st["wf_solves"],
                    "flow_waterfill_unconverged": st["wf_unconverged"],
                    "flow_waterfill_residual_max": st["wf_residual"]}
        if st["wf_unconverged"]:
            self.warnings.append(
                f"adaptive routing (simulation.flow.adaptive: waterfill): {st['wf_unconverged']} of "
                f"{st['wf_rounds']} rate recomputations reached waterfill_iterations "
                f"({self.params.waterfill_iterations}) with a residual up to {st['wf_residual']:.3g} "
                f"(tolerance {self.params.waterfill_tolerance:g}); their last split was kept")
        if self.replay.gpu:
            counters["gpu_compute_busy_ps"] = dict(sorted(self.replay.gpu_busy.items()))
        links = self._link_rows(link_fluid)
        samples = [x for x in self.link_samples if x[0] <= end_ps]
        if samples and samples[-1][0] < end_ps:
            samples.append((end_ps, links["tx_bytes"].tolist(), None))
        return RunOutcome(status=status, end_ps=end_ps, events=steps, packet_hops=0,
                          links=links, counters=counters, warnings=list(self.warnings),
                          link_samples=samples, link_samples_truncated=self.link_samples_truncated,
                          not_modelled=dict(NOT_MODELLED), fidelity=self.fidelity())

    def fidelity(self) -> dict:
        """``summary["fidelity"]``: the model, the figures that are its estimates, the settings it
        assumes and the configured packet-level models it does not simulate."""
        return {"engine": self.name, "model": MODEL, "estimated": list(ESTIMATED),
                "assumptions": {**NOT_SIMULATED, "efficiency": self.efficiency,
                                "group": self.group, "quantum_ps": int(self.quantum),
                                "routing": f"{self.sim.scenario.routing.name}: the policy's flow-level share, "
                                           f"weights() ({self.spread.kind})"
                                           + (f"; {self.policy.fluid_caveat}" if self.policy.fluid_caveat else "")},
                "not_simulated": dict(self.not_simulated)}

    def _solver_used(self) -> str:
        """The max-min solver that ran: ``compiled`` or ``vectorised`` (``auto`` resolved)."""
        from ..flows.fluid import compiled_available
        if self.solver == "auto":
            return "compiled" if compiled_available() else "vectorised"
        return self.solver

    def _messages_frame(self):
        """The messages table as columns (the recorder streamed the rows; it keeps none)."""
        import pandas as pd
        from ..analysis.recorder import MESSAGE_COLUMNS, TRANSPORT_COLUMNS
        t = self.table
        rel = self.rel[:len(t)]
        release = pd.arrays.IntegerArray(rel.copy(), rel < 0)
        done = self.done & (self.reason == "")
        end = pd.arrays.IntegerArray(np.where(done, self.end, 0), ~done)
        cols = {"message_id": np.asarray(t.id), "src": np.asarray(t.src), "dst": np.asarray(t.dst),
                "size_bytes": np.asarray(t.size_bytes), "qps": np.asarray(t.qps), "start_ps": np.asarray(t.start_ps),
                "release_ps": release, "end_ps": end, "fct_ps": end - release,
                "delivered_bytes": self.dlv.copy(),
                "dropped_bytes": np.zeros(len(t), dtype=np.int64), "completed": done,
                "incomplete_reason": self.reason.copy()}
        if list(cols) != MESSAGE_COLUMNS:     # the recorder's schema is the one source of truth
            raise SimulationError(f"flow engine messages columns {list(cols)} differ from {MESSAGE_COLUMNS}")
        for c in TRANSPORT_COLUMNS:          # not modelled: all missing (built as a mask, not element by element)
            cols[c] = pd.arrays.IntegerArray(np.zeros(len(t), dtype=np.int64), np.ones(len(t), dtype=bool))
        return pd.DataFrame(cols)

    def _sizes_sent(self, flows: np.ndarray) -> np.ndarray:
        """Fluid bytes each flow has sent (its size less what remains) and not yet written to the
        links (:meth:`_settle_links`)."""
        return self.f_size[flows] - self.f_rem[flows] - self.f_base[flows]

    def _settle_links(self):
        """Write the bytes the flows have sent so far to the links under the current ``V``, before
        ``V``'s coefficients change (the water-filled split): later bytes follow the new split."""
        n = self.nf
        sent = self._sizes_sent(np.arange(n))
        self.link_fluid += self._v_matrix().T @ (self._f_matrix().T @ sent)
        self.f_base[:n] += sent

    def _rebalance(self, problem, sol):
        """The water-filled split of adaptive routing and the max-min rates, solved jointly
        (:mod:`fabricsim.engine.balance`): while re-filling the split for the rates would move a
        candidate link's load by more than the tolerance, move the split, rewrite ``V`` and solve
        again (cold), at most ``waterfill_iterations`` times. Returns the problem and rates of the
        last split."""
        bal, st = self.balance, self.stats
        st["wf_rounds"] += 1
        active = self.f_alive[:self.nf]
        for k in range(bal.iterations + 1):
            seg_rates = self._f_matrix().T @ sol.rates
            res = bal.residual(seg_rates, self._v_matrix().T @ seg_rates)
            if res <= bal.tolerance:
                break
            if k == bal.iterations:
                st["wf_unconverged"] += 1
                st["wf_residual"] = max(st["wf_residual"], res)
                break
            self._settle_links()
            bal.settle(bal.tolerance / 2)
            self._v_cache = None
            problem = FluidProblem(self._f_matrix(), self._v_matrix(), self.cap)
            sol = problem.solve(active=active, method=self.solver)
            st["wf_solves"] += 1
            st["iterations"] += sol.iterations
        return problem, sol

    def _compact(self):
        """Drop finished flows from the flow columns and ``F`` (their link bytes are kept), so a
        rate recomputation costs the active flows, not every flow of the run."""
        n = self.nf
        keep = np.flatnonzero(self.f_alive[:n])
        gone = np.ones(n, dtype=bool)
        gone[keep] = False
        F = self._f_matrix()
        sent = self._sizes_sent(np.arange(n)) * gone
        self.link_fluid += self._v_matrix().T @ (F.T @ sent)
        Fk = F[keep]
        self.f_rows = _FlowRows()
        self.f_rows.append(np.diff(Fk.indptr), Fk.indices, Fk.data)
        if self._earlier.size:                   # the warm start follows the renumbering
            earlier = np.full(len(keep), np.nan)
            inside = keep < self._earlier.size
            earlier[inside] = self._earlier[keep[inside]]
            self._earlier = earlier
        m = len(keep)
        for name in _FLOW_COLUMNS:
            a = getattr(self, name)
            b = np.zeros_like(a)
            b[:m] = a[keep]
            setattr(self, name, b)
        self.nf = m
        self._f_cache = None
        self.f_version += 1
        self.compactions += 1

    def _f_matrix(self):
        """``F``: one row per flow opened so far (segments and weights), at the current segment count."""
        nseg = max(self.spread.segments, 1)
        c = self._f_cache
        if c is None or c.shape != (self.nf, nseg):
            c = self._f_cache = self.f_rows.matrix(nseg)
        return c

    def _release_horizon(self, horizon: float) -> float:
        """Shorten a grouped step so that no message released inside it waits longer than
        ``group`` x its own idle-fabric time for the step's end (short messages start at their
        release; long ones may wait, by a small share of their time)."""
        end = self.now + horizon
        at, kinds, rows = self.agenda.before(end)
        rel = np.flatnonzero(kinds == _RELEASE)
        if not len(rel):
            return end - self.now            # (not horizon: the same rounding as a shortened step)
        at, rows = at[rel], rows[rel]
        n = len(self._fct)
        fct = self._fct[np.minimum(rows, n - 1)].astype(np.float64)
        for k in np.flatnonzero(rows >= n).tolist():            # PXN pieces
            fct[k] = self._latency(int(rows[k]))[0]
        late = np.flatnonzero((end - at) > self.group * fct)
        if len(late):
            end = max(float(at[late[0]]), self.now)
        return end - self.now

    def _latency(self, i: int) -> tuple[float, float]:
        """(idle-fabric packet-train time, pipeline latency) of row ``i``: the pipeline latency is
        the packet-train time less the message's idle fluid transfer time, the time its last byte
        still needs once it has left the sender (and its first byte needs to arrive)."""
        if i < len(self._fct):
            return int(self._fct[i]), float(self._tail[i])
        got = self._lat.get(i)
        if got is None:                      # a PXN piece
            m = self._piece_msg(i - len(self._fct))
            fct = self.ideal.fct(m)
            got = self._lat[i] = (fct, max(0.0, fct - self._alone_ps(m)))
        return got

    def _frame_ids(self, cls: np.ndarray) -> np.ndarray:
        """Framing id (``_framings``) of each pair of the pair classes ``cls``
        (:meth:`IdealModel.pair_classes`): one :meth:`IdealModel.framing` per class (it depends
        on the hosts only through them)."""
        uc, inv = np.unique(cls, return_inverse=True)
        ids = np.empty(len(uc), dtype=np.int64)
        for j, c in enumerate(uc.tolist()):
            fr = self.ideal.framing(*self.ideal.representative(c))
            ids[j] = self._framings.setdefault(fr, len(self._framings))
        cols = np.array([(u, h, pp or 0) + share_terms(u, h, pp) for u, h, pp in self._framings],
                        dtype=np.int64).reshape(-1, 5)
        self._fr_cols = cols.T            # unit, header, packet payload (0: MTU), share numerator, denominator
        return ids[inv.ravel()]

    def _fluid_bytes(self, nbytes: np.ndarray, fid: np.ndarray) -> np.ndarray:
        """Fluid size of queue pairs of ``nbytes`` payload each (int64) framed as ``fid``: their
        exact wire bytes (:func:`queue_pair_wire_bytes`) x the payload share of a full packet of
        the framing, the unit of the link capacities (:meth:`_capacities`). Equal to ``nbytes``
        for whole units; a short last packet costs its whole header."""
        unit, hdr, pp, num, den = self._fr_cols[:, fid]
        return (queue_pair_wire_bytes(nbytes, unit, hdr, pp) * num) / den

    def _message_fluid(self, size, qps, fid) -> np.ndarray:
        """Fluid bytes of messages of ``size`` bytes over ``qps`` queue pairs (the queue-pair
        split of :func:`~fabricsim.flows.identity.split_bytes`: the first ``size % qps`` one byte
        larger), framed as ``fid``: the sum of their queue pairs' :meth:`_fluid_bytes`."""
        size = np.asarray(size, dtype=np.int64)
        qps = np.asarray(qps, dtype=np.int64)
        base, extra = np.divmod(size, qps)
        return extra * self._fluid_bytes(base + 1, fid) + (qps - extra) * self._fluid_bytes(base, fid)

    def _alone_rows(self, t, cls: np.ndarray) -> np.ndarray:
        """:meth:`_alone_ps` of every row (``cls``: their pair classes): the payload rate once per
        (pair class, queue pairs) (the line rate and framing of a pair depend on its two hosts only
        through their classes), the fluid bytes per row, vectorised."""
        if not len(t):
            return np.zeros(0)
        key = cls * 1024 + np.minimum(t.qps, 1023)
        uk, first, inv = np.unique(key, return_index=True, return_inverse=True)
        rate = np.empty(len(uk))
        for j, f in enumerate(first.tolist()):
            rate[j] = self._payload_rate(_Msg(t, f))
        return self._message_fluid(t.size_bytes, t.qps, self._frame[:len(t)]) / rate[inv.ravel()]

    def _alone_ps(self, m) -> float:
        """Fluid time of ``m`` alone on an idle fabric at full capacity: its fluid bytes (its
        exact wire bytes in payload-equivalent units, as the engine's flows) over the payload rate
        its ports allow (the same framing as the link capacities, efficiency 1)."""
        if m.size_bytes == 0:
            return 0.0
        fid = self._frame_ids(self.ideal.pair_classes([m.src], [m.dst]))
        return float(self._message_fluid(np.array([m.size_bytes]), np.array([m.qps]), fid)[0]) / self._payload_rate(m)

    def _payload_rate(self, m) -> float:
        """Payload capacity (bytes per ps) of the ports ``m`` can use alone (as :meth:`_capacities`,
        efficiency 1)."""
        return self.ideal.parallel_rate(m) / 8e12 * payload_share(*self.ideal.framing(m.src, m.dst))

    def _v_matrix(self):
        """``V`` (segments x links), rebuilt only when segments were added since the last call."""
        cached = getattr(self, "_v_cache", None)
        if cached is not None and cached.shape[0] == self.spread.segments:
            return cached
        self._v_cache = self._build_v()
        return self._v_cache

    def _build_v(self):
        sb = self.spread
        lens = np.fromiter((len(x) for x in sb.seg_links), dtype=np.int64, count=len(sb.seg_links))
        ptr = np.zeros(len(lens) + 1, dtype=np.int64)
        np.cumsum(lens, out=ptr[1:])
        idx = np.concatenate(sb.seg_links) if sb.seg_links else np.zeros(0, dtype=np.int64)
        val = np.concatenate(sb.seg_coef) if sb.seg_coef else np.zeros(0)
        return sp.csr_matrix((val, idx, ptr), shape=(len(lens), len(self.links)))

    def _link_rows(self, fluid_bytes: np.ndarray) -> dict:
        """Link rows as columns (``RunOutcome.links``): each link's fluid bytes back to wire bytes
        (over its payload share: exact when the flows crossing it have its framing, as every path
        of a built topology), rounded half to even as Python's ``round``."""
        L = self.links
        wire = np.rint(fluid_bytes / self.payload_share).astype(np.int64)
        return {"link_id": np.arange(len(L), dtype=np.int64), "src": L.src.copy(), "dst": L.dst.copy(),
                "kind": L.kind.copy(), "rate_bps": L.rate_bps.copy(), "delay_ps": L.delay_ps.copy(),
                "tx_bytes": wire, "tx_data_bytes": wire.copy()}
