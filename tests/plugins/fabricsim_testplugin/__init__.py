"""A third-party plug-in as a user would write one (tests/test_plugins.py puts this folder on the path).

It is found only through the entry points in ``fabricsim_testplugin-0.1.dist-info``; nothing in
fabricsim imports it.
"""
from fabricsim.routing import RoutingPolicy


class FirstPort(RoutingPolicy):
    """``first_port``: every packet takes the first equal-cost port (the lowest neighbour id)."""

    reorders = False
    fluid = "per_flow"

    def choose(self, switch, ports, pkt, now):
        return ports[0]

    def weights(self, switch, ports, qp, control: bool = False):
        return [1.0] + [0.0] * (len(ports) - 1)


def tiny_leaf_spine(params: dict) -> dict:
    """``tiny_leaf_spine``: two leaves of ``hosts // 2`` hosts and two spines."""
    return {"kind": "leaf_spine", "hosts_per_leaf": params["hosts"] // 2, "leaves": 2, "spines": 2}


def crashing_topology(params: dict) -> dict:
    raise ZeroDivisionError("a bug in the plug-in")
