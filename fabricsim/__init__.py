"""fabricsim: a packet-level simulator of AI-cluster network fabrics.

Quick use::

    import fabricsim
    res = fabricsim.run("scenarios/quickstart.yaml")
    res.summary["effective_bandwidth"], res.messages.head()
"""
__version__ = "0.1.0"

from .api import load_scenario, prepare, run  # noqa: E402
from .analysis.result import Result  # noqa: E402
from .config import Scenario  # noqa: E402
from .compare import compare  # noqa: E402

__all__ = ["run", "prepare", "compare", "load_scenario", "Result", "Scenario", "__version__"]

_LAZY = {  # imported on first use: matplotlib is not needed to run a simulation
    "plot_fct_cdf": "fabricsim.analysis.plots", "plot_latency_cdf": "fabricsim.analysis.plots",
    "plot_goodput": "fabricsim.analysis.plots", "plot_link_utilisation": "fabricsim.analysis.plots",
    "plot_effective_bandwidth": "fabricsim.analysis.plots", "plot_collectives": "fabricsim.analysis.plots",
    "plot_reorder_distance": "fabricsim.analysis.plots",
    "load_results": "fabricsim.analysis.load", "write_report": "fabricsim.analysis.report",
}
__all__ += list(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'fabricsim' has no attribute {name!r}")
