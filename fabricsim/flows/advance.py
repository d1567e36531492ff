"""One step of the fluid flows: when each active flow would finish at its rate, and what a step
of a given length moves (the flow engine's per-step arithmetic, :meth:`FlowEngine._run`).

The step's arithmetic runs over every flow row (finished rows included: a gather of the active
rows costs more than the arithmetic), so at cluster scale it is a few passes over a million rows
per step. :func:`finish_times` and :func:`advance` are the reference, in numpy; with the compiled
solver the engine calls their numba twins (:mod:`fabricsim.flows.advance_compiled`), which do the
same elementwise operations in one pass and return the same arrays bit for bit, NaNs and signed
zeros included (``tests/test_flow_advance.py``). The two minima (``dt``, ``t0_min``) are equal as
numbers; of a -0.0 and a 0.0 the twin keeps the first and numpy either (its vector order), a
case the engine never meets: remaining bytes and start times are never negative zeros. Sums are left to the caller (numpy's pairwise sums over the
same arrays), so they are the same too.

>>> import numpy as np
>>> on = np.array([True, True, False]); r = np.array([2.0, 0.0, np.nan]); rem = np.array([4.0, 1.0, 0.0])
>>> tf, dt, t0 = finish_times(on, r, rem, np.array([5.0, 3.0, 0.0]))
>>> tf.tolist(), dt, t0
([2.0, inf, inf], 2.0, 3.0)
>>> a = advance(tf, on, r, rem, np.ones(3), np.zeros(3), 1.0, 1.0, False)
>>> a.rem.tolist(), a.done.tolist(), a.good.tolist()
([2.0, 1.0, nan], [], [2.0, 0.0])
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

#: a flow whose finish lies within this (relative) of the step's horizon finishes in the step
FINISH_TOLERANCE = 1e-12


def finish_times(on, r, rem, t0):
    """``(tf, dt, t0_min)``: each row's time to finish at its rate (``rem / r``; ``inf`` for rows
    not active or without a rate), the smallest of them, and the earliest start ``t0`` of an
    active row (``inf`` if none)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        tf = np.where(on & (r > 0), rem / r, np.inf)
    t0s = t0[on]
    return tf, float(tf.min()) if len(tf) else np.inf, float(t0s.min()) if len(t0s) else np.inf


class Advanced(NamedTuple):
    """What a step did: every row's remaining bytes after it (``rem``), the rows that finished in
    it (``done``, ascending), the step's length (``step``: widened to the last finish when asked),
    and per active row, in row order, the payload it delivered (``good``: bytes moved x the row's
    goodput share) and that times the row's pipeline latency (``lagged``)."""
    rem: np.ndarray
    done: np.ndarray
    step: float
    good: np.ndarray
    lagged: np.ndarray


def advance(tf, on, r, rem, f_good, f_tail, horizon: float, step: float, widen: bool) -> Advanced:
    """A step of length ``step``: rows whose finish ``tf`` lies within ``horizon`` (relative
    tolerance :data:`FINISH_TOLERANCE`) finish, moving what they had left; the others move
    ``r x step``. With ``widen``, the step runs on to the last of those finishes if that is later."""
    fin = tf <= horizon * (1 + FINISH_TOLERANCE)
    if widen and fin.any():
        step = max(step, float(tf[fin].max()))
    with np.errstate(invalid="ignore", over="ignore"):        # rows with no rate (NaN, inf x 0)
        moved = np.where(fin, rem, r * step)
        new_rem = np.where(fin, 0.0, np.maximum(rem - moved, 0.0))
    good = (moved * f_good)[on]
    return Advanced(new_rem, np.flatnonzero(fin), step, good, good * f_tail[on])
