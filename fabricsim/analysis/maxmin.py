"""Fluid max-min fair references: the rates and finish times an ideal fluid network would give.

These are the analytic yardsticks a packet run is checked against (docs/fidelity.md): a fabric
whose flows are pinned to paths (ECMP) cannot beat max-min fair sharing of those paths, and a
good transport with no losses should come close to it.

:func:`max_min_rates` is progressive filling (Bertsekas & Gallager, *Data Networks* 6.5.2): raise
every unfrozen flow's rate equally; when a link saturates, freeze the flows crossing it; repeat.

>>> max_min_rates([["L1"], ["L1", "L2"], ["L2"]], {"L1": 1.0, "L2": 3.0})
[0.5, 0.5, 2.5]
>>> max_min_rates([["L1", "L2"], ["L1"], ["L2"]], {"L1": 1.0, "L2": 1.0})   # parking lot
[0.5, 0.5, 0.5]

:func:`fluid_completion` runs the fluid model through time: flows share max-min rates, and each
time one finishes the others are re-shared.

>>> fluid_completion([1.0, 1.0], [["L"], ["L"]], {"L": 1.0})
[2.0, 2.0]
>>> fluid_completion([1.0, 3.0], [["L"], ["L"]], {"L": 1.0})
[2.0, 4.0]
"""
from __future__ import annotations

from typing import Hashable, Sequence


def max_min_rates(paths: Sequence[Sequence[Hashable]], capacity: dict) -> list[float]:
    """Max-min fair rate of each flow, given the links each crosses and the links' capacities.

    A flow that crosses no capacitated link is unconstrained (rate ``inf``)."""
    n = len(paths)
    rate = [0.0] * n
    frozen = [False] * n
    left = dict(capacity)
    users: dict = {}
    for i, p in enumerate(paths):
        for link in set(p):
            if link in capacity:
                users.setdefault(link, []).append(i)
    active = {link: len(fs) for link, fs in users.items()}
    while True:
        best = None
        for link, k in active.items():
            if k:
                share = left[link] / k
                if best is None or share < best[0]:
                    best = (share, link)
        if best is None:
            break
        inc = best[0]
        unfrozen = [i for i in range(n) if not frozen[i]]
        for i in unfrozen:
            rate[i] += inc
        for link in active:
            left[link] -= inc * active[link]
        # freeze every flow on a link that is now full (within rounding)
        for link, k in list(active.items()):
            if k and left[link] <= 1e-12 * max(1.0, capacity[link]):
                for i in users[link]:
                    if not frozen[i]:
                        frozen[i] = True
                        for other in set(paths[i]):
                            if other in active:
                                active[other] -= 1
    for i in range(n):
        if not frozen[i] and not any(link in capacity for link in paths[i]):
            rate[i] = float("inf")
    return rate


def fluid_completion(sizes: Sequence[float], paths: Sequence[Sequence[Hashable]], capacity: dict,
                     starts: Sequence[float] | None = None) -> list[float]:
    """Finish time of each flow when active flows share max-min fair rates at every instant.

    ``sizes`` and ``capacity`` in consistent units (e.g. bytes and bytes/ps: times come out in ps).
    ``starts`` (default 0) are the flows' start times."""
    n = len(sizes)
    starts = list(starts) if starts is not None else [0.0] * n
    left = [float(s) for s in sizes]
    end = [None] * n
    t = min(starts) if n else 0.0
    while any(e is None for e in end):
        live = [i for i in range(n) if end[i] is None and starts[i] <= t]
        future = [starts[i] for i in range(n) if end[i] is None and starts[i] > t]
        if not live:
            t = min(future)
            continue
        rates = max_min_rates([paths[i] for i in live], capacity)
        dt = min(left[i] / r if r > 0 else float("inf") for i, r in zip(live, rates))
        if future and min(future) - t < dt:
            dt = min(future) - t
        for i, r in zip(live, rates):
            left[i] -= r * dt
        t += dt
        for i in live:
            if left[i] <= 1e-9 * max(1.0, sizes[i]):
                end[i] = t
    return end
