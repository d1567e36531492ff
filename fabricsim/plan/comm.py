"""One training step's communication, as patterns to simulate and how often each repeats.

Per GPU and step, with ``m`` microbatches of ``b`` sequences of ``s`` tokens, ``T = b s / (tp cp)``
tokens per GPU and microbatch, hidden size ``h``, ``L_moe`` MoE and ``L`` layers in all (MTP modules
included) over ``pp`` stages (the slowest stage has ``ceil(L / pp)``):

* ``ep_dispatch`` / ``ep_combine``: one MoE layer's expert all-to-all of ``T`` tokens per GPU, forward
  and backward (:func:`fabricsim.traces.moe.generate_moe_trace`, ``passes: forward_backward``, the
  plan's MoE options), repeated ``m x ceil(L_moe / pp)`` times;
* ``tp`` (tp > 1): 4 ring all-reduces per layer and microbatch (2 forward, 2 backward) of ``b s / cp x h x
  activation_bytes``; each is ``2 (tp - 1)`` ring steps of one chunk ``1 / tp`` of it, repeated
  ``m x ceil(L / pp) x 4 x 2 (tp - 1)`` times;
* ``pp_p2p`` (pp > 1): every rank sends ``T x h x activation_bytes`` to the same rank of the next stage,
  forward activations and backward gradients, ``2 m vpp`` times;
* ``dp_reduce_scatter`` / ``dp_all_gather``: the gradients (``gradient_bytes``) and the parameters
  (``param_bytes``, distributed optimizer) of the GPU's shard, in buckets of ``dp_bucket`` bytes, ring
  reduce-scatter / all-gather over the data-parallel group of ``n`` ranks: ``n - 1`` ring steps of
  ``bucket / n`` per bucket; dense parameters over ``dp x cp`` ranks (shard ``dense / (tp pp)``), routed
  experts over ``dp cp / ep`` ranks (shard ``experts / (ep tp pp)``).

A ring step is one :class:`Pattern` (every rank of every group of one stage sends one chunk to its
successor at once), so a collective is simulated as one step and multiplied by its step count; the
expert all-to-all is one pattern per EP group (``comm.ep_concurrency: stage``: one per stage, every
EP group of the stage at once). Which patterns are identical is decided on the topology
(:mod:`fabricsim.plan.runner`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .layout import Layout


@dataclass(frozen=True)
class Pattern:
    """Something to simulate once: ``kind`` ``"messages"`` (``messages``: (src, dst, size_bytes), all sent
    at time 0) or ``"a2a"`` (one MoE layer forward and backward on the EP group ``gpus``, in rank order,
    ``tokens_per_gpu`` tokens each; or on several groups of ``ep`` GPUs at once)."""

    kind: str
    messages: tuple = ()
    gpus: tuple = ()
    tokens_per_gpu: int = 0
    #: a2a: GPUs per EP group (``gpus`` holds consecutive groups of this size; 0: one group)
    ep: int = 0

    @property
    def ep_size(self) -> int:
        return self.ep or len(self.gpus)


@dataclass
class CommItem:
    """One communication type's share of a step: ``repeat x`` the slowest of ``patterns`` (its ``leg``:
    ``"all"``, ``"dispatch"`` or ``"combine"``)."""

    type: str
    part: str                 # e.g. "dense", "expert", "" (one type may have several parts)
    patterns: list
    repeat: float
    leg: str = "all"
    bytes_per_gpu: float = 0.0
    group_size: int = 0
    notes: dict = field(default_factory=dict)


def _ring_step(groups, size_bytes: int) -> Pattern:
    msgs = []
    for g in groups:
        if len(g) > 1:
            msgs += [(g[i], g[(i + 1) % len(g)], size_bytes) for i in range(len(g))]
    return Pattern("messages", tuple(msgs))


def derive(spec, lay: Layout) -> list[CommItem]:
    """The communication items of one step of ``spec`` on layout ``lay`` (see the module doc)."""
    m, b = spec.model, spec.batch
    mb = lay.microbatches
    tokens = b.micro_batch * b.seq_len // (lay.tp * lay.cp)
    layers_stage = math.ceil(m.all_layers / lay.pp)
    moe_stage = math.ceil(m.moe_layers / lay.pp)
    items: list[CommItem] = []
    if lay.ep > 1 and m.moe_layers:
        if spec.comm.ep_concurrency == "stage":   # every EP group of a stage at once: they share the fabric
            pats = [Pattern("a2a", gpus=tuple(x for g in lay.ep_groups(p) for x in g), tokens_per_gpu=tokens,
                            ep=lay.ep) for p in range(lay.pp)]
        else:
            pats = [Pattern("a2a", gpus=g, tokens_per_gpu=tokens) for p in range(lay.pp) for g in lay.ep_groups(p)]
        for leg in ("dispatch", "combine"):   # bytes per GPU: the simulated pattern's (runner.comm_times)
            items.append(CommItem(f"ep_{leg}", "", pats, mb * moe_stage, leg, group_size=lay.ep,
                                  notes={"layers_per_stage": moe_stage, "tokens_per_gpu": tokens}))
    if lay.tp > 1:
        ar = b.micro_batch * b.seq_len // lay.cp * m.hidden_size * m.activation_bytes
        chunk = max(1, ar // lay.tp)
        steps = 2 * (lay.tp - 1)
        rep = mb * layers_stage * 4 * steps
        items.append(CommItem("tp", "", [_ring_step(lay.tp_groups(p), chunk) for p in range(lay.pp)], rep,
                              bytes_per_gpu=rep * chunk, group_size=lay.tp,
                              notes={"allreduce_bytes": ar, "ring_steps": steps}))
    if lay.pp > 1:
        act = tokens * m.hidden_size * m.activation_bytes
        stages = range(lay.pp) if lay.vpp > 1 else range(lay.pp - 1)
        pats = [Pattern("messages", tuple((s, d, act) for s, d in lay.pp_pairs(p))) for p in stages]
        rep = 2 * mb * lay.vpp
        items.append(CommItem("pp_p2p", "", pats, rep, bytes_per_gpu=rep * act, group_size=2,
                              notes={"message_bytes": act}))
    bucket = spec.comm.dp_bucket
    for part, groups_of, params in (
            # the stage holding the most (the first: embedding and dense layers; or the last: the
            # output head): its gradients take longest, and the step waits for it
            ("dense", lay.dp_groups, max(m.stage_dense_params(lay.pp)) / lay.tp),
            ("expert", lay.expert_dp_groups, m.routed_expert_params() / (lay.ep * lay.tp * lay.pp))):
        n = len(groups_of(0)[0])
        if n < 2 or params <= 0:
            continue
        for kind, per in (("dp_reduce_scatter", m.gradient_bytes), ("dp_all_gather", m.param_bytes)):
            total = params * per
            bkt = min(bucket, int(total))
            chunk = max(1, bkt // n)
            buckets = total / bkt
            rep = buckets * (n - 1)
            items.append(CommItem(kind, part, [_ring_step(groups_of(p), chunk) for p in range(lay.pp)], rep,
                                  bytes_per_gpu=rep * chunk, group_size=n,
                                  notes={"shard_bytes": total, "bucket_bytes": bkt, "buckets": buckets}))
    return items
