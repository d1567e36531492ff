"""The numba twin of :func:`fabricsim.flows.replay.released`: the count-down of completed rows'
dependents in one sequential pass instead of a stable sort (the same mask and the same counts,
``tests/test_replay.py``). Importing this module imports numba; :class:`~fabricsim.flows.replay.Replay`
does so only when built with ``compiled=True`` (the flow engine with the compiled solver)."""
from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["released"]


@njit(cache=True, nogil=True)
def _released(deps, pending, now):
    for i in range(deps.size):
        d = deps[i]
        p = pending[d] - 1
        pending[d] = p
        now[i] = p == 0


def released(deps: np.ndarray, pending: np.ndarray) -> np.ndarray:
    """:func:`fabricsim.flows.replay.released`, compiled."""
    now = np.empty(len(deps), dtype=np.bool_)
    _released(np.asarray(deps, dtype=np.int64), pending, now)
    return now
