"""MoE all-to-all trace generator (``fabricsim trace moe``; documented in docs/traces.md).

Per (layer, microbatch) and expert-parallel (EP) group, every token of every GPU is routed to
``top_k`` distinct experts (seeded, vectorised Gumbel-top-k on log-popularity, optionally
DeepSeek-style node-limited), then:

* dispatch: one message per (src, dst) GPU pair with ``n > 0`` token copies, ``n x
  dispatch_bytes_per_token``; a token is sent once per destination GPU however many of its experts
  live there, and nothing is sent for experts on the sender's own GPU;
* combine: the reverse message ``dst -> src`` of ``n x combine_bytes_per_token``, depending on every
  dispatch message into ``dst`` of the same layer / microbatch, with the expert compute time of
  ``dst`` as its gap (token copies processed on dst x FLOPs per copy / effective GPU FLOP/s);
* the next layer's dispatch from GPU g depends on every combine into g of the previous layer (same
  microbatch); microbatch mb + 1 starts on g after microbatch mb's last layer has returned to g.

Options (docs/traces.md spells out every dependency): ``dispatch: hierarchical`` sends a token once
per remote node over the scale-out network to the rail-aligned GPU, which forwards it over NVLink
(combine mirrored: gather to the relay, one scale-out message back); ``passes: forward_backward``
appends the layers in reverse with the same routing (gradients); ``overlap: a2a_1f1b`` lets
microbatch mb + 1's step run while mb's experts compute (two microbatches in flight).

Values marked [EST] in the field descriptions are estimates, not measured figures.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal, Optional

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..errors import ConfigError
from .schema import Trace, TraceRecord

#: model presets (docs/traces.md; /work/shared/reference/hardware-and-workloads.md)
PRESETS: dict[str, dict] = {
    "deepseek-v3": dict(hidden_size=7168, experts=256, top_k=8, expert_ffn_size=2048,
                        dispatch_bytes_per_token=7392,    # FP8: 7168 B + 56 x 4 B scales
                        combine_bytes_per_token=14336,    # BF16
                        max_nodes_per_token=4),
    "gpt-oss-20b": dict(hidden_size=2880, experts=32, top_k=4, expert_ffn_size=2880,
                        dispatch_bytes_per_token=5760, combine_bytes_per_token=5760,
                        max_nodes_per_token=None),
}
MODELS = ("deepseek-v3", "gpt-oss-20b", "custom")
PS_PER_S = 10**12


class MoeTraceConfig(BaseModel):
    """Parameters of a generated MoE trace. ``None`` model fields take the preset's value."""

    model_config = ConfigDict(extra="forbid", validate_default=True)

    model: Literal["deepseek-v3", "gpt-oss-20b", "custom"] = Field(
        "deepseek-v3", description="model preset; 'custom' needs hidden_size, experts and top_k")
    hidden_size: Optional[int] = Field(None, ge=1, description="hidden size (preset)")
    experts: Optional[int] = Field(None, ge=1, description="routed experts per layer (preset)")
    top_k: Optional[int] = Field(None, ge=1, description="experts per token (preset)")
    expert_ffn_size: Optional[int] = Field(None, ge=1, description="expert FFN size (preset; custom: hidden_size)")
    dispatch_bytes_per_token: Optional[int] = Field(
        None, ge=1, description="bytes per dispatched token copy (preset; custom: 2 x hidden_size, BF16)")
    combine_bytes_per_token: Optional[int] = Field(
        None, ge=1, description="bytes per combined token copy (preset; custom: 2 x hidden_size, BF16)")
    ep_size: int = Field(8, ge=1, description="GPUs in one expert-parallel group")
    gpus: Optional[int] = Field(None, ge=1, description="total GPUs (default ep_size); EP groups are "
                                "consecutive blocks of ep_size GPU ids")
    gpus_per_node: int = Field(8, ge=1, description="GPUs per node for node-limited routing (72: an NVL72 domain)")
    max_nodes_per_token: Optional[int] = Field(
        None, ge=1, description="node-limited routing: at most this many nodes per token "
        "(None: unlimited; deepseek-v3 default 4 when not given)")
    tokens_per_gpu: int = Field(4096, ge=1, description="tokens per GPU per microbatch")
    layers: int = Field(1, ge=1, description="MoE layers")
    microbatches: int = Field(1, ge=1, description="microbatches, run one after the other")
    popularity: Literal["uniform", "zipf", "imbalance"] = Field(
        "uniform", description="expert popularity: uniform, Zipf(zipf_s), or tuned to a target imbalance")
    zipf_s: float = Field(1.0, ge=0, description="Zipf exponent (popularity: zipf)")
    imbalance: Optional[float] = Field(
        None, ge=0, description="target (max - mean) / mean of tokens per expert (popularity: imbalance)")
    seed: int = Field(0, ge=0, description="random seed")
    flops_per_token: Optional[float] = Field(
        None, gt=0, description="expert FLOPs per token copy [EST] (default 6 x hidden x ffn: SwiGLU forward)")
    gpu_flops: float = Field(989e12, gt=0, description="peak GPU FLOP/s [EST] (H100 dense BF16)")
    mfu: float = Field(0.5, gt=0, le=1, description="fraction of peak reached by the expert GEMMs [EST]")
    layer_gap_ps: int = Field(0, ge=0, description="compute between a layer's combine and the next "
                              "dispatch (attention etc.) [EST: 0, not modelled]")
    dispatch: Literal["flat", "hierarchical"] = Field(
        "flat", description="flat: GPU to GPU; hierarchical: once per (token, remote node) over the scale-out "
        "network to the rail-aligned GPU, then forwarded over NVLink (DeepSeek-V3)")
    passes: Literal["forward", "forward_backward"] = Field(
        "forward", description="forward only, or forward then backward (layers in reverse, same routing)")
    overlap: Literal["none", "a2a_1f1b"] = Field(
        "none", description="none: microbatches one after the other; a2a_1f1b: two microbatches in flight, "
        "one's all-to-all overlapping the other's compute")
    backward_dispatch_bytes_per_token: Optional[int] = Field(
        None, ge=1, description="bytes per backward-dispatched (gradient) token copy (default combine_bytes_per_token)")
    backward_combine_bytes_per_token: Optional[int] = Field(
        None, ge=1, description="bytes per backward-combined token copy (default dispatch_bytes_per_token)")
    backward_compute_factor: float = Field(
        2.0, gt=0, description="backward expert compute / forward expert compute [EST] (data + weight gradients)")

    @model_validator(mode="after")
    def _resolve(self):
        preset = PRESETS.get(self.model)
        if preset is None:
            for f in ("hidden_size", "experts", "top_k"):
                if getattr(self, f) is None:
                    raise ValueError(f"{f}: required with model 'custom'")
            if self.expert_ffn_size is None:
                self.expert_ffn_size = self.hidden_size
            for f in ("dispatch_bytes_per_token", "combine_bytes_per_token"):
                if getattr(self, f) is None:
                    setattr(self, f, 2 * self.hidden_size)
        else:
            for f, v in preset.items():
                if f == "max_nodes_per_token":
                    if f not in self.model_fields_set:
                        self.max_nodes_per_token = v
                elif getattr(self, f) is None:
                    setattr(self, f, v)
        if self.gpus is None:
            self.gpus = self.ep_size
        if self.backward_dispatch_bytes_per_token is None:
            self.backward_dispatch_bytes_per_token = self.combine_bytes_per_token
        if self.backward_combine_bytes_per_token is None:
            self.backward_combine_bytes_per_token = self.dispatch_bytes_per_token
        if self.dispatch == "hierarchical" and self.ep_size % self.gpus_per_node \
                and self.gpus_per_node % self.ep_size:
            raise ValueError(f"dispatch: hierarchical needs EP groups of whole nodes or inside one node; "
                             f"ep_size {self.ep_size} and gpus_per_node {self.gpus_per_node} (allowed: one a "
                             "multiple of the other)")
        if self.flops_per_token is None:
            self.flops_per_token = 6.0 * self.hidden_size * self.expert_ffn_size
        if self.top_k > self.experts:
            raise ValueError(f"top_k: {self.top_k} is more than the {self.experts} experts (allowed: <= experts)")
        if self.experts % self.ep_size:
            raise ValueError(f"ep_size: {self.experts} experts do not divide over {self.ep_size} GPUs "
                             "(allowed: a divisor of experts)")
        if self.gpus % self.ep_size:
            raise ValueError(f"gpus: {self.gpus} GPUs are not a whole number of EP groups of {self.ep_size} "
                             "(allowed: a multiple of ep_size)")
        if self.popularity == "imbalance":
            if self.imbalance is None:
                raise ValueError("imbalance: required with popularity 'imbalance'")
            hi = self.experts / self.top_k - 1
            if self.imbalance >= hi:
                raise ValueError(f"imbalance: got {self.imbalance} (allowed: < experts / top_k - 1 = {hi:g})")
        if self.max_nodes_per_token is not None:
            # every node set the routing may choose must hold at least top_k experts
            counts = _node_expert_counts(self, 0)
            m = min(self.max_nodes_per_token, len(counts))
            if sum(sorted(counts)[:m]) < self.top_k:
                raise ValueError(f"max_nodes_per_token: {self.max_nodes_per_token} nodes hold fewer than "
                                 f"top_k = {self.top_k} experts (allowed: more nodes)")
        return self

    @property
    def experts_per_gpu(self) -> int:
        return self.experts // self.ep_size

    @property
    def groups(self) -> int:
        return self.gpus // self.ep_size

    def compute_ps(self, token_copies) -> np.ndarray:
        """Expert compute time (ps) for ``token_copies`` processed on one GPU."""
        rate = self.gpu_flops * self.mfu
        return np.rint(np.asarray(token_copies, dtype=np.float64) * self.flops_per_token / rate * PS_PER_S).astype(np.int64)


