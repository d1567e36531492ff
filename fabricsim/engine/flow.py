"""Flow-level engine: queue pairs as fluid flows sharing max-min fair rates.

``simulation.engine: flow`` runs the same scenario (topology, routing, plane split, traffic and
traces with dependencies and compute gaps) without packets. Each queue pair the packet engine
would open (:class:`~fabricsim.flows.identity.ConnectionTable`, same numbering and 5-tuple
hashes) is a fluid flow; its share of every directed link comes from the routing policy's
flow-level meaning (:mod:`fabricsim.engine.spread`). At every instant the active flows get the
max-min fair allocation of the links' payload capacities (:func:`fabricsim.flows.fluid.max_min_fair`),
recomputed whenever a flow starts or finishes. Assumptions (docs/fidelity.md, "Flow engine"):

- **Congestion control is ideal**: it converges at once to the max-min fair rates, and nothing is
  lost (no drops, no retransmissions, no PFC). ``simulation.flow.efficiency`` scales every link's
  capacity by a factor a user measures with packet runs (per routing policy if a mapping); it is
  reported in the summary.
- **No queues, no packets**: per-packet latency, reordering, queue depths and control traffic are
  not produced; those figures are absent from the results, each with the reason
  (``summary["not_modelled"]``).
- **Latency and serialisation**: a message ends at its fluid finish plus its idle path's pipeline
  latency (its idle-fabric packet-train time minus its idle fluid transfer time), and never before
  its release plus that packet-train time (:class:`~fabricsim.analysis.ideal.IdealModel`), so
  latency-bound messages are not instantaneous.
- **Grouped completions** (``simulation.flow.quantum``, default 0 = exact): flows finishing within
  ``quantum`` of the earliest one finish in the same step, at their own times under the step's
  rates; the capacity they free inside the window is handed out at the window's end.
"""
from __future__ import annotations

import heapq
import math
from typing import Union

import numpy as np
import scipy.sparse as sp
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..config.types import Time
from ..errors import ConfigError
from ..flows.identity import FLOWS_SALT_STREAM, ConnectionTable
from ..flows.links import LinkTable
from ..flows.table import MessageTable
from ..planes import SPLITS
from ..routing import ROUTING
from .interface import ENGINES, RunOutcome, SimulationInput
from .spread import SpreadBuilder

PS_PER_S = 10**12

#: what the flow engine does not produce, and why (summary["not_modelled"])
NOT_MODELLED = {
    "packet_latency": "the flow engine moves no packets (simulation.engine: flow)",
    "transport": "no packets: no retransmissions, reordering, ECN marks or CNPs (ideal congestion control, "
                 "lossless)",
    "drops": "lossless fluid model: nothing is dropped",
    "queues": "fluid model: links have no queues (peak_queue_bytes, PFC pauses)",
    "control_bytes": "control packets (ACK/NAK/CNP) are not modelled: tx_bytes holds data wire bytes only",
    "link_timeseries": "not sampled by the flow engine",
}


class FlowParams(BaseModel):
    """``simulation.flow``: the flow engine's parameters."""

    model_config = ConfigDict(extra="forbid", validate_default=True)
    quantum: Time = Field("0ps", description=(
        "completions within this time of the earliest one share one rate recomputation (0: exact)"))
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


class _FlowRecord:
    """What the recorder's message row needs of one message (the flow engine keeps no per-packet state)."""

    __slots__ = ("msg", "release", "end", "delivered", "dropped", "done", "reason", "reorder_hist")

    def __init__(self, msg):
        self.msg = msg
        self.release = None
        self.end = None
        self.delivered = 0
        self.dropped = 0
        self.done = False
        self.reason = ""
        self.reorder_hist = {}


