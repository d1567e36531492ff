"""``per_flow``: a queue pair stays on one port, chosen by its seeded 5-tuple hash."""
from ..flows.identity import mix64
from .base import SPLITS, PlaneSplit


@SPLITS.register("per_flow")
class PerFlow(PlaneSplit):
    def ports(self, qp, eligible):
        return [eligible[mix64(qp.hash ^ 0x5EED) % len(eligible)]]

    def parallel(self, qps, eligible):
        return min(qps, eligible)
