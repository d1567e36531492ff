"""Topology plug-ins: third-party generators of topology sections, found through entry points.

A plug-in is a callable ``build(params: dict) -> dict`` registered under entry-point group
``fabricsim.topologies``. It returns a topology section of any built-in kind (``explicit``
for an arbitrary graph, ``leaf_spine``, ``cluster``, ...); fabricsim validates and builds that
section exactly as if the user had written it, so a plug-in gets the same checks and error
messages for free. A scenario uses it as::

    topology:
      kind: plugin
      builder: dragonfly          # the entry point's name
      params: {groups: 4, routers: 2}

An exception other than :class:`~fabricsim.errors.ConfigError` raised by the plug-in is reported
as one line naming it (exit 2), not as a traceback.
"""
from __future__ import annotations

from ..registry import Registry

__all__ = ["TOPOLOGY_PLUGINS"]

#: name -> ``build(params) -> dict``; plug-ins register through entry points (fabricsim.topologies)
TOPOLOGY_PLUGINS: Registry = Registry("topology plug-in", group="fabricsim.topologies")


#: what a plug-in of this family must be (fabricsim/registry.py, Registry.discover)
TOPOLOGY_PLUGINS.accepts(callable, "a callable build(params) -> dict")
