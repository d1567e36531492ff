"""Water-filling: split an amount of traffic over parallel pipes so that their utilisation is equal.

The flow-level meaning of adaptive routing under load (:mod:`fabricsim.engine.balance`): at a
switch, the adaptive traffic towards one destination group sends each packet to the least-loaded
candidate port, which in the fluid limit fills the candidates like water, the least utilised first,
until they stand at one level. This module is that arithmetic.

A *pipe* (one candidate port) carries ``t >= 0`` of its group's ``amount``. Beside it, it has other
traffic: ``other`` on its own link of capacity ``cap``, and optionally a downstream pool (the next
switch's candidate links towards the same destinations) of capacity ``cap_down`` already carrying
``other_down``. At level ``lam`` a pipe takes what keeps both parts at or below that utilisation::

    t(lam) = max(0, min(lam * cap - other, lam * cap_down - other_down))

(``cap_down = inf``: no downstream part). :func:`fill_one` finds the level at which the pipes' ``t``
add up to ``amount``. Every ``t`` is continuous and non-decreasing in ``lam`` and piecewise linear
with at most two breakpoints (where it becomes positive, and where the binding part changes), so the
level is found exactly: the breakpoints sorted, the sum's slope accumulated over them, the segment
holding ``amount`` solved for ``lam``. No iteration, no tolerance. :func:`fill_one` works on one
group in plain loops (the flow engine compiles it with numba, :mod:`fabricsim.engine.balance`);
:func:`water_fill` applies it to many groups.

Two ports of capacity 1, one with 0.5 of other load: the first 0.5 goes to the free one, the rest is
shared, both ending at utilisation 0.75:

>>> import numpy as np
>>> water_fill(np.array([0, 2]), np.array([1.0]), np.array([1.0, 1.0]), np.array([0.5, 0.0])).tolist()
[0.25, 0.75]

With nothing else on the links the split is in proportion to capacity (the ``proportional`` split),
and a downstream pool that is full keeps traffic off its pipe until the others reach its level:

>>> water_fill(np.array([0, 3]), np.array([3.0]), np.array([1.0, 2.0, 3.0]), np.zeros(3)).tolist()
[0.5, 1.0, 1.5]
>>> water_fill(np.array([0, 2]), np.array([1.0]), np.ones(2), np.zeros(2),
...            cap_down=np.array([1.0, np.inf]), other_down=np.array([1.0, 0.0])).tolist()
[0.0, 1.0]
"""
from __future__ import annotations

import numpy as np

__all__ = ["SNAP", "fill_one", "water_fill"]

#: shares below this fraction of a group's amount are rounding residue: set to 0
SNAP = 1e-9


def fill_one(k, amount, cap, other, cap_down, other_down, t, bl, bs):
    """Water-fill ``amount`` (``> 0``) over the first ``k`` pipes: ``t[:k]`` gets the shares (module
    doc); ``cap``, ``other``, ``cap_down`` (``inf``: no downstream part), ``other_down`` are read at
    ``[:k]`` (``other`` and ``other_down`` below 0 count as 0), ``bl`` and ``bs`` are work arrays of
    at least ``2 k`` entries. Plain loops over float64 arrays: compiled as it is by numba."""
    inf = np.inf
    m = 0
    # where each pipe starts to take traffic (the slope of its binding part above it) ...
    for j in range(k):
        b = max(other[j], 0.0)
        z = b / cap[j]
        slope = cap[j]
        if cap_down[j] < inf:
            zd = max(other_down[j], 0.0) / cap_down[j]
            if zd > z:
                z = zd
                slope = cap_down[j]
        bl[m] = z
        bs[m] = slope
        m += 1
    # ... and where the other part, growing more slowly, takes over (the two lines cross)
    for j in range(k):
        if cap_down[j] < inf:
            b = max(other[j], 0.0)
            d = max(other_down[j], 0.0)
            a, c = cap[j], cap_down[j]
            slope, rest = (c, a) if d / c > b / a else (a, c)
            if rest < slope:
                bl[m] = max((b - d) / (a - c), bl[j])
                bs[m] = rest - slope
                m += 1
    order = np.argsort(bl[:m], kind="mergesort")
    s1 = 0.0
    s2 = 0.0
    for i in range(m):
        lam = bl[order[i]]
        if s1 > 0.0 and s1 * lam - s2 > amount:      # the sum passes amount before this breakpoint
            break
        s1 += bs[order[i]]
        s2 += bs[order[i]] * lam
    lam = (amount + s2) / s1
    tot = 0.0
    for j in range(k):
        v = lam * cap[j] - max(other[j], 0.0)
        if cap_down[j] < inf:
            v = min(v, lam * cap_down[j] - max(other_down[j], 0.0))
        # (a share below SNAP of the amount is the level's rounding residue on a pipe that stays
        # empty: 0, not 1e-16, which a max-min solver would have to divide by)
        t[j] = v if v > SNAP * amount else 0.0
        tot += t[j]
    # exact total: the level's rounding spread over the shares
    for j in range(k):
        t[j] = t[j] * (amount / tot)


def water_fill(ptr, amount, cap, other, cap_down=None, other_down=None) -> np.ndarray:
    """:func:`fill_one` for every group ``g``: ``amount[g]`` (``> 0``) over the pipes
    ``ptr[g]:ptr[g + 1]`` (CSR offsets, every group non-empty). ``cap`` (``> 0``) and ``other``
    (``>= 0``) per pipe; ``cap_down`` (``inf``: none) and ``other_down`` optional. Returns the
    shares ``t``, non-negative, adding up to ``amount`` per group."""
    ptr = np.asarray(ptr, dtype=np.int64)
    cap = np.asarray(cap, dtype=np.float64)
    other = np.asarray(other, dtype=np.float64)
    n = len(cap)
    cap_down = np.full(n, np.inf) if cap_down is None else np.asarray(cap_down, dtype=np.float64)
    other_down = np.zeros(n) if other_down is None else np.asarray(other_down, dtype=np.float64)
    out = np.zeros(n)
    kmax = int(np.diff(ptr).max()) if len(ptr) > 1 else 0
    t, bl, bs = np.zeros(kmax), np.zeros(2 * kmax), np.zeros(2 * kmax)
    for g in range(len(ptr) - 1):
        lo, hi = ptr[g], ptr[g + 1]
        fill_one(hi - lo, float(amount[g]), cap[lo:hi], other[lo:hi], cap_down[lo:hi], other_down[lo:hi], t, bl, bs)
        out[lo:hi] = t[:hi - lo]
    return out
