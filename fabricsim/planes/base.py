"""Contract of a plane-split policy: ``ports(qp, eligible) -> the NIC ports the QP may use``."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ..config.types import PositiveSize
from ..registry import Registry

SPLITS: Registry = Registry("plane split policy", group="fabricsim.plane_splits")


class SplitParams(BaseModel):
    """Parameters shared by every plane-split policy.

    ``pxn``: PXN-style forwarding (as NCCL's PXN): a message to a GPU outside the sender's NVLink
    domain first moves over NVLink to the domain peer whose NIC is closest to the destination
    (on the destination's rail), which then sends it on. The message is cut into ``pxn_chunk``
    pieces so the two stages overlap.
    """

    model_config = ConfigDict(extra="forbid", validate_default=True)
    pxn: bool = False
    pxn_chunk: PositiveSize = Field("512KiB", description="PXN pipelining unit")


class PlaneSplit:
    Params = SplitParams

    def __init__(self, params=None, streams=None):
        self.params = params

    def ports(self, qp, eligible: list) -> list:  # pragma: no cover - abstract
        raise NotImplementedError

    def pinned(self, hashes, n_eligible):
        """:meth:`ports` for many queue pairs at once (numpy), for placing flows in one pass.

        ``hashes``: the queue pairs' 5-tuple hashes (uint64); ``n_eligible``: how many eligible
        ports each has. Returns, for a policy that pins a queue pair to one eligible port, the index
        of that port in the queue pair's eligible list (int64); ``None`` for a policy whose queue
        pairs may use every eligible port. Implementations share one private function with
        :meth:`ports` so the two cannot differ (tests/test_spread.py checks every registered policy).
        This default, ``NotImplemented``, has the flow engine ask :meth:`ports` queue pair by queue
        pair (any subset of the eligible ports; slower at scale).
        """
        return NotImplemented

    def parallel(self, qps: int, eligible: int) -> int:
        """How many ports one message of ``qps`` queue pairs can use at once (for ideal figures)."""
        raise NotImplementedError  # pragma: no cover


#: what a plug-in of this family must be (fabricsim/registry.py, Registry.discover)
SPLITS.accepts(PlaneSplit, "a PlaneSplit subclass")
