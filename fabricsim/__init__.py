"""fabricsim: a simulator of AI-cluster network fabrics, at packet and at flow level.

Quick use::

    import fabricsim
    res = fabricsim.run("scenarios/quickstart.yaml")
    res.summary["effective_bandwidth"], res.messages.head()

Every name below is imported on first use, so ``import fabricsim`` (and ``fabricsim --help``)
costs no numpy, pandas or matplotlib.
"""
__version__ = "0.1.0"

# eager, and cheap (fabricsim/compare.py imports pandas inside its functions): the submodule of the
# same name must not shadow the function once anything imports fabricsim.compare
from .compare import compare  # noqa: E402

_LAZY = {
    "run": "fabricsim.api", "prepare": "fabricsim.api", "load_scenario": "fabricsim.api",
    "Result": "fabricsim.analysis.result", "Scenario": "fabricsim.config",
    "plot_fct_cdf": "fabricsim.analysis.plots", "plot_latency_cdf": "fabricsim.analysis.plots",
    "plot_goodput": "fabricsim.analysis.plots", "plot_link_utilisation": "fabricsim.analysis.plots",
    "plot_effective_bandwidth": "fabricsim.analysis.plots", "plot_collectives": "fabricsim.analysis.plots",
    "plot_reorder_distance": "fabricsim.analysis.plots", "plot_link_utilisation_timeseries": "fabricsim.analysis.plots",
    "plot_link_heatmap": "fabricsim.analysis.plots", "plot_queue_timeseries": "fabricsim.analysis.plots",
    "load_results": "fabricsim.analysis.load", "write_report": "fabricsim.analysis.report",
    "write_compare_report": "fabricsim.analysis.report",
}
__all__ = ["__version__", "compare", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        import importlib
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value          # later lookups skip this function
        return value
    raise AttributeError(f"module 'fabricsim' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
