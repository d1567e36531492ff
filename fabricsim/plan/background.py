"""Background traffic: another job's communication on the fabric while each pattern of the plan runs.

A plan's ``background:`` section (:class:`fabricsim.plan.spec.BackgroundSpec`) names the other job's
GPUs and its traffic pattern; :func:`background_of` turns it into a :class:`Background` for one
cluster size (the GPUs depend on which ones the planned job uses), and the pattern simulator
(:class:`fabricsim.plan.runner.PatternSimulator`) releases it together with every pattern of that
size, so the pattern's messages share the fabric with it. The pattern's times are measured from its
own messages only.

The other job is a set of *flows* (``(src, dst)`` GPU pairs, from a pattern in :data:`PATTERNS`), each
a persistent connection sending ``message_size`` messages. A *round* is one message on every flow;
alone on the fabric it takes ``round_ps = fanout x message_size / NIC rate`` (fanout: flows out of
the busiest background GPU; NIC rate: the slowest background GPU's scale-out links added up; flows
inside an NVLink domain are faster than that), and ``load`` is the share of time the other job's
NICs would be busy if it were alone:

* ``load: 1``: a continuous stream: each flow is one message as long as the messages it would send
  back to back (:meth:`Background.chains`; no idle time, one completion event);
* ``load < 1``: message j + 1 starts ``gap_ps = round_ps (1 / load - 1)`` after message j ends (the
  other job's compute between its rounds), and each flow starts at its own phase within one period
  (a counter-based hash of the plan's seed and the flow), so the on/off periods are spread rather
  than synchronised. Sharing a link stretches the other job's rounds, not its gaps, as a real job's.

The background is released with each pattern and the pattern simulator makes it long enough to
outlast the pattern (:meth:`Background.messages_per_flow` of a guess, lengthened and rerun until every
flow's last message ends after the pattern's), then waits for it before the next pattern starts.

>>> bg = Background(pairs=((0, 1), (1, 0)), size_bytes=1000, round_ps=20_000, load=0.5, pattern="ring")
>>> bg.gap_ps, bg.period_ps     # 20 ns sending, 20 ns idle
(20000, 40000)
>>> bg.messages_per_flow(100_000)     # 3 periods cover 100 ns, one more, one for the start phase
5
>>> [x.tolist() for x in bg.chains(100_000)]          # per flow: messages, bytes per message
[[5, 5], [1000, 1000]]
>>> [x.tolist() for x in Background(((0, 1),), 1000, 20_000, 1.0, "ring").chains(100_000)]   # load 1
[[1], [6000]]
>>> sorted(PATTERNS)
['all_to_all', 'permutation', 'ring']
>>> _ring([4, 5, 6], seed=0), sorted(_permutation([4, 5, 6], seed=0)) != [(4, 4), (5, 5), (6, 6)]
([(4, 5), (5, 6), (6, 4)], True)
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Callable

from ..errors import ConfigError
from ..flows.identity import mix64

#: an all-to-all background of more flows than this is refused (allowed: a permutation or fewer GPUs)
MAX_FLOWS = 65_536


def _permutation(gpus: list[int], seed: int) -> list[tuple[int, int]]:
    """A random derangement of ``gpus`` (every GPU sends to one other and receives from one), drawn
    from the plan's seed: Sattolo's algorithm (a single cycle), with counter-based draws."""
    n = len(gpus)
    perm = list(range(n))
    for i in range(n - 1, 0, -1):
        j = mix64(mix64(seed ^ 0xB6) ^ i) % i            # j < i: Sattolo, one cycle, no fixed point
        perm[i], perm[j] = perm[j], perm[i]
    return [(gpus[i], gpus[perm[i]]) for i in range(n)]


def _ring(gpus: list[int], seed: int) -> list[tuple[int, int]]:
    """Every GPU to the next one (in GPU order), the last to the first: a data-parallel ring step."""
    return [(g, gpus[(i + 1) % len(gpus)]) for i, g in enumerate(gpus)]


def _all_to_all(gpus: list[int], seed: int) -> list[tuple[int, int]]:
    """Every GPU to every other one (``n (n - 1)`` flows)."""
    return [(s, d) for s in gpus for d in gpus if s != d]


#: background pattern name -> ``f(gpus, seed) -> [(src, dst), ...]`` (the flows of the other job)
PATTERNS: dict[str, Callable[[list[int], int], list[tuple[int, int]]]] = {
    "permutation": _permutation, "ring": _ring, "all_to_all": _all_to_all}


@dataclass(frozen=True)
class Background:
    """The other job at one cluster size: its flows and how each one sends (module doc)."""

    pairs: tuple
    size_bytes: int
    round_ps: int
    load: float
    pattern: str
    seed: int = 0
    #: per flow: one of its messages alone (fanout x size at its path's rate: NVLink inside a domain);
    #: empty: ``round_ps`` for every flow. Sizes the chains only (the gap is the job's, ``gap_ps``)
    flow_ps: tuple = ()

    @property
    def gap_ps(self) -> int:
        """Idle time between two messages of a flow (the other job's compute)."""
        return int(round(self.round_ps * (1.0 / self.load - 1.0)))

    @property
    def period_ps(self) -> int:
        """One round and its gap, alone on the fabric."""
        return self.round_ps + self.gap_ps

    @property
    def gpus(self) -> int:
        return len({g for p in self.pairs for g in p})

    def messages_per_flow(self, cover_ps: int, flow: int | None = None) -> int:
        """Messages of flow ``flow`` (None: of a flow at the NIC rate) so that, alone, it is still
        sending ``cover_ps`` after it starts (one spare message, and one more for its start phase)."""
        own = self.round_ps if flow is None or not self.flow_ps else self.flow_ps[flow]
        return max(1, math.ceil(cover_ps / (own + self.gap_ps))) + 1 + (1 if self.load < 1 else 0)

    def chains(self, cover_ps: int):
        """``(messages, bytes per message)`` of each flow (numpy arrays) covering ``cover_ps``: at load 1
        one continuous message per flow (what back-to-back messages on a connection amount to, with one
        completion event instead of many), else :meth:`messages_per_flow` of ``message_size``."""
        import numpy as np
        n = np.array([self.messages_per_flow(cover_ps, c) for c in range(len(self.pairs))], dtype=np.int64)
        if self.load >= 1:
            return np.ones_like(n), n * self.size_bytes
        return n, np.full_like(n, self.size_bytes)

    def phase_ps(self, flow: int) -> int:
        """Start offset of flow ``flow``: 0 at ``load`` 1, else a hashed share of one period."""
        if self.load >= 1:
            return 0
        return int(mix64(mix64(self.seed ^ 0x9A5E) ^ flow) % max(1, self.period_ps))

    @property
    def key(self) -> str:
        """Equal for equal backgrounds (part of a pattern's cache key)."""
        body = (self.pattern, self.pairs, self.size_bytes, self.round_ps, self.load, self.seed)
        return hashlib.sha1(repr(body).encode()).hexdigest()[:12]

    def describe(self) -> str:
        return (f"{self.pattern} on {self.gpus} GPUs ({len(self.pairs)} flows) of {self.size_bytes} B messages "
                f"at load {self.load:g} (round {self.round_ps / 1e6:.4g} us alone, gap {self.gap_ps / 1e6:.4g} us)")


def nic_rate_bps(topo, gpu: int, nvlink: bool = False) -> int:
    """A GPU's scale-out rate: its links to first-tier switches outside its NVLink domain, added up
    (``nvlink``: its links into the NVLink domain instead)."""
    g = topo.graph
    total = 0
    for n in g.neighbors(gpu):
        a = g.nodes[n]
        if (a.get("domain") == "nvlink") != nvlink:
            continue
        data = g.get_edge_data(gpu, n)
        edges = data.values() if g.is_multigraph() else [data]
        total += sum(int(e.get("rate_bps", 0)) for e in edges)
    return total


def background_of(spec, topo, job_gpus, source: str, where: str) -> Background | None:
    """The other job next to a planned job on ``job_gpus`` (GPU ids) of ``topo``, or None (no
    ``background`` section, or fewer than 2 GPUs left for it with ``gpus: unused``). ConfigError naming
    ``background.<field>`` when its GPUs overlap the job's or do not exist (``where``: the cluster
    size, for the message)."""
    b = spec.background
    if b is None:
        return None
    hosts = topo.num_hosts
    job = set(int(g) for g in job_gpus)
    if b.gpus == "unused":
        free = [h for h in range(hosts) if h not in job]
        gpus = free[:int(math.floor(len(free) * b.fraction + 1e-9))]
        if len(gpus) < 2:
            return None
    else:
        if isinstance(b.gpus, int) and not 2 <= b.gpus <= hosts:
            raise ConfigError(f"{b.gpus} GPUs asked, the topology has {hosts} (allowed: 2..{hosts})",
                              source=source, field="background.gpus")
        gpus = list(range(hosts - b.gpus, hosts)) if isinstance(b.gpus, int) else list(b.gpus)
        bad = [g for g in gpus if not 0 <= g < hosts]
        if bad:
            raise ConfigError(f"GPU {bad[0] if bad else -1} is not on the topology of {hosts} GPUs (allowed: "
                              f"0..{hosts - 1})", source=source, field="background.gpus")
        both = sorted(set(gpus) & job)
        if both:
            raise ConfigError(f"GPU {both[0]} is also used by the planned job at {where} (allowed: GPUs the job "
                              "does not use, or 'unused')", source=source, field="background.gpus")
    pairs = PATTERNS[b.pattern](gpus, spec.seed)
    if len(pairs) > MAX_FLOWS:
        raise ConfigError(f"{b.pattern} on {len(gpus)} GPUs is {len(pairs)} flows at {where} (allowed: at most "
                          f"{MAX_FLOWS}: fewer GPUs, or pattern permutation)", source=source,
                          field="background.pattern")
    rate = min(nic_rate_bps(topo, g) for g in gpus)
    if rate <= 0:
        raise ConfigError("the background's GPUs have no scale-out links (allowed: GPUs with a NIC)",
                          source=source, field="background.gpus")
    out = {}
    for s_, _ in pairs:
        out[s_] = out.get(s_, 0) + 1
    fanout = max(out.values())
    from ..units import serialisation_ps
    round_ps = max(1, serialisation_ps(fanout * int(b.message_size), rate))
    rack = lambda g: topo.graph.nodes[g].get("rack")
    flow_ps = []
    for s_, d_ in pairs:
        inside = rack(s_) is not None and rack(s_) == rack(d_)
        r = (nic_rate_bps(topo, s_, nvlink=True) if inside else 0) or nic_rate_bps(topo, s_) or rate
        flow_ps.append(max(1, serialisation_ps(out[s_] * int(b.message_size), r)))
    return Background(tuple(pairs), int(b.message_size), round_ps, float(b.load), b.pattern, spec.seed,
                      tuple(flow_ps))
