"""Run a plan: build each cluster, place the groups, simulate each distinct pattern once, time the step.

:func:`check` builds every topology and layout first (every input error is raised before anything is
simulated or written); :func:`run_plan` then derives each size's communication
(:func:`fabricsim.plan.comm.derive`), simulates its patterns with the flow engine through
:func:`fabricsim.api.run` (one :class:`PatternSimulator` per topology) and turns the times into step
times (:mod:`fabricsim.plan.step`).

Identical patterns. A pattern is keyed by where its GPUs sit, relative to the pattern itself: per GPU
its NVLink domain (rack) counted from the pattern's first domain, its rail counted from the pattern's
lowest rail (rails of a rail-optimised fabric are alike), its scale-out leaves counted from the
pattern's lowest leaf on each plane and, with 3 tiers, the pods of those leaves counted from the
lowest (and, for messages, who sends how much to whom).
Two EP groups in two racks, or two pipeline boundaries with the same rack pattern, get the same key
and are simulated once; the result stands for both. The representative is the first such pattern
met, so hash-based choices (ECMP) are drawn for its GPU ids and reused for the others.

What is not modelled here (docs/planning.md, "Limits"): each pattern is simulated alone, so groups of
different kinds or of other stages do not load the fabric at the same time; a collective is one ring
step times its step count (no pipelining between steps or buckets).
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError, SimulationError
from ..units import PS_PER_S
from .comm import CommItem, Pattern, derive
from .layout import Layout
from .spec import COMM_TYPES, PlanSpec
from . import step as stepmod


@dataclass
class Case:
    """One planned cluster size: entry ``entry`` of ``clusters``, its first ``gpus`` GPUs."""

    entry: int
    topology: str          # label: the preset name, or the topology kind
    gpus: int
    layout: Layout
    key: str               # the topology section, as JSON (shared built topology)


@dataclass
class Built:
    topology: object
    paths: object
    scenario: object


def _label(topo: dict) -> str:
    """A cluster's name in the results: its preset, its file's name, or its kind."""
    if topo.get("path"):
        return Path(str(topo["path"])).stem
    return topo.get("preset") or topo.get("kind", "leaf_spine")


def _scenario_dict(spec: PlanSpec, topo: dict) -> dict:
    f = spec.fabric
    d = {"name": f"{spec.name}-pattern", "profile": f.profile, "topology": topo,
         "traffic": {"pattern": "trace", "path": "<plan pattern>", "qps_per_connection": f.qps_per_connection},
         "simulation": {"engine": f.engine, "seed": spec.seed, "time_limit": f.time_limit},
         "outputs": {"link_sample_interval": "off"}}
    if f.routing is not None:
        d["routing"] = {"policy": f.routing}
    return d


def _domains(topo) -> list[list[int]]:
    """GPU ids of each NVLink domain (host attribute ``rack``), in domain order; None when the topology
    has none."""
    racks: dict[int, list[int]] = {}
    for h in topo.hosts:
        r = topo.graph.nodes[h].get("rack")
        if r is None:
            return None
        racks.setdefault(r, []).append(h)
    return [racks[r] for r in sorted(racks)]


def check(spec: PlanSpec, source: str) -> tuple[list[Case], dict[str, Built]]:
    """Build every topology and layout; ConfigError (naming the plan field) on the first that does not fit."""
    from ..config import load_scenario
    from ..config.scenario import LoadedScenario
    from ..topology import build_topology
    from ..topology.paths import EqualCostPaths
    built: dict[str, Built] = {}
    cases: list[Case] = []
    for i, entry in enumerate(spec.clusters):
        key = json.dumps(entry.topology, sort_keys=True)
        where = f"clusters[{i}]"
        if key not in built:
            try:
                sc = load_scenario(_scenario_dict(spec, entry.topology)).scenario
                # topology files are found relative to the plan file (as a scenario's, relative to it)
                base = Path(source).resolve().parent if Path(source).is_file() else Path.cwd()
                topo = build_topology(sc.topology, source=source,
                                      resolve=LoadedScenario(sc, source, base).resolve_path)
            except ConfigError as exc:
                field = exc.field or ""
                if field.startswith("topology"):
                    field = f"{where}.{field}"
                elif field.split(".")[0] in ("routing", "simulation", "profile"):
                    field = {"routing.policy": "fabric.routing", "profile": "fabric.profile",
                             "simulation.time_limit": "fabric.time_limit"}.get(field, "fabric")
                else:
                    field = f"{where}.topology" + (f".{field}" if field else "")
                raise ConfigError(exc.message, source=source, field=field) from None
            built[key] = Built(topo, EqualCostPaths(topo), sc)
        hosts = built[key].topology.num_hosts
        for j, n in enumerate(entry.sizes()):
            doms = _domains(built[key].topology)
            k, stride = spec.placement.gpus_per_domain, spec.placement.domain_stride
            if n is None:
                if doms is None or (k is None and stride == 1):
                    n = hosts
                else:
                    kk = k or max(len(d) for d in doms)
                    n = kk * sum(len(d) >= kk for d in doms[::stride])
            at = f"{where}.gpus" + (f"[{j}]" if isinstance(entry.gpus, list) else "")
            if n > hosts:
                raise ConfigError(f"{n} GPUs on a topology of {hosts} (allowed: at most {hosts})",
                                  source=source, field=at)
            lay = Layout.of(spec, n, source, at, doms)
            if lay.ep > 1 and spec.model.moe_layers:
                tokens = spec.batch.micro_batch * spec.batch.seq_len // (lay.tp * lay.cp)
                moe_config(spec, lay.ep, tokens, _group_domain(spec, built[key].topology, lay.ep), source)
            cases.append(Case(i, _label(entry.topology), n, lay, key))
    cal = spec.compute.calibrate
    if cal is not None and cal.gpus not in [c.gpus for c in cases]:
        raise ConfigError(f"{cal.gpus} GPUs is not a planned size (allowed: {sorted({c.gpus for c in cases})})",
                          source=source, field="compute.calibrate.gpus")
    return cases, built


def _group_domain(spec: PlanSpec, topo, ep: int) -> int:
    """GPUs of an EP group per NVLink domain, as the trace generator's ``gpus_per_node`` (node-limited
    routing, hierarchical dispatch): the GPUs used per domain (``placement.gpus_per_domain``, else the
    domain size), at most the group. Exact for groups of whole domains or inside one; a group that
    straddles domains unevenly (contiguous placement) is routed as if it did not."""
    per = spec.placement.gpus_per_domain or int(topo.meta.get("gpus_per_domain", ep))
    return min(ep, per)


def moe_config(spec: PlanSpec, ep: int, tokens: int, domain_gpus: int, source: str, gpus: int | None = None):
    """The trace generator's config of one MoE layer, forward and backward, on one EP group (group-local
    ids; compute left out: it is the step model's). ConfigError naming ``comm.moe`` fields."""
    from ..traces.moe import load_moe_config
    m = spec.model
    cfg = dict(model="custom", hidden_size=m.hidden_size, experts=m.experts, top_k=m.top_k,
               expert_ffn_size=m.expert_ffn_size, dispatch_bytes_per_token=m.dispatch_bytes_per_token,
               combine_bytes_per_token=m.combine_bytes_per_token, max_nodes_per_token=m.max_nodes_per_token,
               ep_size=ep, gpus=gpus or ep, gpus_per_node=min(ep, domain_gpus), tokens_per_gpu=tokens, layers=1,
               microbatches=1, passes="forward_backward", gpu_flops=1e30, seed=spec.seed)
    cfg.update(spec.comm.moe)
    try:
        return load_moe_config(cfg, source)
    except ConfigError as exc:
        raise ConfigError(exc.message, source=source,
                          field="comm.moe" + (f".{exc.field}" if exc.field else "")) from None


