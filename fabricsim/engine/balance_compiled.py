"""The water-filling sweeps of :mod:`fabricsim.engine.balance` compiled with numba: the same
functions (:func:`fabricsim.flows.waterfill.fill_one`, :func:`fabricsim.engine.balance._sweep`)
compiled from their own source, so the compiled and the plain runs do the same arithmetic in the
same order. Importing this module imports numba; the flow engine does so only with the compiled
solver."""
from __future__ import annotations

import types

from numba import njit

from ..flows import waterfill
from . import balance

__all__ = ["sweep"]

# (the sweep is compiled per process, about 1-3 s, and only in runs that water-fill: numba's disk
# cache of a function checks its own file only, not the functions compiled into it)

_fill_one = njit(cache=True)(waterfill.fill_one)


def _rebind(fn, **deps):
    """``fn`` compiled from its own source with the plain functions it calls replaced by their
    compiled twins (numba compiles only calls to compiled functions)."""
    g = dict(fn.__globals__)
    g.update(deps)
    return njit(types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__, fn.__closure__))


sweep = _rebind(balance._sweep, fill_one=_fill_one)
