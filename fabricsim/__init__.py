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
