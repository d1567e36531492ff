"""The engine-neutral flow layer: what every engine shares below the engine itself.

- :mod:`~fabricsim.flows.identity`: a message's queue pairs, their 5-tuples and hashes.
- :mod:`~fabricsim.flows.table`: the run's messages as columns (:class:`MessageTable`).
- :mod:`~fabricsim.flows.links`: the directed-link table built once from a topology.
- :mod:`~fabricsim.flows.replay`: release times, dependencies, compute gaps, connection order.
- :mod:`~fabricsim.flows.fluid`: max-min fair rates over sparse link usage (the flow engine's solver).

Nothing here imports an engine, a network element or the analysis layer (docs/architecture.md).
"""
from .message import Message
from .table import MessageTable

__all__ = ["Message", "MessageTable"]
