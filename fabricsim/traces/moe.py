"""MoE all-to-all trace generator (``fabricsim trace moe``; documented in docs/traces.md).

Per (layer, microbatch) and expert-parallel (EP) group, every token of every GPU is routed to
``top_k`` distinct experts (seeded, vectorised Gumbel-top-k on log-popularity, optionally
DeepSeek-style node-limited), then:

* dispatch: one message per (src, dst) GPU pair with ``n > 0`` token copies, ``n x
  dispatch_bytes_per_token``; a token is sent once per destination GPU however many of its experts
  live there (``copies: per_gpu``, DeepEP normal kernels) or once per (token, expert) pair
  (``per_expert``, DeepEP low-latency kernels), and nothing is sent for experts on the sender's own
  GPU;
* combine: the reverse message ``dst -> src`` of ``n x combine_bytes_per_token``, depending on every
  dispatch message into ``dst`` of the same layer / microbatch, with the expert compute time of
  ``dst`` as its gap (token copies processed on dst x FLOPs per copy / effective GPU FLOP/s);
* the next layer's dispatch from GPU g depends on every combine into g of the previous layer (same
  microbatch); microbatch mb + 1 starts on g after microbatch mb's last layer has returned to g.

Each sender's messages of a leg are listed in the order it issues them (``send_order``: staggered
by rank offset as NCCL and DeepEP do, random, or ascending), every message is ``collective:
all_to_all`` on connection 0 (``connections: persistent``) or a fresh one.

Options (docs/traces.md spells out every dependency): ``dispatch: hierarchical`` sends a token once
per remote node over the scale-out network to the rail-aligned GPU, which forwards it over NVLink,
chunk by chunk as it arrives (``forward_chunk_bytes``; 0: after the whole leg) (combine mirrored:
gather to the relay, one scale-out copy back); ``passes: forward_backward``
appends the layers in reverse with the same routing (gradients); ``overlap: a2a_1f1b`` lets
microbatch mb + 1's step run while mb's experts compute (two microbatches in flight).

Values marked [EST] in the field descriptions are estimates, not measured figures.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal, Optional

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

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
    popularity: Literal["uniform", "zipf", "imbalance", "rank_imbalance"] = Field(
        "uniform", description="expert popularity: uniform, Zipf(zipf_s), or tuned to a target per-expert "
        "imbalance or per-rank imbalance")
    zipf_s: float = Field(1.0, ge=0, allow_inf_nan=False, description="Zipf exponent (popularity: zipf)")
    imbalance: Optional[float] = Field(
        None, ge=0, description="target (max - mean) / mean of tokens per expert (popularity: imbalance)")
    rank_imbalance: Optional[float] = Field(
        None, ge=0, description="target max / mean - 1 of token copies received per rank (its own tokens included), "
        "per EP group and layer (popularity: rank_imbalance)")
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
    send_order: Literal["staggered", "random", "ascending"] = Field(
        "staggered", description="order of each sender's messages of a leg: staggered (peer (rank + i) mod n at "
        "step i: NCCL p2p schedule, DeepEP internode RDMA sender), random (seeded), ascending (destination id)")
    copies: Literal["per_gpu", "per_expert"] = Field(
        "per_gpu", description="per_gpu: one copy per (token, destination GPU) (DeepEP normal kernels); "
        "per_expert: one per (token, expert) pair, own-GPU experts off the network (DeepEP low-latency kernels)")
    connections: Literal["persistent", "per_message"] = Field(
        "persistent", description="persistent: conn 0 on every message (one set of queue pairs per peer for the "
        "job, as DeepEP / NCCL); per_message: conn -1 (fresh queue pairs per message)")
    forward_chunk_bytes: int = Field(
        65536, description="hierarchical dispatch: scale-out legs are cut into chunks of this many bytes "
        "(whole tokens, at least one) and each NVLink forward chunk waits only for the scale-out chunks it "
        "carries [EST: 64 KiB = 8 FP8 DeepSeek-V3 tokens, DeepEP's RDMA chunk at EP 64]; 0: store and "
        "forward (a forward waits for every scale-out message into its relay)")
    chunks_in_flight: int = Field(
        2, ge=1, description="hierarchical, pipelined: chunks of one leg in flight at once; chunk j waits for "
        "chunk j - chunks_in_flight of its leg [EST]")

    @field_validator("forward_chunk_bytes", mode="before")
    @classmethod
    def _chunk_size(cls, v):
        from .. import units
        try:
            return units.parse_size(v)
        except ValueError:
            raise ValueError(f"got {v!r} (allowed: a size >= 0 such as 64KiB; 0 = store and forward)") from None

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
        if self.popularity == "rank_imbalance":
            if self.rank_imbalance is None:
                raise ValueError("rank_imbalance: required with popularity 'rank_imbalance'")
            if self.ep_size < 2:
                raise ValueError("rank_imbalance: needs ep_size >= 2 (one rank has no imbalance)")
            hi = self.rank_imbalance_limit
            if self.rank_imbalance >= hi:
                raise ValueError(f"rank_imbalance: got {self.rank_imbalance} (allowed: < {hi:g}, the ratio with "
                                 "every token copy on one rank)")
        if 0 < self.forward_chunk_bytes < self.dispatch_bytes_per_token:
            raise ValueError(f"forward_chunk_bytes: got {self.forward_chunk_bytes} B, less than one token copy "
                             f"(allowed: 0 for store and forward, or >= dispatch_bytes_per_token = "
                             f"{self.dispatch_bytes_per_token} B)")
        if self.copies == "per_expert" and self.dispatch == "hierarchical":
            raise ValueError("copies: per_expert (DeepEP low-latency kernels) sends every copy straight to its "
                             "GPU and does not forward over NVLink (allowed: copies per_gpu with dispatch "
                             "hierarchical, or dispatch flat)")
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

    @property
    def rank_imbalance_limit(self) -> float:
        """Per-rank imbalance with every copy on one rank: received copies per rank are at most the
        group's tokens (per_gpu) or tokens x min(top_k, experts_per_gpu) (per_expert), and the mean is
        at least tokens x ceil(top_k / experts_per_gpu) / ep_size (per_gpu) or tokens x top_k / ep_size."""
        g, k, epg = self.ep_size, self.top_k, self.experts_per_gpu
        if self.copies == "per_expert":
            return g * min(k, epg) / k - 1
        return g / math.ceil(k / epg) - 1

    @property
    def chunk_tokens(self) -> int:
        """Tokens per scale-out chunk (hierarchical dispatch; 0 = one chunk per leg, store and forward)."""
        if self.forward_chunk_bytes == 0:
            return 0
        return self.forward_chunk_bytes // self.dispatch_bytes_per_token

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
        s = zipf_exponent(cfg, layer)
    w = 1.0 / (_zipf_ranks(cfg, layer) + 1.0) ** s
    return w / w.sum()


def _zipf_ranks(cfg: MoeTraceConfig, layer: int) -> np.ndarray:
    """Popularity rank (0 = most popular) of each expert in ``layer``: a seeded per-layer order."""
    return np.random.default_rng([cfg.seed, 7919, layer]).permutation(cfg.experts)


def zipf_exponent(cfg: MoeTraceConfig, layer: int = 0) -> float:
    """The Zipf exponent of ``layer``: 0 (uniform), ``zipf_s``, or tuned to the imbalance target
    (per-expert: one exponent for every layer; per-rank: tuned per layer, since which experts share a
    rank depends on the layer's popularity order)."""
    if cfg.popularity == "uniform":
        return 0.0
    if cfg.popularity == "zipf":
        return cfg.zipf_s
    if cfg.popularity == "imbalance":
        return tune_zipf_for_imbalance(cfg)
    return tune_zipf_for_rank_imbalance(cfg, layer)


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
        if (counts == width).all():  # every node the same number of experts: a gather (same values)
            perm = np.empty(cfg.experts, dtype=np.int64)
            perm[node * width + slot] = np.arange(cfg.experts)
            neg = np.take(scores, perm, axis=1).reshape(t, n_nodes, width)
            np.negative(neg, out=neg)
        else:
            grid = np.full((t, n_nodes, width), -np.inf, dtype=scores.dtype)
            grid[:, node, slot] = scores
            neg = -grid
        # node affinity: sum of its top-r expert scores, r = top_k / M (DeepSeek: top-2 of 8 over 4 nodes)
        r = max(1, min(cfg.top_k // m, int(counts.min())))
        neg.partition(r - 1, axis=2)
        top_r = -neg[:, :, :r]
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
    np.clip(u, 1e-12, 1.0 - 1e-7, out=u)   # the same float32 operations as -log(-log(clip(u))), in place
    np.log(u, out=u)
    np.negative(u, out=u)
    np.log(u, out=u)
    return np.negative(u, out=u)


CHUNK = 8192  # tokens routed per vectorised step (bounds memory at CHUNK x experts floats)


def _gumbel_of_bits(bits: np.ndarray) -> np.ndarray:
    """The Gumbel noise :func:`_gumbel` makes of the 32-bit words ``bits`` of the bit generator: the
    same float32 uniforms as ``Generator.random(dtype=float32)`` (``(word >> 8) * 2**-24``, exact),
    then the same float32 operations (a new contiguous array)."""
    return _gumbel_of_v(bits >> np.uint32(8))


def _gumbel_of_v(v: np.ndarray) -> np.ndarray:
    """:func:`_gumbel_of_bits` of words whose 24 high bits are ``v`` (integers below 2**24)."""
    u = v.astype(np.float32)
    u *= np.float32(1.0 / 16777216.0)
    np.clip(u, 1e-12, 1.0 - 1e-7, out=u)
    np.log(u, out=u)
    np.negative(u, out=u)
    np.log(u, out=u)
    return np.negative(u, out=u)


_NON_RECORDS: list = []  # memo of _non_records() (a pure function of this numpy build)


def _non_records() -> np.ndarray:
    """The 24-bit uniform numerators ``v`` whose Gumbel noise is below that of some smaller ``v``.

    The float32 ``-log(-log(u))`` is monotone in ``u`` but for ulp-level exceptions of the log
    implementation (a few hundred values on AVX-512 numpy 2.4). Ordering tokens' experts by ``v``
    is ordering them by score except around these values, so :func:`_route_uniform` falls back to
    the exact path whenever one of them could decide a selection. Computed once per process, in
    blocks (the same contiguous float32 operations as the routing)."""
    if not _NON_RECORDS:
        out, run_max, step = [], -np.inf, 1 << 20
        for a in range(0, 1 << 24, step):
            g = _gumbel_of_v(np.arange(a, a + step, dtype=np.uint32))
            pm = np.maximum.accumulate(g)
            np.maximum(pm, run_max, out=pm)
            shifted = np.concatenate([[run_max], pm[:-1]]).astype(np.float32)
            out.append(a + np.flatnonzero(g < shifted))
            run_max = pm[-1]
        _NON_RECORDS.append(np.concatenate(out).astype(np.uint32))
    return _NON_RECORDS[0]


def _non_record_at(v: np.ndarray) -> np.ndarray:
    """Flat indices of the values of ``v`` (24-bit numerators, uint32) that are :func:`_non_records`."""
    nr = _non_records()
    if not nr.size:
        return np.zeros(0, dtype=np.int64)
    lo = nr[0]
    near = np.flatnonzero((v.ravel() - lo) <= (nr[-1] - lo))  # unsigned: one comparison for the range
    if near.size:
        table = np.zeros(int(nr[-1] - lo) + 1, dtype=bool)
        table[nr - lo] = True
        near = near[table[v.ravel()[near] - lo]]
    return near


def _uniform_layout(cfg: MoeTraceConfig, node: np.ndarray):
    """For :func:`_route_uniform`: ``(n_nodes, width, perm, node_limited, r)`` when every node holds
    the same number of experts (``perm[n * width + slot]``: the slot-th expert of node n, ascending
    ids), else None (the general path)."""
    n_nodes = int(node.max()) + 1
    m = cfg.max_nodes_per_token
    counts = np.bincount(node, minlength=n_nodes)
    limited = m is not None and m < n_nodes
    if not limited:
        return 1, cfg.experts, np.arange(cfg.experts), False, 0
    width = int(counts.max())
    if not (counts == width).all():
        return None
    r = max(1, min(cfg.top_k // m, int(counts.min())))
    if r > 2:  # a sum of more than two scores depends on the order partition leaves them in
        return None
    slot = np.zeros(cfg.experts, dtype=np.int64)
    for n in range(n_nodes):
        idx = np.flatnonzero(node == n)
        slot[idx] = np.arange(len(idx))
    perm = np.empty(cfg.experts, dtype=np.int64)
    perm[node * width + slot] = np.arange(cfg.experts)
    return n_nodes, width, perm, True, r


def _route_uniform(cfg: MoeTraceConfig, logw32: np.float32, bits: np.ndarray, node: np.ndarray,
                   layout) -> np.ndarray:
    """:func:`_route` of the noise of ``bits`` (:func:`_gumbel_of_bits`) when every expert has the
    same popularity ``logw32``: the same expert set for every token, without the noise of every
    expert. ``bits`` is overwritten.

    With equal weights a score is a non-decreasing function of the 24-bit uniform numerator ``v`` (but
    at :func:`_non_records`), so one row sort of integer keys ``(node, v, slot)`` orders every node's
    experts; the node scores and the final top-k boundary are then computed exactly on the few
    experts that decide them. A token is re-routed by :func:`_route` itself (same rows, same
    ``argpartition``) when a tie at a boundary or a non-record value could make the sets differ. The
    experts of a row come in no particular order (as from :func:`_route`)."""
    n_nodes, width, perm, limited, r = layout
    t, k, E = bits.shape[0], cfg.top_k, cfg.experts
    nb = (n_nodes - 1).bit_length()
    sb = (width - 1).bit_length()
    wide = nb + 24 + sb > 32
    if not wide:
        sb = 32 - 24 - nb  # the slot takes every bit left: a key is then exactly 32 bits
    kt = np.uint64 if wide else np.uint32
    kbits = 64 if wide else 32
    # key = node << (24 + sb) | v << sb | slot; sorted, node n holds positions n * width ..
    e_node = np.zeros(E, dtype=np.int64)
    e_node[perm] = np.arange(E) // width
    e_slot = np.zeros(E, dtype=np.int64)
    e_slot[perm] = np.arange(E) % width
    base = ((e_node << (24 + sb)) | e_slot).astype(kt)
    if wide:
        key = (bits >> np.uint32(8)).astype(np.uint64) << np.uint64(sb)
    else:
        key = bits  # in place: (word >> 8) << sb, as the word's 24 high bits moved down by 8 - sb
        np.right_shift(key, np.uint32(8 - sb), out=key)
        np.bitwise_and(key, np.uint32(~((1 << sb) - 1) & 0xFFFFFFFF), out=key)
    np.bitwise_or(key, base, out=key)
    key.sort(axis=1)
    vmask = kt((1 << 24) - 1)
    q = min(width, k + 1)
    bad_at = []  # flat indices (token-major) of deciding values that are not records, per check
    if limited:
        m = cfg.max_nodes_per_token
        key3 = key.reshape(t, n_nodes, width)
        top_v = (key3[:, :, width - r:] >> kt(sb)) & vmask  # the r best of every node
        if wide:
            top_v = top_v.astype(np.uint32)
        bad_at.append(_non_record_at(top_v) // (n_nodes * r))
        top_s = _gumbel_of_v(top_v) + logw32
        node_score = top_s[:, :, 0] + top_s[:, :, 1] if r == 2 else top_s[:, :, 0]  # == .sum(axis=2), r <= 2
        chosen = np.argpartition(-node_score, m - 1, axis=1)[:, :m]
        rows = (np.arange(0, t * n_nodes, n_nodes)[:, None] + chosen).ravel()
        cand = np.take(key.reshape(t * n_nodes, width), rows, axis=0)[:, width - q:]  # the q best of each chosen
    else:
        m = 1
        cand = key[:, width - q:]
    # candidates by v: the key rotated left by the node bits, v << (nb + sb) | slot << nb | node (unique)
    if wide:
        ck = (((cand >> kt(sb)) & vmask) << kt(nb + sb)) | ((cand & kt((1 << sb) - 1)) << kt(nb)) | \
            (cand >> kt(24 + sb))
    else:
        ck = (cand << kt(nb)) | (cand >> kt(kbits - nb)) if nb else cand.copy()
    ck = ck.reshape(t, m * q)
    ck.sort(axis=1)
    sel = ck[:, m * q - k:]
    bad = np.zeros(t, dtype=bool)
    if m * q > k:
        # every expert taken must score strictly above the best one left out (v_out): true when the
        # taken are records (their lowest score is that of the lowest v, v_in), v_out is a record and
        # s(v_out) < s(v_in)
        v_in = (ck[:, m * q - k] >> kt(nb + sb)).astype(np.uint32)
        v_out = (ck[:, m * q - k - 1] >> kt(nb + sb)).astype(np.uint32)
        s_in = _gumbel_of_v(v_in) + logw32
        s_out = _gumbel_of_v(v_out) + logw32
        bad |= s_out >= s_in
        bad_at.append(_non_record_at(v_out))
        bad_at.append(_non_record_at((sel >> kt(nb + sb)).astype(np.uint32)) // k)
    for rows in bad_at:
        bad[rows] = True
    low = sel & kt((1 << (nb + sb)) - 1)  # slot << nb | node
    out = perm[((low & kt((1 << nb) - 1)) * kt(width) + (low >> kt(nb))).astype(np.int64)]
    if bad.any():
        rows = np.flatnonzero(bad)
        kb = key[rows]  # the original words' 24 high bits, back in expert order
        orig = np.zeros((rows.size, E), dtype=np.uint32)
        e = perm[((kb >> kt(24 + sb)) * kt(width) + (kb & kt((1 << sb) - 1))).astype(np.int64)]
        np.put_along_axis(orig, e, (((kb >> kt(sb)) & vmask) << kt(8)).astype(np.uint32), axis=1)
        out[rows] = _route(cfg, np.full(E, logw32, dtype=np.float32), _gumbel_of_bits(orig), node)
    return out


def sample_routing(cfg: MoeTraceConfig, layer: int, microbatch: int, group: int,
                   weights: np.ndarray | None = None) -> np.ndarray:
    """Experts (group-local ids) chosen by every token of one EP group: shape
    ``(ep_size * tokens_per_gpu, top_k)``; token t comes from group-local GPU ``t // tokens_per_gpu``.
    A row is a set of distinct experts, in no particular order.

    The noise is drawn from the bit generator's raw 64-bit words (two float32 uniforms each, the
    words ``Generator.random(dtype=float32)`` would use, so the same values); with uniform popularity
    :func:`_route_uniform` picks the same experts as :func:`_route` without computing every score."""
    if weights is None:
        weights = popularity_weights(cfg, layer)
    logw = np.log(weights)
    node = _expert_node(cfg, group)
    rng = np.random.default_rng([cfg.seed, layer, microbatch, group])
    total = cfg.ep_size * cfg.tokens_per_gpu
    out = np.empty((total, cfg.top_k), dtype=np.int64)
    logw32 = logw.astype(np.float32)
    layout = _uniform_layout(cfg, node) if (logw32 == logw32[0]).all() and cfg.top_k < cfg.experts else None
    raw = sys.byteorder == "little"  # a raw word holds the next two uint32 draws, low half first
    for a in range(0, total, CHUNK):
        b = min(total, a + CHUNK)
        n = (b - a) * cfg.experts
        raw = raw and n % 2 == 0  # an odd count leaves half a word in the generator for the next draw
        if not raw:
            out[a:b] = _route(cfg, logw, _gumbel(rng, (b - a, cfg.experts)), node)
            continue
        bits = rng.bit_generator.random_raw(n // 2).view(np.uint32).reshape(b - a, cfg.experts)
        if layout is not None:
            out[a:b] = _route_uniform(cfg, logw32[0], bits, node, layout)
        else:
            out[a:b] = _route(cfg, logw, _gumbel_of_bits(bits), node)
    return out


def imbalance_of(counts) -> float:
    """(max - mean) / mean of ``counts`` (tokens per expert, copies received per rank, ...)."""
    counts = np.asarray(counts, dtype=np.float64)
    mean = counts.mean()
    return float((counts.max() - mean) / mean) if mean > 0 else 0.0


def rank_receive_counts(cfg: MoeTraceConfig, routing: np.ndarray, dests=None) -> np.ndarray:
    """Token copies each group-local rank receives for its experts, its own tokens included: per
    ``copies: per_gpu`` the tokens with at least one expert on the rank, per ``per_expert`` the
    (token, expert) pairs on it. ``dests``: :func:`_dest_gpus` of ``routing`` if already known."""
    gs, first = _dest_gpus(cfg, routing) if dests is None else dests
    return np.bincount(gs.ravel() if cfg.copies == "per_expert" else gs[first], minlength=cfg.ep_size)


def _dest_gpus(cfg: MoeTraceConfig, routing: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The group-local GPUs of every token's experts, sorted per token ``(T, top_k)``, and whether each
    is the first of its GPU in its row (so the ``True`` ones are a token's distinct GPUs)."""
    gs = np.take(_expert_gpu(cfg), routing)  # == routing % ep_size, without an integer division each
    gs.sort(axis=1)
    first = np.ones(gs.shape, dtype=bool)
    first[:, 1:] = gs[:, 1:] != gs[:, :-1]
    return gs, first


def _copies(cfg: MoeTraceConfig, routing: np.ndarray, dests=None) -> np.ndarray:
    """``full[s, d]``: copies of sender s's tokens for GPU d, d == s included (``_hits`` summed over
    each sender's tokens, without the dense token x GPU matrix)."""
    g = cfg.ep_size
    gs, first = _dest_gpus(cfg, routing) if dests is None else dests
    idx = (np.arange(gs.shape[0]) // cfg.tokens_per_gpu * g)[:, None] + gs
    idx = idx.ravel() if cfg.copies == "per_expert" else idx[first]
    return np.bincount(idx, minlength=g * g).reshape(g, g)


def _tune_zipf(cfg: MoeTraceConfig, key: tuple, target: float, layer: int, measure, what: str,
               n_tok: int) -> float:
    """Bisection for the Zipf exponent whose routing gives ``measure(routing) == target``, on a seeded
    Monte Carlo of ``n_tok`` routed tokens with common random numbers, the experts ranked in
    ``layer``'s popularity order. ``what`` names the target field in errors."""
    key = (cfg.experts, cfg.top_k, cfg.ep_size, cfg.gpus_per_node, cfg.max_nodes_per_token, cfg.seed) + key
    if key in _TUNED:
        return _TUNED[key]
    noise = _gumbel(np.random.default_rng([cfg.seed, 104729]), (n_tok, cfg.experts))
    node = _expert_node(cfg, 0)
    log_rank = np.log(_zipf_ranks(cfg, layer) + 1.0)

    def f(s):
        return measure(_route(cfg, -s * log_rank, noise, node))

    lo, hi = 0.0, 1.0
    if f(lo) >= target:
        _TUNED[key] = 0.0
        return 0.0
    while f(hi) < target:
        lo, hi = hi, hi * 2
        if hi > 64:
            raise ConfigError(f"got {target}: not reachable with Zipf popularity (allowed: below about "
                              f"{f(64.0):.3g}, the ratio at Zipf s = 64)", field=what)
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


def tune_zipf_for_imbalance(cfg: MoeTraceConfig) -> float:
    """The Zipf exponent whose routing gives the tokens-per-expert ratio ``cfg.imbalance`` (about 2,000
    tokens per expert on average in the Monte Carlo)."""
    n_tok = int(min(max(4096, math.ceil(2000 * cfg.experts / cfg.top_k)), 65536))
    return _tune_zipf(cfg, ("expert", cfg.imbalance), float(cfg.imbalance), 0,
                      lambda r: imbalance_of(np.bincount(r.ravel(), minlength=cfg.experts)), "imbalance", n_tok)


def tune_zipf_for_rank_imbalance(cfg: MoeTraceConfig, layer: int) -> float:
    """The Zipf exponent of ``layer`` whose routing gives the per-rank ratio ``cfg.rank_imbalance``
    (max / mean - 1 of :func:`rank_receive_counts`). The Monte Carlo routes 65,536 tokens: the max
    over ranks is sensitive to which rank leads, so it needs more tokens than the per-expert figure."""
    return _tune_zipf(cfg, ("rank", cfg.copies, layer, cfg.rank_imbalance), float(cfg.rank_imbalance), layer,
                      lambda r: imbalance_of(rank_receive_counts(cfg, r)), "rank_imbalance", 65536)


# --------------------------------------------------------------------------- trace

@dataclass
class MoeTrace:
    trace: Trace
    config: MoeTraceConfig
    #: Zipf exponent of each layer (one value for every layer unless tuned per layer: rank_imbalance)
    zipf_s_per_layer: list[float]
    #: per (layer, microbatch, group): (max - mean) / mean of tokens per expert
    imbalances: list[float] = field(default_factory=list)
    #: per (layer, microbatch, group): max / mean - 1 of token copies received per rank (its own included)
    rank_imbalances: list[float] = field(default_factory=list)
    max_nodes_seen: int = 0
    compute_ps: list[int] = field(default_factory=list)

    @property
    def zipf_s(self) -> float:
        """Mean Zipf exponent over the layers."""
        return float(np.mean(self.zipf_s_per_layer))

    @cached_property
    def bytes_by_phase(self) -> dict[str, int]:
        cols, _, _ = self.trace.columns()
        size = cols["size_bytes"]
        return {ph: int(size[cols["phase"] == ph].sum()) for ph in ("dispatch", "combine")}

    @cached_property
    def inter_node_bytes(self) -> int:
        """Bytes of messages whose src and dst are in different nodes (``gpus_per_node`` blocks)."""
        n = self.config.gpus_per_node
        cols, _, _ = self.trace.columns()
        return int(cols["size_bytes"][cols["src"] // n != cols["dst"] // n].sum())

    def summary(self) -> dict:
        c = self.config
        imb, rimb = self.imbalances, self.rank_imbalances
        return {
            "model": c.model, "gpus": c.gpus, "ep_size": c.ep_size, "groups": c.groups,
            "layers": c.layers, "microbatches": c.microbatches, "tokens_per_gpu": c.tokens_per_gpu,
            "experts": c.experts, "top_k": c.top_k, "max_nodes_per_token": c.max_nodes_per_token,
            "messages": len(self.trace), "bytes": sum(self.bytes_by_phase.values()),
            "dispatch_bytes": self.bytes_by_phase["dispatch"], "combine_bytes": self.bytes_by_phase["combine"],
            "zipf_s": self.zipf_s, "zipf_s_min": min(self.zipf_s_per_layer), "zipf_s_max": max(self.zipf_s_per_layer),
            "imbalance_mean": float(np.mean(imb)) if imb else 0.0,
            "imbalance_max": float(np.max(imb)) if imb else 0.0,
            "rank_imbalance_mean": float(np.mean(rimb)) if rimb else 0.0,
            "rank_imbalance_max": float(np.max(rimb)) if rimb else 0.0,
            "max_nodes_seen": self.max_nodes_seen,
            "dispatch": c.dispatch, "passes": c.passes, "overlap": c.overlap,
            "send_order": c.send_order, "copies": c.copies, "connections": c.connections,
            "forward_chunk_bytes": c.forward_chunk_bytes,
            "inter_node_bytes": self.inter_node_bytes,
            "compute_ps_min": min(self.compute_ps, default=0), "compute_ps_max": max(self.compute_ps, default=0),
        }


def nodes_per_token(cfg: MoeTraceConfig, routing: np.ndarray, group: int = 0, dests=None) -> np.ndarray:
    """Distinct nodes each token's experts live on. ``dests``: :func:`_dest_gpus` of ``routing``."""
    gs, _ = _dest_gpus(cfg, routing) if dests is None else dests
    gpu = group * cfg.ep_size + np.arange(cfg.ep_size)
    node = np.take((gpu // cfg.gpus_per_node).astype(np.int32), gs)  # sorted per row: a node grows with its GPUs
    out = np.ones(len(node), dtype=np.int64)
    for j in range(1, node.shape[1]):  # column by column: a sum over a short last axis is slow
        out += node[:, j] != node[:, j - 1]
    return out


def _hits(cfg: MoeTraceConfig, routing: np.ndarray) -> np.ndarray:
    """``h[t, d]``: copies of token t for group-local GPU d: 0/1 per ``copies: per_gpu`` (a token is
    sent once per GPU however many of its experts live there), the number of its experts on d per
    ``per_expert``. int16 (sums accumulate in the platform integer)."""
    t, g = routing.shape[0], cfg.ep_size
    h = np.zeros((t, g), dtype=np.int16)
    rows = np.arange(t)[:, None].repeat(routing.shape[1], axis=1)
    if cfg.copies == "per_expert":
        np.add.at(h, (rows, routing % g), 1)
    else:
        h[rows, routing % g] = 1
    return h


def dispatch_counts(cfg: MoeTraceConfig, routing: np.ndarray) -> np.ndarray:
    """``n[src, dst]`` (group-local GPUs): token copies src sends to dst (flat dispatch), dst != src."""
    n = _copies(cfg, routing)
    np.fill_diagonal(n, 0)
    return n


@dataclass
class _Plan:
    """Aggregated messages of one (layer, microbatch, EP group) all-to-all; group-local GPU ids.

    ``first`` (``legs``: the same as an int64 array ``(n, 5)``, scale_out 0/1): legs leaving the
    senders, ``(s, d, copies, chunk, scale_out)`` (flat: every dispatch
    message; hierarchical: direct intra-node messages, and chunk ``chunk`` of the scale-out copies
    from s to its rail-aligned relay d); ``forward``: ``(r, d, copies, chunk, senders)``, chunk
    ``chunk`` of what relay r forwards over NVLink to d, carrying chunk ``chunk`` of the scale-out legs
    from ``senders``; ``load[d]``: token copies processed on d; ``pipelined``: forwards wait only for
    the chunks they carry (otherwise for every scale-out leg into the relay)."""
    legs: np.ndarray
    forward: list
    load: np.ndarray
    pipelined: bool = False

    @classmethod
    def of_first(cls, first: list, forward: list, load: np.ndarray, pipelined: bool = False) -> "_Plan":
        legs = np.array([x[:4] + (int(x[4]),) for x in first], dtype=np.int64).reshape(-1, 5)
        return cls(legs, forward, load, pipelined)

    @cached_property
    def first(self) -> list:
        return [(a, b, n, j, bool(so)) for a, b, n, j, so in self.legs.tolist()]

    @property
    def direct_only(self) -> bool:
        """Every message is a direct first leg (flat dispatch): no forwards, no scale-out legs."""
        return not self.forward and not self.legs[:, 4].any()


def _unique_rows(cols: list) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(np.stack(cols, axis=1), axis=0, return_counts=True)`` for non-negative integer
    columns, by one int64 key per row (mixed radix, order preserving): a 1-d sort instead of a
    sort of row records."""
    cols = [np.asarray(c, dtype=np.int64) for c in cols]
    if not cols[0].size:
        return np.zeros((0, len(cols)), dtype=np.int64), np.zeros(0, dtype=np.int64)
    radix = [int(c.max()) + 1 for c in cols]
    key = np.zeros(cols[0].shape, dtype=np.int64)
    for c, r in zip(cols, radix):
        key *= r
        key += c
    uk, counts = np.unique(key, return_counts=True)
    out = np.empty((len(uk), len(cols)), dtype=np.int64)
    for i in range(len(cols) - 1, -1, -1):
        out[:, i] = uk % radix[i]
        uk //= radix[i]
    return out, counts


def _plan(cfg: MoeTraceConfig, routing: np.ndarray, dests=None, full=None) -> _Plan:
    """The messages of one routing (``dests``: its :func:`_dest_gpus`, ``full``: its :func:`_copies`,
    if already known)."""
    g, tpg, gpn = cfg.ep_size, cfg.tokens_per_gpu, cfg.gpus_per_node
    t = routing.shape[0]
    if dests is None:
        dests = _dest_gpus(cfg, routing)
    if full is None:
        full = _copies(cfg, routing, dests)  # copies of s's tokens for d (d == s included)
    load = np.bincount(dests[0].ravel(), minlength=g)
    if cfg.dispatch == "flat" or g <= gpn:  # flat, or the whole group inside one node: all direct
        flat = full.copy()
        np.fill_diagonal(flat, 0)
        a, b = np.nonzero(flat)
        legs = np.stack([a, b, flat[a, b], np.zeros_like(a), np.zeros_like(a)], axis=1)
        return _Plan(legs, [], load)
    hit = _hits(cfg, routing)
    # hierarchical, groups of whole nodes (validated): group-local node d // gpn, rail (local index) d % gpn
    nn = g // gpn
    gpu = np.arange(g)
    node, lane = gpu // gpn, gpu % gpn
    sender = np.arange(t) // tpg
    first = [(int(a), int(b), int(full[a, b]), 0, False)
             for a, b in np.argwhere((node[:, None] == node[None, :]) & (full > 0)) if a != b]
    # scale-out: token t of sender s goes once to node N != node(s) if one of its experts is there;
    # its position among s's tokens for N gives its chunk
    so_hit = hit.reshape(t, nn, gpn).any(axis=2)
    so_hit[np.arange(t), node[sender]] = False
    c = cfg.chunk_tokens or tpg
    chunk = (np.cumsum(so_hit.reshape(g, tpg, nn), axis=1).reshape(t, nn) - 1) // c
    tok, nd = np.nonzero(so_hit)
    s_of, j_of = sender[tok], chunk[tok, nd]
    legs, n_legs = _unique_rows([s_of, nd, j_of])
    first += [(int(s_), int(n_) * gpn + int(lane[s_]), int(k), int(j_), True) for (s_, n_, j_), k in zip(legs, n_legs)]
    # forwards: copies of token t for GPU d in a remote node, other than the relay itself
    tok, d = np.nonzero(hit)
    s_of = sender[tok]
    relay = node[d] * gpn + lane[s_of]
    keep = (node[d] != node[s_of]) & (relay != d)
    tok, d, s_of, relay = tok[keep], d[keep], s_of[keep], relay[keep]
    j_of = chunk[tok, node[d]]
    keys, n_fw = _unique_rows([relay, d, j_of, s_of])
    forward: dict[tuple[int, int, int], list] = {}
    for (r_, d_, j_, s_), k in zip(keys.tolist(), n_fw.tolist()):
        entry = forward.setdefault((r_, d_, j_), [0, []])
        entry[0] += k
        entry[1].append(s_)
    fw = [(r_, d_, k, j_, tuple(srcs)) for (r_, d_, j_), (k, srcs) in forward.items()]
    return _Plan.of_first(first, fw, load, pipelined=cfg.chunk_tokens > 0)


def _merge(*lists) -> tuple[int, ...]:
    out: list[int] = []
    for ids in lists:
        out.extend(ids)
    return tuple(out)


#: send-order streams per leg kind (random order)
_LEGS = {"first": 0, "forward": 1, "gather": 2, "combine": 3}


def send_order(cfg: MoeTraceConfig, legs: list, kind: str, stream: tuple) -> list:
    """``legs`` (tuples starting ``(sender, receiver, copies, chunk)``, group-local ids) in the order
    their senders issue them: by sender, then chunk, then the order of ``cfg.send_order``:

    * ``staggered``: receiver ``(sender + i) mod ep_size`` at step i, so at every step the senders of
      a group hit distinct receivers (NCCL's p2p schedule; DeepEP's internode RDMA sender);
    * ``random``: a seeded random order per sender (``stream`` and ``kind`` pick the stream);
    * ``ascending``: receiver id (every sender starts at the same receiver: a rolling incast).

    A NIC serves its queue pairs round robin in the order messages are released, and messages
    released together are released in trace order, so this order is the order on the wire."""
    if not legs:
        return []
    a, b, j = (np.fromiter((x[i] for x in legs), dtype=np.int64, count=len(legs)) for i in (0, 1, 3))
    return [legs[i] for i in send_order_index(cfg, a, b, j, kind, stream).tolist()]


def send_order_index(cfg: MoeTraceConfig, a: np.ndarray, b: np.ndarray, chunk: np.ndarray, kind: str,
                     stream: tuple) -> np.ndarray:
    """The permutation :func:`send_order` applies to legs with senders ``a``, receivers ``b`` and chunks
    ``chunk`` (arrays): by sender, chunk, then the rank of ``cfg.send_order``; a stable sort, as
    ``sorted`` (legs with equal keys keep their order)."""
    g = cfg.ep_size
    if cfg.send_order == "random":
        rank = np.random.default_rng([cfg.seed, 5381, *stream, _LEGS[kind]]).random((g, g))[a, b]
    elif cfg.send_order == "ascending":
        rank = b
    else:
        rank = (b - a) % g
    return np.lexsort((rank, chunk, a))


def generate_moe_trace(cfg: MoeTraceConfig) -> MoeTrace:
    """Generate the trace of ``cfg`` (deterministic for a given config and seed)."""
    zipf = [zipf_exponent(cfg, layer) for layer in range(cfg.layers)]
    g = cfg.ep_size
    cols = _Columns()
    op_names: list[str] = []
    op_index: dict[str, int] = {}
    out = MoeTrace(None, cfg, zipf)
    steps = [(layer, False) for layer in range(cfg.layers)]
    if cfg.passes == "forward_backward":
        steps += [(layer, True) for layer in reversed(range(cfg.layers))]
    overlap = cfg.overlap == "a2a_1f1b"
    conn = 0 if cfg.connections == "persistent" else -1
    win = cfg.chunks_in_flight
    # per (microbatch, step): first-leg dispatch ids from each global GPU, and the latest final combine
    # ids into each global GPU (a GPU with none in a step keeps its earlier ones)
    disp_from: dict[tuple[int, int], dict[int, list[int]]] = {}
    comb_into: dict[tuple[int, int], dict[int, list[int]]] = {}
    last: dict[int, list[int]] = {}  # combines into each GPU of the previous step in generation order
    add = cols.add

    def op_id(name: str) -> int:
        if name not in op_index:
            op_index[name] = len(op_names)
            op_names.append(name)
        return op_index[name]

    for mb in range(cfg.microbatches):
        plans: dict[tuple[int, int], _Plan] = {}
        for i, (layer, bwd) in enumerate(steps):
            w = None if bwd else popularity_weights(cfg, layer, zipf[layer])
            tag = ".bwd" if bwd else ""
            op_d, op_c = op_id(f"moe.l{layer}.mb{mb}{tag}.dispatch"), op_id(f"moe.l{layer}.mb{mb}{tag}.combine")
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
                stream = (mb, i, group)
                if bwd:
                    plan = plans[(layer, group)]
                else:
                    routing = sample_routing(cfg, layer, mb, group, weights=w)
                    dests = _dest_gpus(cfg, routing)
                    full = _copies(cfg, routing, dests)
                    out.imbalances.append(imbalance_of(np.bincount(routing.ravel(), minlength=cfg.experts)))
                    out.rank_imbalances.append(imbalance_of(full.sum(axis=0)))  # == rank_receive_counts
                    out.max_nodes_seen = max(out.max_nodes_seen,
                                             int(nodes_per_token(cfg, routing, group, dests).max()))
                    plan = plans[(layer, group)] = _plan(cfg, routing, dests, full)
                comp = cfg.compute_ps(plan.load * (cfg.backward_compute_factor if bwd else 1.0))
                out.compute_ps.extend(int(x) for x in comp)
                if plan.direct_only:
                    _direct_group(cols, cfg, plan, comp, base, stream, (own, prev_disp, prev2_comb),
                                  (op_d, op_c, layer, mb, bd, bc), step_disp, step_comb)
                    continue
                into: dict[int, list[int]] = {d: [] for d in range(g)}      # every dispatch leg into d
                so_into: dict[int, list[int]] = {d: [] for d in range(g)}   # scale-out legs into a relay
                so_id: dict[tuple[int, int, int], int] = {}                 # (sender, relay, chunk) -> id
                first = send_order(cfg, plan.first, "first", stream)
                for src, dst, n, j, so in first:
                    gs = base + src
                    if j >= win:  # chunk j leaves when chunk j - win of its leg is in
                        deps, gap = ((so_id[(src, dst, j - win)],),), 0
                    else:
                        deps = (own.get(gs, ()), prev_disp.get(gs, ()), prev2_comb.get(gs, ()))
                        gap = cfg.layer_gap_ps if any(len(p_) for p_ in deps) else 0
                    k = add(gs, base + dst, n * bd, op_d, layer, mb, deps, gap)
                    step_disp.setdefault(gs, []).append(k)
                    into[dst].append(k)
                    if so:
                        so_into[dst].append(k)
                        so_id[(src, dst, j)] = k
                forward = send_order(cfg, plan.forward, "forward", stream)
                for r, dst, n, j, senders in forward:
                    # pipelined: the relay forwards chunk j once the scale-out chunks j it carries are in;
                    # store and forward: once every scale-out copy into it has arrived
                    deps = (tuple(so_id[(s_, r, j)] for s_ in senders),) if plan.pipelined else (so_into[r],)
                    into[dst].append(add(base + r, base + dst, n * bd, op_d, layer, mb, deps, 0))
                gathers: dict[int, list[int]] = {d: [] for d in range(g)}   # gathers into a relay
                gather_id: dict[tuple[int, int, int], int] = {}             # (relay, dst, chunk) -> id
                sent: dict[tuple[int, int], list[int]] = {}                  # (dst, relay) -> gathers, in order
                for r, dst, n, j, senders in send_order(cfg, [(d_, r_, n_, j_, ss) for r_, d_, n_, j_, ss in forward],
                                                         "gather", stream):
                    r, dst = dst, r  # sorted as (sender dst, receiver relay)
                    prior = sent.setdefault((dst, r), [])
                    if plan.pipelined and len(prior) >= win:
                        deps, gap = ((prior[-win],),), 0
                    else:  # back to the relay after dst's expert compute
                        deps, gap = (into[dst],), int(comp[dst])
                    k = add(base + dst, base + r, n * bc, op_c, layer, mb, deps, gap)
                    prior.append(k)
                    gathers[r].append(k)
                    gather_id[(r, dst, j)] = k
                carried: dict[tuple[int, int, int], list[int]] = {}          # (relay, sender, chunk) -> gathers
                if plan.pipelined:
                    for r, dst, n, j, senders in forward:
                        for s_ in senders:
                            carried.setdefault((r, s_, j), []).append(gather_id[(r, dst, j)])
                back: dict[tuple[int, int, int], int] = {}
                rev = [(d_, s_, n_, j_, so) for s_, d_, n_, j_, so in plan.first]
                for dst, src, n, j, so in send_order(cfg, rev, "combine", stream):
                    # dst returns results to src; scale-out legs back from a relay wait for the gathers
                    # they carry (pipelined) or for every gather into the relay
                    gath = carried.get((dst, src, j), []) if plan.pipelined else gathers[dst]
                    if so and gath:
                        chain = (back[(dst, src, j - win)],) if j >= win else ()
                        deps, gap = (gath, chain), 0
                    else:
                        # results computed on dst itself (direct legs, and scale-out chunks whose
                        # tokens have every expert on the relay): after dst's compute; the
                        # connection sends them in order
                        deps, gap = (into[dst],), int(comp[dst])
                    k = add(base + dst, base + src, n * bc, op_c, layer, mb, deps, gap)
                    if so:
                        back[(dst, src, j)] = k
                    step_comb.setdefault(base + src, []).append(k)
            prev = comb_into.get((mb, i - 1), {}) if i > 0 else (last if not overlap else {})
            for gpu, ids in prev.items():
                step_comb.setdefault(gpu, ids)
            disp_from[(mb, i)] = step_disp
            comb_into[(mb, i)] = step_comb
            last = step_comb
    if not cols.n:
        raise ConfigError("the configuration produces no messages (every token stays on its own GPU)",
                          field="ep_size")
    out.trace = cols.trace(op_names, conn)
    return out


def _direct_group(cols: "_Columns", cfg: MoeTraceConfig, plan: _Plan, comp: np.ndarray, base: int, stream: tuple,
                  waits: tuple, what: tuple, step_disp: dict, step_comb: dict) -> None:
    """The messages of one EP group whose plan has only direct legs (flat dispatch), by arrays: the
    same messages, ids, dependencies and order as the per-leg loop of :func:`generate_moe_trace`.

    ``waits``: ``(own, prev_disp, prev2_comb)``, what the first legs from a GPU wait on; ``what``:
    ``(op_d, op_c, layer, mb, dispatch bytes, combine bytes)``. Records each sender's dispatch ids in
    ``step_disp`` and the combine ids into each GPU in ``step_comb``."""
    op_d, op_c, layer, mb, bd, bc = what
    g = cfg.ep_size
    s0, d0, n0 = plan.legs[:, 0], plan.legs[:, 1], plan.legs[:, 2]
    zero = np.zeros(len(s0), dtype=np.int64)
    o = send_order_index(cfg, s0, d0, zero, "first", stream)
    s, d, n = s0[o], d0[o], n0[o]
    # what every sender's first legs wait on, and their gap
    slots_of = np.full((g, _Columns.SLOTS), -1, dtype=np.int64)
    gap_of = np.zeros(g, dtype=np.int64)
    for x in np.unique(s).tolist():
        deps = tuple(w.get(base + x, ()) for w in waits)
        slots_of[x] = [cols.piece(p_) for p_ in deps]
        gap_of[x] = cfg.layer_gap_ps if any(len(p_) for p_ in deps) else 0
    first = cols.add_block(base + s, base + d, n * bd, op_d, layer, mb, gap_of[s], slots_of[s])
    for x, ids in _split_by(s, first, g):
        step_disp[base + x] = ids
    into = dict(_split_by(d, first, g))  # every dispatch leg into a GPU, in id order
    into_piece = np.array([cols.piece(into.get(x, ())) for x in range(g)], dtype=np.int64)
    # combines: dst returns results to src after its expert compute, in the send order of the reverse legs
    o = send_order_index(cfg, d0, s0, zero, "combine", stream)
    cs, cd, cn = d0[o], s0[o], n0[o]
    slots = np.full((len(cs), _Columns.SLOTS), -1, dtype=np.int64)
    slots[:, 0] = into_piece[cs]
    comb = cols.add_block(base + cs, base + cd, cn * bc, op_c, layer, mb, comp[cs], slots)
    for x, ids in _split_by(cd, comb, g):
        step_comb[base + x] = ids


def _split_by(key: np.ndarray, ids: np.ndarray, g: int):
    """``(x, ids[key == x])`` for every x in ``range(g)`` that occurs, ids in their order."""
    o = np.argsort(key, kind="stable")
    counts = np.bincount(key, minlength=g)
    parts = np.split(ids[o], np.cumsum(counts)[:-1])
    return [(x, parts[x]) for x in np.flatnonzero(counts).tolist()]


class _Columns:
    """The message columns of a generated trace in id order, added one message at a time
    (:meth:`add`) or by arrays (:meth:`add_block`). A message's deps are up to ``SLOTS`` pieces:
    sequences of ids, shared between messages and never changed once referenced, stored once and
    concatenated into CSR by :meth:`trace`."""

    SLOTS = 3

    def __init__(self):
        self.n = 0
        self._blocks: list[tuple] = []       # (src, dst, size, op, layer, mb, gap, slots) arrays
        self._rows: list[tuple] = []         # messages added one at a time, not yet in a block
        self._pieces: list = []
        self._piece_id: dict[int, int] = {}  # id(piece) -> index (the piece is kept alive in _pieces)

    def piece(self, p) -> int:
        """The index of piece ``p`` (-1 if empty)."""
        if not len(p):
            return -1
        k = self._piece_id.get(id(p))
        if k is None:
            k = self._piece_id[id(p)] = len(self._pieces)
            self._pieces.append(p)
        return k

    def add(self, src, dst, size, op, layer, mb, deps, gap) -> int:
        """One message; ``deps``: a tuple of pieces. Returns its id."""
        sl = [self.piece(p) for p in deps]
        self._rows.append((src, dst, size, op, layer, mb, gap, *sl, *(-1,) * (self.SLOTS - len(sl))))
        self.n += 1
        return self.n - 1

    def _flush(self):
        if self._rows:
            a = np.array(self._rows, dtype=np.int64)
            self._blocks.append(tuple(a[:, i] for i in range(7)) + (a[:, 7:],))
            self._rows = []

    def add_block(self, src, dst, size, op, layer, mb, gap, slots) -> np.ndarray:
        """Messages by arrays (scalars broadcast; ``slots``: piece indices, ``(n, SLOTS)``). Returns
        their ids."""
        self._flush()
        m = len(src)
        full = lambda v: np.broadcast_to(np.asarray(v, dtype=np.int64), (m,))  # noqa: E731
        self._blocks.append(tuple(full(v) for v in (src, dst, size, op, layer, mb, gap)) +
                            (np.asarray(slots, dtype=np.int64).reshape(m, self.SLOTS),))
        self.n += m
        return np.arange(self.n - m, self.n, dtype=np.int64)

    def trace(self, op_names: list[str], conn: int) -> Trace:
        """The columnar :class:`Trace` (deps pieces concatenated into CSR)."""
        self._flush()
        cat = [np.concatenate([b[i] for b in self._blocks]) if self._blocks else np.zeros(0, dtype=np.int64)
               for i in range(7)]
        src, dst, size, op_i, layer, mb, gap = cat
        slots = np.concatenate([b[7] for b in self._blocks]) if self._blocks else \
            np.zeros((0, self.SLOTS), dtype=np.int64)
        n = len(src)
        plen = np.array([len(p) for p in self._pieces] + [0], dtype=np.int64)  # [-1]: no piece
        poff = np.zeros(len(plen), dtype=np.int64)
        np.cumsum(plen[:-1], out=poff[1:])
        ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(plen[slots].sum(axis=1), out=ptr[1:])
        pool = np.concatenate([np.asarray(p, dtype=np.int64) for p in self._pieces]) if self._pieces else \
            np.zeros(0, dtype=np.int64)
        ref = slots.ravel()
        ref = ref[ref >= 0]  # the pieces in message order
        dep = np.empty(int(ptr[-1]), dtype=np.int64)
        at, step = 0, 1 << 16
        for a in range(0, len(ref), step):  # a ragged gather, by bounded blocks of pieces
            r = ref[a:a + step]
            ln = plen[r]
            tot = int(ln.sum())
            idx = np.repeat(poff[r] - (np.cumsum(ln) - ln), ln)
            idx += np.arange(tot, dtype=np.int64)
            dep[at:at + tot] = pool[idx]
            at += tot
        ops = np.empty(len(op_names), dtype=object)
        ops[:] = op_names
        # every op name ends in .dispatch or .combine: its phase
        phase_of = np.array(["dispatch" if x.endswith(".dispatch") else "combine" for x in op_names], dtype=object)
        columns = {"id": np.arange(n, dtype=np.int64), "src": src, "dst": dst, "size_bytes": size,
                   "op": ops[op_i], "phase": phase_of[op_i], "layer": layer, "microbatch": mb,
                   "gap_ps": gap, "start_ps": np.zeros(n, dtype=np.int64), "conn": np.full(n, conn, dtype=np.int64),
                   "collective": np.full(n, "all_to_all", dtype=object),
                   "collective_bytes": np.zeros(n, dtype=np.int64)}
        return Trace.from_columns(columns, ptr, dep, "<moe>")


def format_summary(d: dict, path) -> str:
    from ..units import format_size
    mn = "unlimited" if d["max_nodes_per_token"] is None else d["max_nodes_per_token"]
    zs = f"{d['zipf_s_min']:.3f}" if d["zipf_s_min"] == d["zipf_s_max"] else \
        f"{d['zipf_s_min']:.3f}-{d['zipf_s_max']:.3f} over layers"
    return (f"{path}: {d['model']} MoE trace, {d['gpus']} GPUs in {d['groups']} EP group(s) of {d['ep_size']}, "
            f"{d['layers']} layer(s) x {d['microbatches']} microbatch(es), {d['tokens_per_gpu']} tokens per GPU, "
            f"top-{d['top_k']} of {d['experts']} experts, max nodes per token {mn} (seen {d['max_nodes_seen']}); "
            f"{d['messages']} messages, {d['bytes']} bytes ({format_size(d['bytes'])}; dispatch "
            f"{format_size(d['dispatch_bytes'])}, combine {format_size(d['combine_bytes'])}); "
            f"tokens-per-expert imbalance (max - mean) / mean {d['imbalance_mean']:.3f} mean, "
            f"{d['imbalance_max']:.3f} max (Zipf s = {zs}); per-rank imbalance (max / mean - 1 of copies "
            f"received per rank) {d['rank_imbalance_mean']:.3f} mean, {d['rank_imbalance_max']:.3f} max; expert compute gap "
            f"{d['compute_ps_min'] / 1e6:.2f}-{d['compute_ps_max'] / 1e6:.2f} us; {d['dispatch']} dispatch "
            f"({format_size(d['inter_node_bytes'])} between nodes), passes {d['passes']}, overlap {d['overlap']}, "
            f"send order {d['send_order']}, copies {d['copies']}, connections {d['connections']}.")
