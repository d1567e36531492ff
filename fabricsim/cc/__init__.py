"""Congestion-control algorithms, chosen by name (``congestion_control.algorithm``). One file each;
the contract is in :mod:`fabricsim.cc.base`."""
from .base import CC, AckInfo, CCParams, CongestionControl, Flow
from . import none  # noqa: F401  (registration)
from . import dcqcn, dcqcn_cx, telemetry  # noqa: F401  (registration)
from .dcqcn import Dcqcn
from .dcqcn_cx import DcqcnConnectX
from .none import NoCongestionControl
from .telemetry import Telemetry

__all__ = ["CC", "AckInfo", "CCParams", "CongestionControl", "Flow", "Dcqcn", "DcqcnConnectX", "NoCongestionControl", "Telemetry"]
