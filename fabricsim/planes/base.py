"""Contract of a plane-split policy: ``ports(qp, eligible) -> the NIC ports the QP may use``."""
from __future__ import annotations

from ..registry import Registry

SPLITS: Registry = Registry("plane split policy")


class PlaneSplit:
    Params = None

    def __init__(self, params=None, streams=None):
        self.params = params

    def ports(self, qp, eligible: list) -> list:  # pragma: no cover - abstract
        raise NotImplementedError

    def parallel(self, qps: int, eligible: int) -> int:
        """How many ports one message of ``qps`` queue pairs can use at once (for ideal figures)."""
        raise NotImplementedError  # pragma: no cover
