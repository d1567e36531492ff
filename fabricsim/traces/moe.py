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


def generate_moe_trace(cfg: MoeTraceConfig) -> MoeTrace:
    """Generate the trace of ``cfg`` (deterministic for a given config and seed)."""
    s = _zipf_exponent(cfg)
    g = cfg.ep_size
    records: list[TraceRecord] = []
    out = MoeTrace(Trace(records, "<moe>"), cfg, s)
    # combine message ids into each global GPU of the previous (layer, microbatch) step
    pending: dict[int, list[int]] = {}
    next_id = 0
    for mb in range(cfg.microbatches):
        for layer in range(cfg.layers):
            w = popularity_weights(cfg, layer, s)
            op_d, op_c = f"moe.l{layer}.mb{mb}.dispatch", f"moe.l{layer}.mb{mb}.combine"
            step_combines: dict[int, list[int]] = {}
            for group in range(cfg.groups):
                base = group * g
                routing = sample_routing(cfg, layer, mb, group, weights=w)
                out.imbalances.append(imbalance_of(np.bincount(routing.ravel(), minlength=cfg.experts)))
                out.max_nodes_seen = max(out.max_nodes_seen, int(nodes_per_token(cfg, routing, group).max()))
                n = dispatch_counts(cfg, routing)
                load = np.bincount(routing.ravel() % g, minlength=g)  # token copies processed per GPU
                comp = cfg.compute_ps(load)
                out.compute_ps.extend(int(x) for x in comp)
                into: dict[int, list[int]] = {d: [] for d in range(g)}
                pairs = np.argwhere(n > 0)
                for src, dst in pairs:
                    deps = tuple(pending.get(base + int(src), ()))
                    records.append(TraceRecord(next_id, base + int(src), base + int(dst),
                                               int(n[src, dst]) * cfg.dispatch_bytes_per_token, op_d, "dispatch",
                                               layer, mb, deps, cfg.layer_gap_ps if deps else 0, 0))
                    into[int(dst)].append(next_id)
                    next_id += 1
                for src, dst in pairs:
                    # combine dst -> src after dst's expert compute, which waits for all dispatch into dst
                    records.append(TraceRecord(next_id, base + int(dst), base + int(src),
                                               int(n[src, dst]) * cfg.combine_bytes_per_token, op_c, "combine",
                                               layer, mb, tuple(into[int(dst)]), int(comp[dst]), 0))
                    step_combines.setdefault(base + int(src), []).append(next_id)
                    next_id += 1
            # a GPU none of whose tokens left it keeps waiting on its earlier combines
            for gpu, ids in pending.items():
                step_combines.setdefault(gpu, ids)
            pending = step_combines
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
            f"{d['compute_ps_min'] / 1e6:.2f}-{d['compute_ps_max'] / 1e6:.2f} us.")