def load_moe_config(data: dict, source: str | None = None, root=None) -> MoeTraceConfig:
    """A validated config from a dict; errors become one-line ConfigErrors naming the field."""
    from ..config.scenario import validation_to_config_error
    try:
        return MoeTraceConfig(**data)
    except ValidationError as exc:
        raise validation_to_config_error(exc, source, root, data=data, model=MoeTraceConfig) from None
    except TypeError as exc:  # non-string keys
        raise ConfigError(f"not a mapping of field names: {exc}", source=source) from None


# --------------------------------------------------------------------------- routing

def _expert_gpu(cfg: MoeTraceConfig) -> np.ndarray:
    """Group-local GPU of each expert: expert e lives on GPU e % ep_size of its group."""
    return np.arange(cfg.experts) % cfg.ep_size


def _expert_node(cfg: MoeTraceConfig, group: int) -> np.ndarray:
    """Group-local node index (0..) of each expert."""
    gpu = group * cfg.ep_size + _expert_gpu(cfg)
    node = gpu // cfg.gpus_per_node
    return node - node.min()


def _node_expert_counts(cfg: MoeTraceConfig, group: int) -> list[int]:
    return np.bincount(_expert_node(cfg, group)).tolist()


def popularity_weights(cfg: MoeTraceConfig, layer: int, s: float | None = None) -> np.ndarray:
    """Normalised popularity of each expert in ``layer`` (Zipf ranks over a per-layer random order)."""
    if s is None:
        s = _zipf_exponent(cfg)
    ranks = np.random.default_rng([cfg.seed, 7919, layer]).permutation(cfg.experts)
    w = 1.0 / (ranks + 1.0) ** s
    return w / w.sum()


