"""Where every rank lives: the parallel groups of one cluster size, as GPU ids.

Ranks are numbered in Megatron's order, tp fastest, then cp, then dp, then pp::

    rank = t + tp * (c + cp * (d + dp * p))

and placed contiguously: rank r on GPU r (the first ``gpus`` GPUs of the topology), or, with
``placement.gpus_per_domain: K``, on the first K GPUs of each NVLink domain in turn (rank r on slot
``r mod K`` of domain ``r // K``: e.g. 64 of 72 GPUs per NVL72 rack, so that EP groups of 32 never
straddle two racks); ``placement.domain_stride: s`` uses every s-th domain only (a job fragmented
across the fabric; with it, K defaults to the full domain). Every group below is a tuple of GPU ids.

An EP group is ``ep`` consecutive data-parallel ranks (``d = b * ep + e``, same t, c and stage p);
the expert data-parallel group of expert rank ``e`` holds every ``b`` and every ``c``.

>>> lay = Layout(gpus=16, tp=2, cp=1, dp=4, pp=2, ep=2, vpp=1, microbatches=2)
>>> lay.tp_groups(0)[:2]
[(0, 1), (2, 3)]
>>> lay.ep_groups(1)[0]
(8, 10)
>>> lay.pp_pairs(0)[:2]
[(0, 8), (1, 9)]
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError


@dataclass(frozen=True)
class Layout:
    gpus: int
    tp: int
    cp: int
    dp: int
    pp: int
    ep: int
    vpp: int
    microbatches: int
    #: GPU of each rank (None: rank r on GPU r)
    gpu_of: tuple | None = None

    @classmethod
    def of(cls, spec, gpus: int, source: str, where: str, domains: list | None = None) -> "Layout":
        """The layout of ``spec`` on ``gpus`` GPUs; a ConfigError naming ``where`` (the cluster entry) or the
        parallelism / batch / placement field when the size does not split or fit. ``domains``: the GPU
        ids of each NVLink domain of the topology, in order (needed by ``placement.gpus_per_domain``)."""
        p, b = spec.parallelism, spec.batch
        per_replica = p.tp * p.pp * p.cp
        if gpus % per_replica:
            raise ConfigError(f"{gpus} GPUs do not split into tp x pp x cp = {per_replica} (allowed: a multiple "
                              f"of {per_replica})", source=source, field=where)
        dp = gpus // per_replica
        if p.dp is not None and p.dp != dp:
            raise ConfigError(f"dp {p.dp} with {gpus} GPUs needs {p.dp * per_replica} (allowed: leave dp out, "
                              "it is derived per size)", source=source, field="parallelism.dp")
        if dp % p.ep:
            raise ConfigError(f"ep {p.ep} does not divide dp = {dp} at {gpus} GPUs (allowed: ep a divisor of "
                              "gpus / (tp x pp x cp))", source=source, field="parallelism.ep")
        if b.global_batch % (dp * b.micro_batch):
            raise ConfigError(f"global_batch {b.global_batch} is not a whole number of microbatches of "
                              f"{b.micro_batch} on dp = {dp} at {gpus} GPUs (allowed: a multiple of "
                              f"dp x micro_batch = {dp * b.micro_batch})", source=source, field="batch.global_batch")
        k, stride = spec.placement.gpus_per_domain, spec.placement.domain_stride
        gpu_of = None
        if k is not None or stride > 1:
            if domains is None:
                field = "placement.gpus_per_domain" if k is not None else "placement.domain_stride"
                raise ConfigError("the topology has no NVLink domains to place ranks in (allowed: leave "
                                  f"{field.split('.')[1]} out)", source=source, field=field)
            k = k or max(len(d) for d in domains)
            usable = [d[:k] for d in domains[::stride] if len(d) >= k]
            if len(usable) * k < gpus:
                raise ConfigError(f"{gpus} GPUs at {k} per domain need {-(-gpus // k)} domains of at least {k} "
                                  f"GPUs; the topology has {len(usable)} (allowed: fewer GPUs, or a larger "
                                  "gpus_per_domain)", source=source, field=where)
            gpu_of = tuple(g for d in usable for g in d)[:gpus]
        return cls(gpus, p.tp, p.cp, dp, p.pp, p.ep, p.vpp, b.global_batch // (dp * b.micro_batch), gpu_of)

    def rank(self, t: int, c: int, d: int, p: int) -> int:
        """The GPU of rank (t, c, d, p)."""
        r = t + self.tp * (c + self.cp * (d + self.dp * p))
        return r if self.gpu_of is None else self.gpu_of[r]

    def tp_groups(self, stage: int) -> list[tuple[int, ...]]:
        return [tuple(self.rank(t, c, d, stage) for t in range(self.tp))
                for d in range(self.dp) for c in range(self.cp)]

    def dp_groups(self, stage: int) -> list[tuple[int, ...]]:
        """Dense data-parallel groups (every cp and dp rank of one tp rank)."""
        return [tuple(self.rank(t, c, d, stage) for d in range(self.dp) for c in range(self.cp))
                for t in range(self.tp)]

    def ep_groups(self, stage: int) -> list[tuple[int, ...]]:
        return [tuple(self.rank(t, c, b * self.ep + e, stage) for e in range(self.ep))
                for b in range(self.dp // self.ep) for c in range(self.cp) for t in range(self.tp)]

    def expert_dp_groups(self, stage: int) -> list[tuple[int, ...]]:
        """Expert data-parallel groups: the ranks holding the same experts (every b and c of one e, t)."""
        return [tuple(self.rank(t, c, b * self.ep + e, stage) for b in range(self.dp // self.ep)
                      for c in range(self.cp))
                for e in range(self.ep) for t in range(self.tp)]

    def pp_pairs(self, stage: int) -> list[tuple[int, int]]:
        """(sender, receiver) of every rank of ``stage`` to the same rank of the next stage (the last stage
        wraps to the first: interleaved schedules send there)."""
        nxt = (stage + 1) % self.pp
        return [(self.rank(t, c, d, stage), self.rank(t, c, d, nxt))
                for d in range(self.dp) for c in range(self.cp) for t in range(self.tp)]