@ENGINES.register("flow")
class FlowEngine:
    """Fluid max-min flow engine (see the module doc)."""

    name = "flow"
    Params = FlowParams
    #: result figures this engine produces (the rest: NOT_MODELLED)
    not_modelled = NOT_MODELLED

    def __init__(self, sim: SimulationInput, recorder):
        self.sim = sim
        self.recorder = recorder
        sc = sim.scenario
        self.params: FlowParams = sc.simulation.engine_params or FlowParams()
        self.table = sim.messages if isinstance(sim.messages, MessageTable) else MessageTable.from_messages(sim.messages)
        self.links = LinkTable(sim.topology)
        streams = sim.streams
        self.policy = ROUTING.get(sc.routing.name)(sc.routing.params, streams)
        self.split = SPLITS.get(sc.nic.name)(sc.nic.params, streams)
        if sc.nic.params is not None and sc.nic.params.pxn:
            raise ConfigError("nic.pxn has no flow-level model yet (allowed with simulation.engine flow: pxn false)",
                              field="nic.pxn")
        self.spread = SpreadBuilder(self.links, sim.paths, self.policy, self.split)
        self.connections = ConnectionTable(streams.u64(FLOWS_SALT_STREAM))
        self.efficiency = self.params.efficiency_for(sc.routing.name)
        self.time_limit = sc.simulation.time_limit
        self.quantum = float(self.params.quantum)
        self.cap = self._capacities()
        self.warnings: list[str] = []
        if sc.simulation.cell_packets != 1 or sc.simulation.kernel != "heap":
            self.warnings.append("simulation.cell_packets and simulation.kernel are packet-engine settings: "
                                 "the flow engine ignores them")

    # ------------------------------------------------------------------ set-up
    def _capacities(self) -> np.ndarray:
        """Payload capacity of every directed link in bytes per ps: line rate x the payload share
        of the framing it carries (MTU packets with ``simulation.header``; NVLink units with their
        own framing inside a credit domain) x the efficiency."""
        sc = self.sim.scenario
        g = self.sim.topology.graph
        mtu, hdr = sc.simulation.mtu, sc.simulation.header
        share = np.full(len(self.links), mtu / (mtu + hdr))
        for i, (a, b) in enumerate(zip(self.links.src.tolist(), self.links.dst.tolist())):
            for n in (a, b):
                d = g.nodes[n]
                if d.get("nvlink_transport") == "credit":
                    pp, ph = d["nvlink_packet_payload_bytes"], d["nvlink_packet_header_bytes"]
                    share[i] = pp / (pp + ph)
                    break
        self.payload_share = share
        return self.links.rate_bps.astype(np.float64) / 8e12 * share * self.efficiency

    # ------------------------------------------------------------------ run
    def run(self, progress=None) -> RunOutcome:
        from ..analysis.ideal import IdealModel
        from ..flows.fluid import max_min_fair
        t = self.table
        n = len(t)
        recs = [None] * n
        ideal = IdealModel(self.sim)
        self.ideal = ideal
        pending = np.diff(t.dep_ptr).astype(np.int64)
        dep_ptr, dep_rows = t.dependents()
        gpu_free: dict[int, int] = {}
        gpu_busy: dict[int, int] = {}
        jobs: dict = {}
        compute_gpu = self.sim.scenario.simulation.compute == "gpu"
        heap: list = []
        seq = 0
        RELEASE, COMPLETE = 0, 1
        for i in range(n):
            if pending[i] == 0:
                heap.append((int(t.start_ps[i]), seq, RELEASE, i))
                seq += 1
        heapq.heapify(heap)
        # flows (queue pairs)
        f_msg: list[int] = []
        f_row = np.zeros(0, dtype=np.int64)      # f_msg as an array (grown with f_rem)
        f_rem = np.zeros(0)
        f_alive = np.zeros(0, dtype=bool)
        f_ptr = [0]
        f_seg: list[int] = []
        f_w: list[float] = []
        qps_left = np.zeros(n, dtype=np.int64)
        fluid_end = np.zeros(n)
        delivered = np.zeros(n)
        conn_busy: dict = {}       # (conn, src, dst) -> row in progress (its bytes not all sent)
        conn_wait: dict = {}       # (conn, src, dst) -> rows posted behind it
        conn_last_end: dict = {}   # (conn, src, dst) -> completion time of the latest message (in-order)
        link_bytes = np.zeros(len(self.links))
        now = 0.0
        solves = iterations = steps = 0
        peak_flows = 0
        rates = np.zeros(0)
        dirty = False
        F = None
        V = None
        nseg_built = -1
        nflow_built = -1
        remaining = n
        last_end = 0
        status = None
        bin_ps = self.recorder.goodput_bin_ps
        goodput = self.recorder.goodput
        rec = self.recorder

        def add_goodput(t0: float, t1: float, nbytes: float):
            if nbytes <= 0:
                return
            if t1 <= t0:
                b = int(t0 // bin_ps)
                while len(goodput) <= b:
                    goodput.append(0)
                goodput[b] += nbytes
                return
            b0, b1 = int(t0 // bin_ps), int(t1 // bin_ps)
            while len(goodput) <= b1:
                goodput.append(0)
            rate = nbytes / (t1 - t0)
            for b in range(b0, b1 + 1):
                lo, hi = max(t0, b * bin_ps), min(t1, (b + 1) * bin_ps)
                if hi > lo:
                    goodput[b] += rate * (hi - lo)

        def start(i: int, tt: int):
            nonlocal f_rem, f_alive, f_row, dirty
            m_src, m_dst, size = int(t.src[i]), int(t.dst[i]), int(t.size_bytes[i])
            opened = self.connections.open(m_src, m_dst, size, int(t.qps[i]), int(t.conn[i]))
            qps_left[i] = len(opened)
            fluid_end[i] = tt
            if not opened:
                fluid_done(i, float(tt))
                return
            k0 = len(f_msg)
            for uid, _sport, h, qb in opened:
                for seg, w in self.spread.row(m_src, m_dst, uid, h):
                    f_seg.append(seg)
                    f_w.append(w)
                f_ptr.append(len(f_seg))
                f_msg.append(i)
            grow = len(f_msg) - len(f_rem)
            if grow > 0:
                f_rem = np.concatenate([f_rem, np.zeros(max(grow, len(f_rem)))])
                f_alive = np.concatenate([f_alive, np.zeros(max(grow, len(f_alive)), dtype=bool)])
                f_row = np.concatenate([f_row, np.zeros(max(grow, len(f_row)), dtype=np.int64)])
            for j, (_uid, _sport, _h, qb) in enumerate(opened):
                f_rem[k0 + j] = qb
                f_row[k0 + j] = i
                f_alive[k0 + j] = True
            dirty = True

        def release(i: int, tt: int):
            r = recs[i] = _FlowRecord(t[i])
            r.release = tt
            rec.on_release(r, tt)
            c = int(t.conn[i])
            if c >= 0:
                key = (c, int(t.src[i]), int(t.dst[i]))
                if key in conn_busy:
                    conn_wait.setdefault(key, []).append(i)
                    return
                conn_busy[key] = i
            start(i, tt)

        def fluid_done(i: int, tf: float):
            """Every byte of row i has left (fluid): schedule its completion."""
            nonlocal seq
            r = recs[i]
            m = r.msg
            fct_ideal = ideal.fct(m)
            alone = self._alone_ps(m)
            tail = max(0.0, fct_ideal - alone)
            end = max(tf + tail, r.release + fct_ideal)
            c = int(t.conn[i])
            if c >= 0:
                key = (c, m.src, m.dst)
                end = max(end, conn_last_end.get(key, 0))
                conn_last_end[key] = end
                waiting = conn_wait.get(key)
                if waiting:
                    nxt = waiting.pop(0)
                    conn_busy[key] = nxt
                    start(nxt, int(math.ceil(tf)))
                else:
                    conn_busy.pop(key, None)
            heapq.heappush(heap, (int(math.ceil(end)), seq, COMPLETE, i))
            seq += 1

        def complete(i: int, tt: int):
            nonlocal remaining, last_end, seq
            r = recs[i]
            r.end = tt
            r.done = True
            r.delivered = int(t.size_bytes[i])
            remaining -= 1
            last_end = max(last_end, tt)
            rec.on_message(r)
            for j in dep_rows[dep_ptr[i]:dep_ptr[i + 1]].tolist():
                pending[j] -= 1
                if pending[j] == 0:
                    gap = int(t.gap_ps[j])
                    if compute_gpu and gap:
                        key = (int(t.src[j]), tuple(t.deps_of(j).tolist()), gap)
                        e = jobs.get(key)
                        if e is None:
                            s = int(t.src[j])
                            s0 = max(tt, gpu_free.get(s, 0))
                            e = jobs[key] = s0 + gap
                            gpu_free[s] = e
                            gpu_busy[s] = gpu_busy.get(s, 0) + gap
                        at = e
                    else:
                        at = tt + gap
                    heapq.heappush(heap, (max(at, int(t.start_ps[j])), seq, RELEASE, j))
                    seq += 1

        V_rows_built = 0
        while True:
            # events due now
            while heap and heap[0][0] <= now + 1e-6:
                tt, _s, kind, i = heapq.heappop(heap)
                if kind == RELEASE:
                    release(i, tt)
                else:
                    complete(i, tt)
            alive = np.flatnonzero(f_alive[:len(f_msg)])
            if remaining == 0:
                status = "complete"
                break
            if not len(alive):
                if not heap:
                    status = "stalled"
                    break
                if heap[0][0] > self.time_limit:
                    now = float(self.time_limit)
                    status = "time_limit"
                    break
                now = float(heap[0][0])
                continue
            if now > self.time_limit:
                status = "time_limit"
                break
            if dirty:
                nf = len(f_msg)
                if nf != nflow_built:
                    F = sp.csr_matrix((np.asarray(f_w), np.asarray(f_seg, dtype=np.int64), np.asarray(f_ptr, dtype=np.int64)),
                                      shape=(nf, max(self.spread.segments, 1)))
                    nflow_built = nf
                if self.spread.segments != nseg_built:
                    V = self._v_matrix()
                    nseg_built = self.spread.segments
                    F = sp.csr_matrix((F.data, F.indices, F.indptr), shape=(nf, V.shape[0]))
                sol = max_min_fair(F, V, self.cap, active=f_alive[:nf])
                rates, its = sol.rates, sol.iterations
                solves += 1
                iterations += its
                dirty = False
                peak_flows = max(peak_flows, len(alive))
                if progress is not None:
                    progress(int(now))
            r = rates[alive]
            rem = f_rem[alive]
            with np.errstate(divide="ignore", invalid="ignore"):
                tf = np.where(r > 0, rem / r, np.inf)
            dt = float(tf.min()) if len(tf) else math.inf
            t_ev = (heap[0][0] - now) if heap else math.inf
            if not math.isfinite(dt) and not math.isfinite(t_ev):
                status = "stalled"
                break
            if t_ev < dt:
                step = t_ev
                fin = tf <= step * (1 + 1e-12)
            else:
                window = dt + self.quantum
                step = min(window, t_ev) if self.quantum else dt
                fin = tf <= step * (1 + 1e-12) + 1e-9
                step = max(float(tf[fin].max()), dt) if fin.any() else step
            if now + step > self.time_limit:
                step = self.time_limit - now
                fin = tf <= step * (1 + 1e-12)
            steps += 1
            moved = np.where(fin, rem, r * step)
            fa = alive[fin]
            f_rem[alive] = np.maximum(rem - moved, 0.0)
            f_rem[fa] = 0.0
            # link counters: payload moved x the link's share, as wire bytes
            per_flow = np.zeros(F.shape[0])
            per_flow[alive] = moved
            link_bytes += V.T @ (F.T @ per_flow)
            np.add.at(delivered, f_row[alive], moved)
            rec.delivered_total = int(delivered.sum())
            add_goodput(now, now + step, float(moved.sum()))
            finish_at = now + tf[fin]
            now += step
            if len(fa):
                f_alive[fa] = False
                dirty = True
                msgs = f_row[fa]
                for i, tf_i in zip(msgs.tolist(), finish_at.tolist()):
                    qps_left[i] -= 1
                    fluid_end[i] = max(fluid_end[i], tf_i)
                    if qps_left[i] == 0:
                        fluid_done(i, fluid_end[i])
        end_ps = int(last_end) if status == "complete" else int(now)
        reason = {"time_limit": "time_limit", "stalled": "stalled"}.get(status, "")
        for i in range(n):
            r = recs[i]
            if r is None:
                r = recs[i] = _FlowRecord(t[i])
                r.reason = "not_released" if not reason or reason == "stalled" else reason
                rec.on_message(r)
            elif not r.done:
                r.reason = reason or "stalled"
                r.delivered = int(delivered[i])
                rec.on_message(r)
        if status == "complete" and any(r.reason for r in recs):
            status = "incomplete"
        links = self._link_rows(link_bytes)
        counters = {"injected_payload_bytes": int(round(float(delivered.sum()))),
                    "dropped_payload_bytes": 0, "dropped_packets": 0,
                    "flow_rate_recomputations": solves, "flow_solver_levels": iterations, "flow_steps": steps,
                    "flows": len(f_msg), "flow_segments": self.spread.segments, "flow_peak_concurrent": peak_flows,
                    "flow_efficiency": self.efficiency, "flow_quantum_ps": int(self.quantum)}
        if compute_gpu:
            counters["gpu_compute_busy_ps"] = dict(sorted(gpu_busy.items()))
        return RunOutcome(status=status, end_ps=end_ps, events=steps, packet_hops=0, links=links,
                          counters=counters, warnings=list(self.warnings), not_modelled=dict(NOT_MODELLED))

    def _alone_ps(self, m) -> float:
        """Fluid time of ``m`` alone on an idle fabric: its payload over the payload rate its
        ports allow (the same framing as the link capacities)."""
        if m.size_bytes == 0:
            return 0.0
        rate_bps = self.ideal.parallel_rate(m)
        unit, hdr, pp = self.ideal.framing(m.src, m.dst)
        share = (unit / (unit + hdr)) if pp is None else pp / (pp + hdr)
        return m.size_bytes / (rate_bps / 8e12 * share * self.efficiency)

    def _v_matrix(self):
        sb = self.spread
        lens = np.fromiter((len(x) for x in sb.seg_links), dtype=np.int64, count=len(sb.seg_links))
        ptr = np.zeros(len(lens) + 1, dtype=np.int64)
        np.cumsum(lens, out=ptr[1:])
        idx = np.concatenate(sb.seg_links) if sb.seg_links else np.zeros(0, dtype=np.int64)
        val = np.concatenate(sb.seg_coef) if sb.seg_coef else np.zeros(0)
        return sp.csr_matrix((val, idx, ptr), shape=(len(lens), len(self.links)))

    def _link_rows(self, payload_bytes: np.ndarray) -> list:
        L = self.links
        wire = payload_bytes / self.payload_share
        return [{"link_id": i, "src": int(L.src[i]), "dst": int(L.dst[i]), "kind": L.kind[i],
                 "rate_bps": int(L.rate_bps[i]), "delay_ps": int(L.delay_ps[i]),
                 "tx_bytes": int(round(w)), "tx_data_bytes": int(round(w))} for i, w in enumerate(wire.tolist())]