def _zipf_exponent(cfg: MoeTraceConfig) -> float:
    if cfg.popularity == "uniform":
        return 0.0
    if cfg.popularity == "zipf":
        return cfg.zipf_s
    return tune_zipf_for_imbalance(cfg)


_TUNED: dict = {}


def _route(cfg: MoeTraceConfig, logw: np.ndarray, noise: np.ndarray, node: np.ndarray) -> np.ndarray:
    """Top-k experts per token (rows of ``noise``) by score log w + Gumbel noise, node-limited."""
    scores = noise + logw[None, :].astype(noise.dtype)
    n_nodes = int(node.max()) + 1
    m = cfg.max_nodes_per_token
    if m is not None and m < n_nodes:
        t = scores.shape[0]
        counts = np.bincount(node, minlength=n_nodes)
        width = int(counts.max())
        slot = np.zeros(cfg.experts, dtype=np.int64)
        for n in range(n_nodes):
            idx = np.flatnonzero(node == n)
            slot[idx] = np.arange(len(idx))
        grid = np.full((t, n_nodes, width), -np.inf, dtype=scores.dtype)
        grid[:, node, slot] = scores
        # node affinity: sum of its top-r expert scores, r = top_k / M (DeepSeek: top-2 of 8 over 4 nodes)
        r = max(1, min(cfg.top_k // m, int(counts.min())))
        top_r = -np.partition(-grid, r - 1, axis=2)[:, :, :r]
        node_score = top_r.sum(axis=2)
        chosen = np.argpartition(-node_score, m - 1, axis=1)[:, :m]
        allowed = np.zeros((t, n_nodes), dtype=bool)
        np.put_along_axis(allowed, chosen, True, axis=1)
        scores = np.where(allowed[:, node], scores, -np.inf)
    k = cfg.top_k
    if k == cfg.experts:
        return np.broadcast_to(np.arange(k), (scores.shape[0], k)).copy()
    return np.argpartition(-scores, k - 1, axis=1)[:, :k]


def _gumbel(rng: np.random.Generator, shape) -> np.ndarray:
    u = rng.random(shape, dtype=np.float32)
    return -np.log(-np.log(np.clip(u, 1e-12, 1.0 - 1e-7)))


CHUNK = 8192  # tokens routed per vectorised step (bounds memory at CHUNK x experts floats)


def sample_routing(cfg: MoeTraceConfig, layer: int, microbatch: int, group: int,
                   weights: np.ndarray | None = None) -> np.ndarray:
    """Experts (group-local ids) chosen by every token of one EP group: shape
    ``(ep_size * tokens_per_gpu, top_k)``; token t comes from group-local GPU ``t // tokens_per_gpu``."""
    if weights is None:
        weights = popularity_weights(cfg, layer)
    logw = np.log(weights)
    node = _expert_node(cfg, group)
    rng = np.random.default_rng([cfg.seed, layer, microbatch, group])
    total = cfg.ep_size * cfg.tokens_per_gpu
    out = np.empty((total, cfg.top_k), dtype=np.int64)
    for a in range(0, total, CHUNK):
        b = min(total, a + CHUNK)
        out[a:b] = _route(cfg, logw, _gumbel(rng, (b - a, cfg.experts)), node)
    return out


def imbalance_of(counts) -> float:
    """(max - mean) / mean of tokens per expert."""
    counts = np.asarray(counts, dtype=np.float64)
    mean = counts.mean()
    return float((counts.max() - mean) / mean) if mean > 0 else 0.0


def tune_zipf_for_imbalance(cfg: MoeTraceConfig) -> float:
    """The Zipf exponent whose routing gives ``cfg.imbalance`` (bisection on a seeded Monte Carlo
    estimate with common random numbers; about 2,000 tokens per expert on average)."""
    key = (cfg.experts, cfg.top_k, cfg.ep_size, cfg.gpus_per_node, cfg.max_nodes_per_token, cfg.seed, cfg.imbalance)
    if key in _TUNED:
        return _TUNED[key]
    target = float(cfg.imbalance)
    n_tok = int(min(max(4096, math.ceil(2000 * cfg.experts / cfg.top_k)), 65536))
    noise = _gumbel(np.random.default_rng([cfg.seed, 104729]), (n_tok, cfg.experts))
    node = _expert_node(cfg, 0)
    ranks = np.random.default_rng([cfg.seed, 7919, 0]).permutation(cfg.experts)

    def f(s):
        logw = -s * np.log(ranks + 1.0)
        chosen = _route(cfg, logw, noise, node)
        return imbalance_of(np.bincount(chosen.ravel(), minlength=cfg.experts))

    lo, hi = 0.0, 1.0
    if f(lo) >= target:
        _TUNED[key] = 0.0
        return 0.0
    while f(hi) < target:
        lo, hi = hi, hi * 2
        if hi > 64:
            raise ConfigError(f"got {target}: not reachable with Zipf popularity (allowed: a smaller ratio)",
                              field="imbalance")
    for _ in range(30):
        mid = (lo + hi) / 2
        v = f(mid)
        if abs(v - target) <= 0.002 * max(target, 0.01):
            lo = hi = mid
            break
        if v < target:
            lo = mid
        else:
            hi = mid
    s = (lo + hi) / 2
    _TUNED[key] = s
    return s


# --------------------------------------------------------------------------- trace

@dataclass
class MoeTrace:
    trace: Trace
    config: MoeTraceConfig
    zipf_s: float
    #: per (layer, microbatch, group): (max - mean) / mean of tokens per expert
    imbalances: list[float] = field(default_factory=list)
    max_nodes_seen: int = 0
    compute_ps: list[int] = field(default_factory=list)

    @cached_property
    def bytes_by_phase(self) -> dict[str, int]:
        out = {"dispatch": 0, "combine": 0}
        for r in self.trace.records:
            out[r.phase] += r.size_bytes
        return out

    @cached_property
    def inter_node_bytes(self) -> int:
        """Bytes of messages whose src and dst are in different nodes (``gpus_per_node`` blocks)."""
        n = self.config.gpus_per_node
        return sum(r.size_bytes for r in self.trace.records if r.src // n != r.dst // n)

    def summary(self) -> dict:
        c = self.config
        imb = self.imbalances
        return {
            "model": c.model, "gpus": c.gpus, "ep_size": c.ep_size, "groups": c.groups,
            "layers": c.layers, "microbatches": c.microbatches, "tokens_per_gpu": c.tokens_per_gpu,
            "experts": c.experts, "top_k": c.top_k, "max_nodes_per_token": c.max_nodes_per_token,
            "messages": len(self.trace), "bytes": sum(self.bytes_by_phase.values()),
            "dispatch_bytes": self.bytes_by_phase["dispatch"], "combine_bytes": self.bytes_by_phase["combine"],
            "zipf_s": self.zipf_s,
            "imbalance_mean": float(np.mean(imb)) if imb else 0.0,
            "imbalance_max": float(np.max(imb)) if imb else 0.0,
            "max_nodes_seen": self.max_nodes_seen,
            "dispatch": c.dispatch, "passes": c.passes, "overlap": c.overlap,
            "inter_node_bytes": self.inter_node_bytes,
            "compute_ps_min": min(self.compute_ps, default=0), "compute_ps_max": max(self.compute_ps, default=0),
        }


def nodes_per_token(cfg: MoeTraceConfig, routing: np.ndarray, group: int = 0) -> np.ndarray:
    """Distinct nodes each token's experts live on."""
    node = np.sort(_expert_node(cfg, group)[routing], axis=1)
    return 1 + (np.diff(node, axis=1) != 0).sum(axis=1)


def dispatch_counts(cfg: MoeTraceConfig, routing: np.ndarray) -> np.ndarray:
    """``n[src, dst]`` (group-local GPUs): tokens of src with at least one expert on dst, dst != src."""
    g = cfg.ep_size
    t = routing.shape[0]
    hit = np.zeros((t, g), dtype=bool)
    hit[np.arange(t)[:, None], routing % g] = True
    n = hit.reshape(g, cfg.tokens_per_gpu, g).sum(axis=1)
    np.fill_diagonal(n, 0)
    return n


@dataclass
class _Plan:
    """Aggregated messages of one (layer, microbatch, EP group) all-to-all; group-local GPU ids.

    ``first[s, d]``: token copies on the leg leaving the sender s (flat: every dispatch message;
    hierarchical: direct intra-node messages and the scale-out copy to the rail-aligned relay d);
    ``scale_out[s, d]``: True where that leg is a hierarchical scale-out leg; ``forward[r, d]``: token
    copies relay r forwards over NVLink to d; ``load[d]``: token copies processed on d."""
    first: np.ndarray
    scale_out: np.ndarray
    forward: np.ndarray
    load: np.ndarray


def _plan(cfg: MoeTraceConfig, routing: np.ndarray) -> _Plan:
    g, tpg, gpn = cfg.ep_size, cfg.tokens_per_gpu, cfg.gpus_per_node
    t = routing.shape[0]
    hit = np.zeros((t, g), dtype=bool)
    hit[np.arange(t)[:, None], routing % g] = True
    full = hit.reshape(g, tpg, g).sum(axis=1)  # tokens of s with an expert on d (d == s included)
    flat = full.copy()
    np.fill_diagonal(flat, 0)
    load = np.bincount(routing.ravel() % g, minlength=g)
    if cfg.dispatch == "flat" or g <= gpn:  # flat, or the whole group inside one node: all direct
        return _Plan(flat, np.zeros((g, g), dtype=bool), np.zeros((g, g), dtype=np.int64), load)
    # hierarchical, groups of whole nodes (validated): group-local node d // gpn, rail (local index) d % gpn
    nn = g // gpn
    gpu = np.arange(g)
    node, lane = gpu // gpn, gpu % gpn
    same = node[:, None] == node[None, :]
    first = np.where(same, flat, 0)
    node_hit = hit.reshape(t, nn, gpn).any(axis=2)
    so = node_hit.reshape(g, tpg, nn).sum(axis=1)  # so[s, N]: tokens of s with an expert in node N
    so[gpu, node] = 0
    relay = np.arange(nn)[None, :] * gpn + lane[:, None]  # relay[s, N]: rail-aligned GPU of s in node N
    first[gpu[:, None].repeat(nn, axis=1), relay] += so
    scale_out = ~same & (first > 0)
    fw = np.zeros((g, g), dtype=np.int64)
    src, dst = np.nonzero(~same & (full > 0))
    r = node[dst] * gpn + lane[src]
    keep = r != dst
    np.add.at(fw, (r[keep], dst[keep]), full[src[keep], dst[keep]])
    return _Plan(first, scale_out, fw, load)


def _merge(*lists) -> tuple[int, ...]:
    out: list[int] = []
    for ids in lists:
        out.extend(ids)
    return tuple(out)


def generate_moe_trace(cfg: MoeTraceConfig) -> MoeTrace:
    """Generate the trace of ``cfg`` (deterministic for a given config and seed)."""
    s = _zipf_exponent(cfg)
    g = cfg.ep_size
    records: list[TraceRecord] = []
    out = MoeTrace(Trace(records, "<moe>"), cfg, s)
    steps = [(layer, False) for layer in range(cfg.layers)]
    if cfg.passes == "forward_backward":
        steps += [(layer, True) for layer in reversed(range(cfg.layers))]
    overlap = cfg.overlap == "a2a_1f1b"
    # per (microbatch, step): first-leg dispatch ids from each global GPU, and the latest final combine
    # ids into each global GPU (a GPU with none in a step keeps its earlier ones)
    disp_from: dict[tuple[int, int], dict[int, list[int]]] = {}
    comb_into: dict[tuple[int, int], dict[int, list[int]]] = {}
    last: dict[int, list[int]] = {}  # combines into each GPU of the previous step in generation order
    next_id = 0

    def add(src, dst, size, op, phase, layer, mb, deps, gap) -> int:
        nonlocal next_id
        records.append(TraceRecord(next_id, src, dst, size, op, phase, layer, mb, deps, gap, 0))
        next_id += 1
        return next_id - 1

    for mb in range(cfg.microbatches):
        plans: dict[tuple[int, int], _Plan] = {}
        for i, (layer, bwd) in enumerate(steps):
            w = None if bwd else popularity_weights(cfg, layer, s)
            tag = ".bwd" if bwd else ""
            op_d, op_c = f"moe.l{layer}.mb{mb}{tag}.dispatch", f"moe.l{layer}.mb{mb}{tag}.combine"
            bd = cfg.backward_dispatch_bytes_per_token if bwd else cfg.dispatch_bytes_per_token
            bc = cfg.backward_combine_bytes_per_token if bwd else cfg.combine_bytes_per_token
            # what the first legs from a GPU wait on
            if i > 0:
                own = comb_into[(mb, i - 1)]
            elif mb > 0 and not overlap:
                own = last
            else:
                own = {}
            prev_disp = disp_from.get((mb - 1, i), {}) if overlap else {}
            prev2_comb = comb_into.get((mb - 2, i), {}) if overlap else {}
            step_disp: dict[int, list[int]] = {}
            step_comb: dict[int, list[int]] = {}
            for group in range(cfg.groups):
                base = group * g
                if bwd:
                    plan = plans[(layer, group)]
                else:
                    routing = sample_routing(cfg, layer, mb, group, weights=w)
                    out.imbalances.append(imbalance_of(np.bincount(routing.ravel(), minlength=cfg.experts)))
                    out.max_nodes_seen = max(out.max_nodes_seen, int(nodes_per_token(cfg, routing, group).max()))
                    plan = plans[(layer, group)] = _plan(cfg, routing)
                comp = cfg.compute_ps(plan.load * (cfg.backward_compute_factor if bwd else 1.0))
                out.compute_ps.extend(int(x) for x in comp)
                into: dict[int, list[int]] = {d: [] for d in range(g)}      # every dispatch leg into d
                so_into: dict[int, list[int]] = {d: [] for d in range(g)}   # scale-out legs into a relay
                first_pairs = np.argwhere(plan.first > 0)
                for src, dst in first_pairs:
                    gs = base + int(src)
                    deps = _merge(own.get(gs, ()), prev_disp.get(gs, ()), prev2_comb.get(gs, ()))
                    k = add(gs, base + int(dst), int(plan.first[src, dst]) * bd, op_d, "dispatch", layer, mb,
                            deps, cfg.layer_gap_ps if deps else 0)
                    step_disp.setdefault(gs, []).append(k)
                    into[int(dst)].append(k)
                    if plan.scale_out[src, dst]:
                        so_into[int(dst)].append(k)
                fw_pairs = np.argwhere(plan.forward > 0)
                for r, dst in fw_pairs:
                    # the relay forwards over NVLink once the scale-out copies into it have arrived
                    k = add(base + int(r), base + int(dst), int(plan.forward[r, dst]) * bd, op_d, "dispatch",
                            layer, mb, tuple(so_into[int(r)]), 0)
                    into[int(dst)].append(k)
                gathers: dict[int, list[int]] = {d: [] for d in range(g)}
                for r, dst in fw_pairs:
                    # gather back to the relay after dst's expert compute
                    k = add(base + int(dst), base + int(r), int(plan.forward[r, dst]) * bc, op_c, "combine",
                            layer, mb, tuple(into[int(dst)]), int(comp[dst]))
                    gathers[int(r)].append(k)
                for src, dst in first_pairs:
                    n = int(plan.first[src, dst]) * bc
                    if plan.scale_out[src, dst] and gathers[int(dst)]:
                        deps, gap = tuple(gathers[int(dst)]), 0
                    else:
                        deps, gap = tuple(into[int(dst)]), int(comp[dst])
                    k = add(base + int(dst), base + int(src), n, op_c, "combine", layer, mb, deps, gap)
                    step_comb.setdefault(base + int(src), []).append(k)
            prev = comb_into.get((mb, i - 1), {}) if i > 0 else (last if not overlap else {})
            for gpu, ids in prev.items():
                step_comb.setdefault(gpu, ids)
            disp_from[(mb, i)] = step_disp
            comb_into[(mb, i)] = step_comb
            last = step_comb
    if not records:
        raise ConfigError("the configuration produces no messages (every token stays on its own GPU)",
                          field="ep_size")
    return out


def format_summary(d: dict, path) -> str:
    from ..units import format_size
    mn = "unlimited" if d["max_nodes_per_token"] is None else d["max_nodes_per_token"]
    return (f"{path}: {d['model']} MoE trace, {d['gpus']} GPUs in {d['groups']} EP group(s) of {d['ep_size']}, "
            f"{d['layers']} layer(s) x {d['microbatches']} microbatch(es), {d['tokens_per_gpu']} tokens per GPU, "
            f"top-{d['top_k']} of {d['experts']} experts, max nodes per token {mn} (seen {d['max_nodes_seen']}); "
            f"{d['messages']} messages, {d['bytes']} bytes ({format_size(d['bytes'])}; dispatch "
            f"{format_size(d['dispatch_bytes'])}, combine {format_size(d['combine_bytes'])}); "
            f"tokens-per-expert imbalance (max - mean) / mean {d['imbalance_mean']:.3f} mean, "
            f"{d['imbalance_max']:.3f} max (Zipf s = {d['zipf_s']:.3f}); expert compute gap "
            f"{d['compute_ps_min'] / 1e6:.2f}-{d['compute_ps_max'] / 1e6:.2f} us; {d['dispatch']} dispatch "
            f"({format_size(d['inter_node_bytes'])} between nodes), passes {d['passes']}, overlap {d['overlap']}.")
