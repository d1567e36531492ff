"""``per_packet``: every packet of a queue pair leaves by whichever eligible port is free first."""
from .base import SPLITS, PlaneSplit


@SPLITS.register("per_packet")
class PerPacket(PlaneSplit):
    def ports(self, qp, eligible):
        return eligible

    def pinned(self, hashes, n_eligible):
        """None: every queue pair may use all its eligible ports (see :meth:`PlaneSplit.pinned`)."""
        return None

    def parallel(self, qps, eligible):
        return eligible
