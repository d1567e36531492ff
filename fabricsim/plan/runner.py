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

Background. With a ``background`` section each size has another job (:mod:`fabricsim.plan.background`)
released with each of its patterns; the pattern is timed from its own messages, and its key includes
the background's. The packet engine (``fabric.packet_slice``, :func:`packet_slice`) re-times a sample
of the distinct patterns after the flow engine, each alone, and reports (or applies) the ratio.

What is not modelled here (docs/planning.md, "Limits"): each pattern is simulated without the job's
other patterns, so groups of different kinds or of other stages do not load the fabric at the same
time; a collective is one ring step times its step count (no pipelining between steps or buckets).
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError, SimulationError
from ..units import PS_PER_S
from .background import Background, background_of, nic_rate_bps
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
    background: Background | None = None    # the other job beside it (plan section ``background``)


@dataclass
class Built:
    topology: object
    paths: object
    scenario: object
    section: dict = field(default_factory=dict)     # the plan's topology section (other engines' scenarios)


def _label(topo: dict) -> str:
    """A cluster's name in the results: its preset, its file's name, or its kind."""
    if topo.get("path"):
        return Path(str(topo["path"])).stem
    return topo.get("preset") or topo.get("kind", "leaf_spine")


def _scenario_dict(spec: PlanSpec, topo: dict) -> dict:
    f = spec.fabric
    d = {"name": f"{spec.name}-pattern", "profile": f.profile, "topology": topo,
         "traffic": {"pattern": "trace", "path": "<plan pattern>", "qps_per_connection": f.qps_per_connection},
         "simulation": {"engine": f.engine, "seed": spec.seed, "time_limit": f.time_limit,
                        **({"flow": dict(f.flow)} if f.flow else {})},
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
                elif field.startswith("simulation.flow"):
                    field = "fabric.flow" + field[len("simulation.flow"):]
                elif field.split(".")[0] in ("routing", "simulation", "profile"):
                    field = {"routing.policy": "fabric.routing", "profile": "fabric.profile",
                             "simulation.time_limit": "fabric.time_limit"}.get(field, "fabric")
                else:
                    field = f"{where}.topology" + (f".{field}" if field else "")
                raise ConfigError(exc.message, source=source, field=field) from None
            built[key] = Built(topo, EqualCostPaths(topo), sc, entry.topology)
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
            job = lay.gpu_of if lay.gpu_of is not None else range(n)
            bg = background_of(spec, built[key].topology, job, source, f"{at} = {n}")
            cases.append(Case(i, _label(entry.topology), n, lay, key, bg))
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


#: ``layer`` tag of background messages (patterns are 0, 1, ...; barriers -1)
BACKGROUND_LAYER = -2
#: background flow c is persistent connection ``BACKGROUND_CONN + c`` (its queue pairs reused by its chain)
BACKGROUND_CONN = 1 << 30
#: runs of one batch of patterns before a background too short for them is an error
COVER_TRIES = 6


class PatternSimulator:
    """Simulates patterns on one built topology, each distinct one once (``simulations`` counts them);
    the patterns queued with :meth:`register` run together in one :meth:`flush` (one engine run)."""

    def __init__(self, spec: PlanSpec, built: Built, source: str):
        self.spec, self.built, self.source = spec, built, source
        self._scenarios: dict[str, object] = {}
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

    def key(self, pat: Pattern, background: Background | None = None) -> str:
        """The cache key of ``pat`` run beside ``background``: its :meth:`signature`, and the background's."""
        sig = self.signature(pat)
        return sig if background is None else f"{sig}+bg{background.key}"

    def register(self, pat: Pattern, kind: str, background: Background | None = None) -> str:
        """Note ``pat`` (of communication type ``kind``, run beside ``background``); a new key is queued
        for :meth:`flush`."""
        key = self.key(pat, background)
        entry = self.cache.get(key)
        if entry is None:
            entry = self.cache[key] = {"members": set(), "pattern": pat, "kind": kind, "done": False,
                                       "background": background}
            self._pending.append(key)
        entry["members"].add(id(pat))
        return key

    # ------------------------------------------------------------------ one run of several patterns
    def _cover_guess_ps(self, cols) -> int:
        """A first guess of how long a pattern runs beside its background: twice the busiest GPU's bytes
        (sent or received) at that GPU's scale-out rate (an NVLink pattern is faster: more cover)."""
        import numpy as np
        from ..units import serialisation_ps
        per = {}
        for col in ("src", "dst"):
            g, b = np.unique(cols[col], return_inverse=True)
            tot = np.bincount(b, weights=cols["size_bytes"].astype(float))
            for gg, t in zip(g, tot):
                per[int(gg)] = max(per.get(int(gg), 0.0), float(t))
        gpu, most = max(per.items(), key=lambda kv: kv[1])
        return 2 * serialisation_ps(int(most) + 1, max(1, nic_rate_bps(self.built.topology, gpu)))

    def _assemble(self, keys: list[str], cover: dict):
        """The trace of ``keys`` one after the other (module doc of :meth:`flush`); each pattern's
        background, if any, released with it and covering ``cover[key]`` ps when alone."""
        import numpy as np
        from ..traces.schema import COLUMNS, Trace
        names = [c for c in COLUMNS if c != "deps"]
        parts = {c: [] for c in names}
        ptrs, deps = [np.zeros(1, dtype=np.int64)], []
        base, nd, barrier = 0, 0, None

        def add(cols, ptr, dep_ids):
            nonlocal nd
            for c in names:
                parts[c].append(cols[c])
            ptrs.append(ptr[1:] + nd)
            deps.append(dep_ids)
            nd += len(dep_ids)

        for k, key in enumerate(keys):
            entry = self.cache[key]
            cols, ptr, pos = self._columns(entry["pattern"])
            if key not in cover:
                cover[key] = self._cover_guess_ps(cols)
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
            cols = dict(cols, id=np.arange(base, base + n, dtype=np.int64),
                        op=np.array([f"p{k}.{x}" for x in cols["op"]], dtype=object),
                        layer=np.full(n, k, dtype=np.int64))
            add(cols, ptr, pos)
            waits = [np.arange(base, base + n, dtype=np.int64)]
            base += n
            bg = entry["background"]
            if bg is not None:
                # the other job: per flow a chain of messages (the first after the barrier, at its phase)
                f = len(bg.pairs)
                counts, sizes = bg.chains(cover[key])
                nb = int(counts.sum())
                offs = np.zeros(f, dtype=np.int64)
                np.cumsum(counts[:-1], out=offs[1:])
                chain = np.repeat(np.arange(f, dtype=np.int64), counts)
                first = np.zeros(nb, dtype=bool)
                first[offs] = True
                phase = np.repeat(np.array([bg.phase_ps(c) for c in range(f)], dtype=np.int64), counts)
                gap = np.where(first, phase if barrier is not None else 0, bg.gap_ps).astype(np.int64)
                start = np.where(first & (barrier is None), phase, 0).astype(np.int64)
                bcols = {"id": np.arange(base, base + nb, dtype=np.int64),
                         "src": np.repeat(np.array([s for s, _ in bg.pairs], dtype=np.int64), counts),
                         "dst": np.repeat(np.array([d for _, d in bg.pairs], dtype=np.int64), counts),
                         "size_bytes": np.repeat(sizes, counts).astype(np.int64),
                         "op": np.array([f"bg{k}.{c}" for c in chain], dtype=object),
                         "phase": np.full(nb, "other", dtype=object), "layer": np.full(nb, BACKGROUND_LAYER),
                         "microbatch": np.full(nb, k, dtype=np.int64), "gap_ps": gap, "start_ps": start,
                         "conn": BACKGROUND_CONN + chain, "collective": np.full(nb, "", dtype=object),
                         "collective_bytes": np.zeros(nb, dtype=np.int64)}
                # message j + 1 of a flow after message j and the gap (the other job's compute)
                has = ~first | (barrier is not None)
                prev = np.arange(base, base + nb, dtype=np.int64) - 1
                bdep = np.where(first, barrier if barrier is not None else -1, prev)[has]
                bptr = np.zeros(nb + 1, dtype=np.int64)
                np.cumsum(has, out=bptr[1:])
                add(bcols, bptr, bdep.astype(np.int64))
                waits.append(base + offs + counts - 1)           # each flow's last message
                base += nb
            # the barrier: 1 byte between two GPUs of the pattern, after every one of its messages (and
            # after the end of its background)
            s0, d0 = int(cols["src"][0]), int(cols["dst"][0])
            bar = {"id": base, "src": s0, "dst": d0, "size_bytes": 1, "op": f"barrier{k}", "phase": "other",
                   "layer": -1, "microbatch": -1, "gap_ps": 0, "start_ps": 0, "conn": -1, "collective": "",
                   "collective_bytes": 0}
            w = np.concatenate(waits)
            add({c: np.array([bar[c]], dtype=object if isinstance(bar[c], str) else np.int64) for c in names},
                np.array([0, len(w)], dtype=np.int64), w)
            barrier = base
            base += 1
        cols = {c: np.concatenate(parts[c]) for c in names}
        return Trace.from_columns(cols, np.concatenate(ptrs), np.concatenate(deps), source="<plan patterns>")

    def _scenario(self, engine: str):
        if engine == self.built.scenario.simulation.engine:
            return self.built.scenario
        if engine not in self._scenarios:
            from ..config import load_scenario
            d = _scenario_dict(self.spec, self.built.section)
            d["simulation"]["engine"] = engine
            d["simulation"].pop("flow", None)         # the flow engine's parameters only
            self._scenarios[engine] = load_scenario(d).scenario
        return self._scenarios[engine]

    def _input(self, trace, engine: str = "flow"):
        from ..engine import SimulationInput
        from ..engine.rng import RandomStreams
        b = self.built
        return SimulationInput(scenario=self._scenario(engine), topology=b.topology, paths=b.paths,
                               messages=trace.to_table(self.spec.fabric.qps_per_connection),
                               streams=RandomStreams(self.spec.seed))

    def _measure(self, res, keys: list[str]) -> tuple[dict, set]:
        """``({key: times}, keys whose background ended before them)`` of one run of ``keys``."""
        msgs = res.messages
        own = msgs[msgs["layer"] >= 0]
        # spans per (pattern, EP group, op): with several EP groups in one pattern, a leg's span is taken
        # per group (one group's combine may start while another's dispatch is still going on)
        spans = own.groupby(["layer", "microbatch", "op"]).agg(
            lo=("release_ps", "min"), hi=("end_ps", "max"), phase=("phase", "first"), n=("size_bytes", "size"),
            bytes=("size_bytes", "sum"))
        bg = msgs[msgs["layer"] == BACKGROUND_LAYER]
        bg_end = bg.groupby(["microbatch", "op"])["end_ps"].max().groupby(level=0).min() if len(bg) else {}
        out_of, short = {}, set()
        for k, key in enumerate(keys):
            pat = self.cache[key]["pattern"]
            sp = spans.loc[k]
            out = {"all": 0.0, "dispatch": 0.0, "combine": 0.0, "all_bytes": int(sp["bytes"].sum()),
                   "dispatch_bytes": 0, "combine_bytes": 0, "messages": int(sp["n"].sum()),
                   "lo_ps": int(sp["lo"].min()), "hi_ps": int(sp["hi"].max())}
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
            if self.cache[key]["background"] is not None:
                out["background_end_ps"] = int(bg_end[k])
                if out["background_end_ps"] < out["hi_ps"]:
                    short.add(key)
            out_of[key] = out
        return out_of, short

    def _simulate(self, keys: list[str], engine: str = "flow", cover: dict | None = None) -> tuple[dict, dict]:
        """Run ``keys`` one after the other in one run of ``engine``; rerun those whose background ended
        before them with a longer one (up to :data:`COVER_TRIES` runs). ``({key: times}, {"wall_s",
        "runs", "cover_ps"})``."""
        from ..api import run
        cover = {} if cover is None else cover
        done, todo, wall, runs = {}, list(keys), 0.0, 0
        for _ in range(COVER_TRIES):
            res = run(self._input(self._assemble(todo, cover), engine), estimate_warning=None)
            runs += 1
            status = res.summary["run"]["status"]
            if status != "complete":
                raise SimulationError(f"the plan's patterns did not complete ({status}) within fabric.time_limit "
                                      f"{self.spec.fabric.time_limit} with the {engine} engine (raise "
                                      "fabric.time_limit)")
            wall += res.summary["run"].get("wall_time_s") or 0.0
            times, short = self._measure(res, todo)
            done.update({k: v for k, v in times.items() if k not in short})
            for k in short:    # stretch by how far the background fell short, twice over (and at least 2x)
                t = times[k]
                lasted = max(1, t["background_end_ps"] - t["lo_ps"])
                cover[k] = int(max(2 * cover[k], 2 * cover[k] * (t["hi_ps"] - t["lo_ps"]) / lasted))
            todo = [k for k in todo if k in short]
            if not todo:
                return done, {"wall_s": wall, "runs": runs, "cover_ps": cover}
        raise SimulationError(f"the background traffic did not last as long as {len(todo)} patterns after "
                              f"{COVER_TRIES} runs (a bug: please report it)")

    def flush(self) -> None:
        """Simulate every queued pattern in one run: pattern k + 1 starts once pattern k is over (its
        first messages wait for a 1-byte barrier message that waits for every message of pattern k and
        of its background), so patterns never share the fabric with each other, only with their
        background; each one's times are its own messages' spans. A pattern whose background ended
        before it is run again with a longer background (with the others in that case). With
        ``fabric.batch: per_pattern`` each pattern gets a run of its own instead (queue pairs numbered
        from 0: ECMP draws that depend only on the pattern)."""
        if not self._pending:
            return
        keys = list(self._pending)
        if self.spec.fabric.batch == "per_pattern":
            # a run of its own: its queue pairs numbered from 0, so ECMP draws depend on nothing else
            batches = [[k] for k in keys]
        else:
            batches = [keys]
        for batch in batches:
            times, info = self._simulate(batch)
            self.runs += info["runs"]
            self._record(batch, times, info)
        self._pending = []

    def _record(self, keys: list[str], times: dict, info: dict) -> None:
        for key in keys:
            entry = self.cache[key]
            pat, out = entry["pattern"], times[key]
            gpus = pat.gpus if pat.kind == "a2a" else [x for m in pat.messages for x in m[:2]]
            entry.update(out, done=True, cover_ps=info["cover_ps"][key])
            bg = entry["background"]
            entry["row"] = {"signature": key, "type": entry["kind"], "pattern": pat.kind,
                            "messages": out["messages"], "total_bytes": out["all_bytes"],
                            "gpus": len(set(gpus)), "first_gpu": int(min(gpus)), "time_s": out["all"],
                            "dispatch_s": out["dispatch"], "combine_s": out["combine"], "batch": self.runs,
                            "batch_engine_wall_s": info["wall_s"],
                            "background_flows": len(bg.pairs) if bg else 0,
                            "background_messages": int(bg.chains(info["cover_ps"][key])[0].sum()) if bg else 0,
                            "background_bytes": int((lambda n, b: (n * b).sum())(*bg.chains(info["cover_ps"][key])))
                            if bg else 0}
            self.rows.append(entry["row"])
            self.simulations += 1

    def times(self, pat: Pattern, kind: str, background: Background | None = None) -> dict:
        """``{"all": s, "dispatch": s, "combine": s}`` of ``pat`` (registered and simulated if new)."""
        key = self.register(pat, kind, background)
        if not self.cache[key]["done"]:
            self.flush()
        return self.cache[key]

    # ------------------------------------------------------------------ the packet engine on a slice
    def packet_estimate_s(self, key: str) -> float:
        """Estimated wall time of a packet-engine run of pattern ``key`` alone (with its background)."""
        from ..engine.estimate import estimate
        cover = {key: self.cache[key]["cover_ps"]}
        return estimate(self._input(self._assemble([key], cover), "packet"))["wall_s"]

    def packet_check(self, key: str) -> dict:
        """Run pattern ``key`` alone with the packet engine and with the flow engine (the same messages,
        the same queue-pair numbering); their times and ratios go into the pattern's row."""
        entry = self.cache[key]
        cover = {key: entry["cover_ps"]}
        flow, fi = self._simulate([key], "flow", dict(cover))
        pkt, pi = self._simulate([key], "packet", dict(cover))
        f, p = flow[key], pkt[key]
        ratio = {leg: (p[leg] / f[leg] if f[leg] > 0 else math.nan) for leg in ("all", "dispatch", "combine")}
        entry["packet"] = {"flow": f, "packet": p, "ratio": ratio}
        entry["row"].update({"flow_alone_s": f["all"], "packet_s": p["all"], "packet_ratio": ratio["all"],
                             "packet_dispatch_s": p["dispatch"], "packet_combine_s": p["combine"],
                             "packet_dispatch_ratio": ratio["dispatch"], "packet_combine_ratio": ratio["combine"],
                             "packet_engine_wall_s": pi["wall_s"]})
        self.runs += fi["runs"] + pi["runs"]
        return entry["packet"]


@dataclass
class PlanResult:
    rows: list[dict]
    patterns: list[dict]
    assumptions: dict
    simulations: int
    items: dict = field(default_factory=dict)     # case index -> [CommItem]
    runs: int = 0                                 # engine runs (batches of patterns)


def comm_times(items: list[CommItem], sim: PatternSimulator, background: Background | None = None) -> dict:
    """Seconds per communication type: each item is ``repeat x`` its slowest pattern's leg (each pattern
    run beside ``background``)."""
    out = {t: 0.0 for t in COMM_TYPES}
    for it in items:
        worst, worst_p = -1.0, None
        for p in it.patterns:
            t = sim.times(p, it.type, background)[it.leg]
            if t > worst:
                worst, worst_p = t, p
        it.notes["pattern_s"] = worst
        out[it.type] += it.repeat * worst
        if worst_p is not None and worst_p.kind == "a2a":
            # the bytes a GPU of the slowest group sends, as simulated (its routing, its copies)
            simulated = sim.times(worst_p, it.type, background)[f"{it.leg}_bytes"]
            it.bytes_per_gpu = it.repeat * simulated / len(worst_p.gpus)
    return out


#: the leg of a pattern's times each communication type is timed by
LEG = {"ep_dispatch": "dispatch", "ep_combine": "combine"}


def packet_slice(spec: PlanSpec, cases: list[Case], items_of: dict, sims: dict, source: str,
                 progress=None) -> dict:
    """Run ``fabric.packet_slice``'s sample of patterns with the packet engine (after the flow engine
    has timed every pattern); ``{(topology key, type): mean packet/flow ratio}`` of the sampled types.
    ConfigError naming ``fabric.packet_slice.max_wall_s`` before any packet run when the runs are
    estimated to take longer."""
    import numpy as np
    ps = spec.fabric.packet_slice
    cand: dict[tuple, dict] = {}
    for i, c in enumerate(cases):
        sim = sims[c.key]
        for it in items_of[i]:
            if ps.types is not None and it.type not in ps.types:
                continue
            d = cand.setdefault((c.key, it.type), {})
            for p in it.patterns:
                k = sim.key(p, c.background)
                d[k] = max(d.get(k, 0.0), sim.cache[k][it.leg])
    chosen = {}
    for n, ((tk, t), d) in enumerate(cand.items()):
        keys = sorted(d, key=lambda k: (-d[k], k))           # the slowest (what the step waits for) first
        if ps.pick == "random":
            rng = np.random.default_rng(np.random.SeedSequence([spec.seed, n]))
            keys = [keys[j] for j in rng.permutation(len(keys))]
        chosen[(tk, t)] = keys[:ps.patterns]
    runs = list(dict.fromkeys((tk, k) for (tk, _), ks in chosen.items() for k in ks))
    est = {r: sims[r[0]].packet_estimate_s(r[1]) for r in runs}
    total = sum(est.values())
    if total > ps.max_wall_s:
        kernel = sims[runs[0][0]]._scenario("packet").simulation.kernel
        raise ConfigError(f"the {len(runs)} sampled patterns would take about {total:.3g} s of wall time with the "
                          f"packet engine (estimated by the measured cost model of kernel {kernel}, "
                          "fabricsim/engine/estimate.py SPEED; "
                          "allowed: at most "
                          f"max_wall_s = {ps.max_wall_s:g} s: fewer patterns or types, a smaller cluster, or a "
                          "larger max_wall_s)", source=source, field="fabric.packet_slice.max_wall_s")
    for j, (tk, k) in enumerate(runs):
        if progress:
            progress(f"packet engine: pattern {j + 1} of {len(runs)} (estimated {est[(tk, k)]:.3g} s)")
        sims[tk].packet_check(k)
        sims[tk].cache[k]["row"]["packet_estimate_wall_s"] = est[(tk, k)]
    factors = {}
    for (tk, t), ks in chosen.items():
        r = [sims[tk].cache[k]["packet"]["ratio"][LEG.get(t, "all")] for k in ks]
        r = [x for x in r if math.isfinite(x)]
        if r:
            factors[(tk, t)] = float(np.mean(r))
    return factors


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
                sim.register(p, it.type, c.background)
        items_of[i] = items
        counts.append(len(sim.cache) - before)
    for i, c in enumerate(cases):
        if progress and sims[c.key].pending:
            progress(f"{c.topology}: simulating {sims[c.key].pending} distinct patterns")
        sims[c.key].flush()
        comms.append(comm_times(items_of[i], sims[c.key], c.background))
    ps = spec.fabric.packet_slice
    factors = packet_slice(spec, cases, items_of, sims, source, progress) if ps is not None else {}
    flow_comms = [dict(x) for x in comms]
    if ps is not None and ps.use == "correct":
        for i, c in enumerate(cases):
            for t in COMM_TYPES:
                comms[i][t] *= factors.get((c.key, t), 1.0)
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
        row["patterns_used"] = len({sims[c.key].key(p, c.background) for it in items_of[i] for p in it.patterns})
        row["background_gpus"] = c.background.gpus if c.background else 0
        row["background_flows"] = len(c.background.pairs) if c.background else 0
        if ps is not None:
            for t in COMM_TYPES:
                row[f"{t}_flow_s"] = flow_comms[i][t]
                row[f"{t}_packet_factor"] = factors.get((c.key, t), math.nan)
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
    assumptions["background_per_size"] = {f"{c.topology}/{c.gpus}": (c.background.describe() if c.background
                                                                       else "none") for c in cases}
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
        "engine": spec.fabric.engine, "batch": spec.fabric.batch, "flow_params": dict(spec.fabric.flow),
        "qps_per_connection": spec.fabric.qps_per_connection,
        "comm_times_from": _comm_source(spec), "packet_slice": _packet_slice_text(spec),
        "background": _background_text(spec),
        "placement": ("contiguous: rank r on GPU r" if spec.placement.gpus_per_domain is None else
                      f"the first {spec.placement.gpus_per_domain} GPUs of each NVLink domain") +
                     (f", one NVLink domain in {spec.placement.domain_stride}" if spec.placement.domain_stride > 1
                      else "") + "; ranks tp fastest, then cp, dp, pp",
        "token_budget": spec.token_budget,
        "not_modelled": ["context-parallel traffic", "concurrency between patterns of different kinds or stages",
                         "pipelining between ring steps and between buckets",
                         "uneven stages (the slowest stage's layer count is used for communication, the mean for "
                         "compute)"],
    }