class PatternSimulator:
    """Simulates patterns on one built topology, each distinct one once (``simulations`` counts them);
    the patterns queued with :meth:`register` run together in one :meth:`flush` (one engine run)."""

    def __init__(self, spec: PlanSpec, built: Built, source: str):
        self.spec, self.built, self.source = spec, built, source
        self.cache: dict[str, dict] = {}
        self.simulations = 0
        self.rows: list[dict] = []          # one per simulated pattern
        self.runs = 0                       # fabricsim.api.run calls (each simulates a batch of patterns)
        self._pending: list[str] = []
        self._desc: dict[int, tuple] = {}
        self._moe: dict[tuple, object] = {}

    # ------------------------------------------------------------------ identity
    def _gpu(self, g: int) -> tuple:
        d = self._desc.get(g)
        if d is None:
            graph = self.built.topology.graph
            a = graph.nodes[g]
            leaves = tuple(sorted(n for n in graph.neighbors(g)
                                  if graph.nodes[n].get("domain") != "nvlink" and graph.nodes[n]["tier"] == 1))
            pods = tuple(graph.nodes[n].get("pod", 0) for n in leaves)   # 3 tiers: which spines a leaf reaches
            d = self._desc[g] = (a.get("rack", 0), a.get("rail", 0), leaves, pods)
        return d

    def signature(self, pat: Pattern) -> str:
        """The key of ``pat``: equal for patterns at the same relative place (module doc)."""
        gpus = pat.gpus if pat.kind == "a2a" else tuple(x for s, d, _ in pat.messages for x in (s, d))
        desc = [self._gpu(g) for g in gpus]
        rack0, rail0 = min(d[0] for d in desc), min(d[1] for d in desc)
        width = max(len(d[2]) for d in desc)
        low = [min((d[2][k] for d in desc if len(d[2]) > k), default=0) for k in range(width)]
        pod0 = min((p for d in desc for p in d[3]), default=0)
        rel = [(d[0] - rack0, d[1] - rail0, tuple(x - low[k] for k, x in enumerate(d[2])),
                tuple(p - pod0 for p in d[3])) for d in desc]
        if pat.kind == "a2a":
            body = ("a2a", pat.tokens_per_gpu, pat.ep_size, rel)
        else:
            body = ("messages", [(rel[2 * i], rel[2 * i + 1], m[2]) for i, m in enumerate(pat.messages)])
        return hashlib.sha1(repr(body).encode()).hexdigest()[:16]

    # ------------------------------------------------------------------ simulation
    def _moe_trace(self, ep: int, tokens: int, gpus: int):
        key = (ep, tokens, gpus)
        if key not in self._moe:
            from ..traces.moe import generate_moe_trace
            gpn = _group_domain(self.spec, self.built.topology, ep)
            self._moe[key] = generate_moe_trace(moe_config(self.spec, ep, tokens, gpn, self.source, gpus)).trace
        return self._moe[key]

    def _columns(self, pat: Pattern):
        """``(columns, dep_ptr, dep_positions)`` of ``pat`` with global GPU ids (deps as row positions)."""
        import numpy as np
        from ..traces.schema import Trace, TraceRecord
        if pat.kind == "a2a":
            local = self._moe_trace(pat.ep_size, pat.tokens_per_gpu, len(pat.gpus))
            cols, ptr, dep = local.columns()
            ids = np.asarray(pat.gpus, dtype=np.int64)
            # the microbatch tag (one microbatch here) carries the EP group of each message instead
            cols = dict(cols, src=ids[cols["src"]], dst=ids[cols["dst"]], microbatch=cols["src"] // pat.ep_size)
        else:
            cols, ptr, dep = Trace([TraceRecord(i, s, d, size, "pattern", "other", microbatch=0, conn=0)
                                    for i, (s, d, size) in enumerate(pat.messages)]).columns()
        order = np.argsort(cols["id"], kind="stable")
        pos = order[np.searchsorted(cols["id"], dep, sorter=order)] if len(dep) else dep
        return cols, ptr, pos

    @property
    def pending(self) -> int:
        """Patterns registered and not simulated yet."""
        return len(self._pending)

    def register(self, pat: Pattern, kind: str) -> str:
        """Note ``pat`` (of communication type ``kind``); a new key is queued for :meth:`flush`."""
        key = self.signature(pat)
        entry = self.cache.get(key)
        if entry is None:
            entry = self.cache[key] = {"members": set(), "pattern": pat, "kind": kind, "done": False}
            self._pending.append(key)
        entry["members"].add(id(pat))
        return key

    def flush(self) -> None:
        """Simulate every queued pattern in one run: pattern k + 1 starts once pattern k is over (its
        first messages wait for a 1-byte barrier message that waits for every message of pattern k),
        so patterns never share the fabric and each one's times are its own messages' spans."""
        if not self._pending:
            return
        import numpy as np
        from ..api import run
        from ..engine import SimulationInput
        from ..engine.rng import RandomStreams
        from ..traces.schema import COLUMNS, Trace
        names = [c for c in COLUMNS if c != "deps"]
        parts = {c: [] for c in names}
        ptrs, deps = [np.zeros(1, dtype=np.int64)], []
        base, nd, barrier = 0, 0, None
        keys = list(self._pending)
        for k, key in enumerate(keys):
            pat = self.cache[key]["pattern"]
            cols, ptr, pos = self._columns(pat)
            n = len(ptr) - 1
            lens = np.diff(ptr)
            if barrier is not None:      # messages that wait for nothing wait for the barrier
                free = lens == 0
                new_lens = lens + free
                new_dep = np.empty(int(new_lens.sum()), dtype=np.int64)
                new_ptr = np.zeros(n + 1, dtype=np.int64)
                np.cumsum(new_lens, out=new_ptr[1:])
                row = np.repeat(np.arange(n), lens)
                offs = np.arange(len(pos)) - ptr[row] if len(pos) else pos
                new_dep[new_ptr[row] + offs] = pos + base
                new_dep[new_ptr[:-1][free]] = barrier
                ptr, pos = new_ptr, new_dep
            else:
                pos = pos + base
            for c in names:
                col = cols[c]
                if c == "id":
                    col = np.arange(base, base + n, dtype=np.int64)
                elif c == "op":
                    col = np.array([f"p{k}.{x}" for x in col], dtype=object)
                elif c == "layer":
                    col = np.full(n, k, dtype=np.int64)
                parts[c].append(col)
            ptrs.append(ptr[1:] + nd)
            deps.append(pos)
            nd += len(pos)
            base += n
            # the barrier: 1 byte between two GPUs of the pattern, after every one of its messages
            s0, d0 = int(cols["src"][0]), int(cols["dst"][0])
            bar = {"id": base, "src": s0, "dst": d0, "size_bytes": 1, "op": f"barrier{k}", "phase": "other",
                   "layer": -1, "microbatch": -1, "gap_ps": 0, "start_ps": 0, "conn": -1, "collective": "",
                   "collective_bytes": 0}
            for c in names:
                parts[c].append(np.array([bar[c]], dtype=object if isinstance(bar[c], str) else np.int64))
            ptrs.append(np.array([nd + n], dtype=np.int64))
            deps.append(np.arange(base - n, base, dtype=np.int64))
            nd += n
            barrier = base
            base += 1
        cols = {c: np.concatenate(parts[c]) for c in names}
        trace = Trace.from_columns(cols, np.concatenate(ptrs), np.concatenate(deps), source="<plan patterns>")
        b = self.built
        sim = SimulationInput(scenario=b.scenario, topology=b.topology, paths=b.paths,
                              messages=trace.to_table(self.spec.fabric.qps_per_connection),
                              streams=RandomStreams(self.spec.seed))
        res = run(sim, estimate_warning=None)
        self.runs += 1
        status = res.summary["run"]["status"]
        if status != "complete":
            raise SimulationError(f"the plan's patterns did not complete ({status}) within fabric.time_limit "
                                  f"{self.spec.fabric.time_limit} (raise fabric.time_limit)")
        msgs = res.messages
        msgs = msgs[msgs["layer"] >= 0]
        # spans per (pattern, EP group, op): with several EP groups in one pattern, a leg's span is taken
        # per group (one group's combine may start while another's dispatch is still going on)
        spans = msgs.groupby(["layer", "microbatch", "op"]).agg(
            lo=("release_ps", "min"), hi=("end_ps", "max"), phase=("phase", "first"), n=("size_bytes", "size"),
            bytes=("size_bytes", "sum"))
        wall = res.summary["run"].get("wall_time_s")
        for k, key in enumerate(keys):
            entry = self.cache[key]
            pat = entry["pattern"]
            sp = spans.loc[k]
            out = {"all": 0.0, "dispatch": 0.0, "combine": 0.0, "all_bytes": int(sp["bytes"].sum()),
                   "dispatch_bytes": 0, "combine_bytes": 0}
            for _, sg in sp.groupby(level=0):
                span = (int(sg["hi"].max()) - int(sg["lo"].min())) / PS_PER_S
                out["all"] = max(out["all"], span)
                if pat.kind == "a2a":
                    legs = {"dispatch": 0.0, "combine": 0.0}
                    for _, r in sg.iterrows():
                        legs[r["phase"]] += (int(r["hi"]) - int(r["lo"])) / PS_PER_S
                        out[f"{r['phase']}_bytes"] += int(r["bytes"])
                    # legs of different GPUs overlap (a GPU combines while another still dispatches): the
                    # group's span is shared by dispatch and combine in proportion to their spans
                    total = sum(legs.values())
                    scale = span / total if total > span else 1.0
                    for leg, t in legs.items():
                        out[leg] = max(out[leg], t * scale)
            gpus = pat.gpus if pat.kind == "a2a" else [x for m in pat.messages for x in m[:2]]
            entry.update(out, done=True)
            entry["row"] = {"signature": key, "type": entry["kind"], "pattern": pat.kind,
                            "messages": int(sp["n"].sum()), "total_bytes": int(sp["bytes"].sum()),
                            "gpus": len(set(gpus)), "first_gpu": int(min(gpus)), "time_s": out["all"],
                            "dispatch_s": out["dispatch"], "combine_s": out["combine"], "batch": self.runs,
                            "batch_engine_wall_s": wall}
            self.rows.append(entry["row"])
            self.simulations += 1
        self._pending = []

    def times(self, pat: Pattern, kind: str) -> dict:
        """``{"all": s, "dispatch": s, "combine": s}`` of ``pat`` (registered and simulated if new)."""
        key = self.register(pat, kind)
        if not self.cache[key]["done"]:
            self.flush()
        return self.cache[key]


@dataclass
class PlanResult:
    rows: list[dict]
    patterns: list[dict]
    assumptions: dict
    simulations: int
    items: dict = field(default_factory=dict)     # case index -> [CommItem]
    runs: int = 0                                 # engine runs (batches of patterns)


def comm_times(items: list[CommItem], sim: PatternSimulator) -> dict:
    """Seconds per communication type: each item is ``repeat x`` its slowest pattern's leg."""
    out = {t: 0.0 for t in COMM_TYPES}
    for it in items:
        worst, worst_p = -1.0, None
        for p in it.patterns:
            t = sim.times(p, it.type)[it.leg]
            if t > worst:
                worst, worst_p = t, p
        it.notes["pattern_s"] = worst
        out[it.type] += it.repeat * worst
        if worst_p is not None and worst_p.kind == "a2a":
            # the bytes a GPU of the slowest group sends, as simulated (its routing, its copies)
            it.bytes_per_gpu = it.repeat * sim.times(worst_p, it.type)[f"{it.leg}_bytes"] / len(worst_p.gpus)
    return out


def run_plan(spec: PlanSpec, source: str = "<dict>", progress=None) -> PlanResult:
    """Plan every cluster size of ``spec`` (see the module doc). ``progress(text)`` is told each size."""
    cases, built = check(spec, source)
    sims = {k: PatternSimulator(spec, b, source) for k, b in built.items()}
    m, bt = spec.model, spec.batch
    tokens_step = bt.global_batch * bt.seq_len
    fpt = m.flops_per_token(bt.seq_len)
    comms, items_of, counts = [], {}, []
    for i, c in enumerate(cases):
        if progress:
            progress(f"{c.topology} {c.gpus} GPUs: deriving the step's communication")
        items = derive(spec, c.layout)
        sim = sims[c.key]
        before = len(sim.cache)
        for it in items:
            for p in it.patterns:
                sim.register(p, it.type)
        items_of[i] = items
        counts.append(len(sim.cache) - before)
    for i, c in enumerate(cases):
        if progress and sims[c.key].pending:
            progress(f"{c.topology}: simulating {sims[c.key].pending} distinct patterns")
        sims[c.key].flush()
        comms.append(comm_times(items_of[i], sims[c.key]))
    cal = spec.compute.calibrate
    if cal is None:
        rate = spec.compute.peak_tflops * 1e12 * spec.compute.mfu
        rate_source = "peak_tflops x mfu"
    else:
        k = [c.gpus for c in cases].index(cal.gpus)
        c = cases[k]

        def step_of(r):
            busy = stepmod.busy_seconds(fpt, tokens_step, c.gpus, r)
            return stepmod.breakdown(busy, c.layout.pp, c.layout.vpp, c.layout.microbatches, comms[k],
                                     spec.overlap)["step_s"]
        rate = stepmod.calibrate(cal.tokens_per_s_per_gpu, fpt, tokens_step, c.gpus, step_of, source)
        rate_source = f"calibrated: {cal.tokens_per_s_per_gpu:g} tokens/s/GPU at {cal.gpus} GPUs"
    rows = []
    for i, c in enumerate(cases):
        lay = c.layout
        busy = stepmod.busy_seconds(fpt, tokens_step, c.gpus, rate)
        br = stepmod.breakdown(busy, lay.pp, lay.vpp, lay.microbatches, comms[i], spec.overlap)
        tps = tokens_step / br["step_s"] / c.gpus
        row = {"cluster": c.entry, "topology": c.topology, "gpus": c.gpus, "tp": lay.tp, "pp": lay.pp,
               "vpp": lay.vpp, "ep": lay.ep, "cp": lay.cp, "dp": lay.dp, "microbatches": lay.microbatches,
               "tokens_per_step": tokens_step, **br, "tokens_per_s_per_gpu": tps,
               "tokens_per_s": tps * c.gpus, "flops_per_s_per_gpu": rate,
               "mfu_effective": fpt * tokens_step / br["step_s"] / c.gpus / (spec.compute.peak_tflops * 1e12)}
        for t in COMM_TYPES:
            row[f"{t}_bytes_per_gpu"] = sum(it.bytes_per_gpu for it in items_of[i] if it.type == t)
        row["time_to_budget_s"] = spec.token_budget / (tps * c.gpus) if spec.token_budget else math.nan
        row["patterns_simulated"] = counts[i]
        row["patterns_used"] = len({sims[c.key].signature(p) for it in items_of[i] for p in it.patterns})
        rows.append(row)
    smallest = min(rows, key=lambda r: r["gpus"])
    for r in rows:
        r["scaling_efficiency"] = r["tokens_per_s_per_gpu"] / smallest["tokens_per_s_per_gpu"]
        # the same with no exposed communication at this size (against the same reference): the gap
        # between the two is what the fabric costs, the rest of the loss is the pipeline bubble
        r["perfect_fabric_tokens_per_s_per_gpu"] = r["tokens_per_step"] / r["compute_s"] / r["gpus"]
        r["perfect_fabric_scaling_efficiency"] = (r["perfect_fabric_tokens_per_s_per_gpu"]
                                                  / smallest["tokens_per_s_per_gpu"])
        r["fabric_efficiency"] = r["compute_s"] / r["step_s"]
    assumptions = assumptions_of(spec, fpt, rate, rate_source)
    patterns = []
    for k, s in sims.items():         # each row's reuse count from its own topology's cache
        for r in s.rows:
            row = dict(r, topology=_label(json.loads(k)))
            if r["signature"] in s.cache:
                row["reused"] = len(s.cache[r["signature"]]["members"]) - 1
            patterns.append(row)
    return PlanResult(rows, patterns, assumptions, sum(s.simulations for s in sims.values()), items_of,
                      runs=sum(s.runs for s in sims.values()))


def assumptions_of(spec: PlanSpec, fpt: float, rate: float, rate_source: str) -> dict:
    """Every assumption behind the numbers, written beside them (plan.json, and columns of plan.csv)."""
    m = spec.model
    return {
        "plan": spec.name, "seed": spec.seed, "model": m.preset,
        "model_total_params": m.total_params(), "model_active_params": m.active_params(),
        "dense_params": m.dense_params(), "routed_expert_params": m.routed_expert_params(),
        "flops_per_token": fpt, "flops_per_s_per_gpu": rate, "flops_source": rate_source,
        "peak_flops_per_s_per_gpu": spec.compute.peak_tflops * 1e12, "mfu": spec.compute.mfu,
        "seq_len": spec.batch.seq_len, "global_batch_sequences": spec.batch.global_batch,
        "micro_batch_sequences": spec.batch.micro_batch,
        "dispatch_bytes_per_token": m.dispatch_bytes_per_token, "combine_bytes_per_token": m.combine_bytes_per_token,
        "activation_bytes": m.activation_bytes, "gradient_bytes": m.gradient_bytes, "param_bytes": m.param_bytes,
        "dp_bucket_bytes": spec.comm.dp_bucket, "moe_options": dict(spec.comm.moe),
        "overlap_model": spec.overlap.model, "overlap_fraction": spec.overlap.fraction,
        "overlap_fractions": dict(spec.overlap.fractions),
        "routing": spec.fabric.routing or "(profile/default)", "profile": spec.fabric.profile,
        "engine": spec.fabric.engine, "qps_per_connection": spec.fabric.qps_per_connection,
        "placement": ("contiguous: rank r on GPU r" if spec.placement.gpus_per_domain is None else
                      f"the first {spec.placement.gpus_per_domain} GPUs of each NVLink domain") +
                     (f", one NVLink domain in {spec.placement.domain_stride}" if spec.placement.domain_stride > 1
                      else "") + "; ranks tp fastest, then cp, dp, pp",
        "token_budget": spec.token_budget,
        "not_modelled": ["context-parallel traffic", "concurrency between patterns of different kinds or stages",
                         "pipelining between ring steps and between buckets",
                         "uneven stages (the slowest stage's layer count is used for communication, the mean for "
                         "compute)", "background traffic from other jobs", "packet-engine slices"],
    }
