"""``per_flow``: a queue pair stays on one port, chosen by its seeded 5-tuple hash."""
import numpy as np

from ..flows.identity import mix64, mix64_array
from .base import SPLITS, PlaneSplit

#: tag mixed into a queue pair's hash before the plane choice (independent of the ECMP choices)
_TAG = 0x5EED


def _index(qp_hash, n_eligible, mix):
    """The one definition of the choice: ``mix(hash ^ tag) % n_eligible``, the index of the
    queue pair's port in its eligible list. ``mix`` is :func:`mix64` for Python ints or
    :func:`mix64_array` for uint64 arrays (the same function, element by element)."""
    return mix(qp_hash ^ _TAG) % n_eligible


@SPLITS.register("per_flow")
class PerFlow(PlaneSplit):
    def ports(self, qp, eligible):
        return [eligible[_index(qp.hash, len(eligible), mix64)]]

    def pinned(self, hashes, n_eligible):
        """:meth:`ports` of many queue pairs: each one's port index (see :meth:`PlaneSplit.pinned`)."""
        h = np.asarray(hashes, dtype=np.uint64)
        return _index(h, np.asarray(n_eligible, dtype=np.uint64), mix64_array).astype(np.int64)

    def parallel(self, qps, eligible):
        return min(qps, eligible)