def _comm_source(spec: PlanSpec) -> str:
    ps = spec.fabric.packet_slice
    if ps is None or ps.use == "report":
        return "flow engine" + (" (packet-engine times of a sample reported in patterns.csv, not used)" if ps else "")
    return ("flow engine x the mean packet/flow ratio of each type's sampled patterns (<type>_packet_factor; "
            "<type>_flow_s: before the correction)")


def _packet_slice_text(spec: PlanSpec) -> str:
    ps = spec.fabric.packet_slice
    if ps is None:
        return "none"
    return (f"{ps.patterns} pattern(s) per type ({ps.pick}) of {', '.join(ps.types) if ps.types else 'every type'}, "
            f"each alone with the packet engine and the flow engine; use: {ps.use}; max_wall_s {ps.max_wall_s:g}")


def _background_text(spec: PlanSpec) -> str:
    b = spec.background
    if b is None:
        return "none: the job is alone on the fabric"
    where = ("the GPUs the job leaves unused" + (f" (their first {b.fraction:g})" if b.fraction < 1 else "")
             if b.gpus == "unused" else f"the last {b.gpus} GPUs" if isinstance(b.gpus, int) else
             f"GPUs {b.gpus}")
    return (f"another job: {b.pattern} on {where}, chains of {b.message_size} B messages at load {b.load:g} of "
            "each GPU's scale-out NIC, released with every pattern (which is timed from its own messages only)")
