"""The numba twins of :func:`fabricsim.flows.advance.finish_times` and
:func:`~fabricsim.flows.advance.advance`: the same elementwise operations in one pass over the
rows instead of a dozen numpy passes with their temporaries, and the same arrays bit for bit
(``tests/test_flow_advance.py``). Importing this module imports numba; the flow engine does so
only when it runs the compiled solver. Compiled on first use, cached on disk.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .advance import FINISH_TOLERANCE, Advanced

__all__ = ["advance", "finish_times"]


@njit(cache=True, nogil=True)
def _finish_times(on, r, rem, t0, tf):
    dt = np.inf
    t_min = np.inf
    nan_dt = False                     # numpy's min: NaN if any
    nan_t = False
    for i in range(on.size):
        x = np.inf
        if on[i]:
            if r[i] > 0.0:
                x = rem[i] / r[i]
            if t0[i] < t_min:
                t_min = t0[i]
            elif t0[i] != t0[i]:
                nan_t = True
        tf[i] = x
        if x < dt:
            dt = x
        elif x != x:
            nan_dt = True
    return (np.nan if nan_dt else dt), (np.nan if nan_t else t_min)


@njit(cache=True, nogil=True)
def _advance(tf, on, r, rem, f_good, f_tail, thr, step, widen, new_rem, done, good, lagged):
    n = tf.size
    if widen:
        for i in range(n):
            if tf[i] <= thr and tf[i] > step:
                step = tf[i]
    nd = 0
    na = 0
    for i in range(n):
        if tf[i] <= thr:
            moved = rem[i]
            new_rem[i] = 0.0
            done[nd] = i
            nd += 1
        else:
            moved = r[i] * step
            d = rem[i] - moved
            new_rem[i] = d if (d > 0.0 or d != d) else 0.0       # np.maximum(d, 0.0): NaN kept, -0.0 -> 0.0
        if on[i]:
            g = moved * f_good[i]
            good[na] = g
            lagged[na] = g * f_tail[i]
            na += 1
    return nd, na, step


def finish_times(on, r, rem, t0):
    """:func:`fabricsim.flows.advance.finish_times`, compiled."""
    tf = np.empty(len(on))
    dt, t_min = _finish_times(on, r, rem, t0, tf)
    return tf, float(dt), float(t_min)


def advance(tf, on, r, rem, f_good, f_tail, horizon: float, step: float, widen: bool) -> Advanced:
    """:func:`fabricsim.flows.advance.advance`, compiled."""
    n = len(tf)
    new_rem = np.empty(n)
    done = np.empty(n, dtype=np.int64)
    good = np.empty(n)
    lagged = np.empty(n)
    nd, na, step = _advance(tf, on, r, rem, f_good, f_tail, horizon * (1 + FINISH_TOLERANCE), float(step), bool(widen),
                            new_rem, done, good, lagged)
    return Advanced(new_rem, done[:nd], float(step), good[:na], lagged[:na])
