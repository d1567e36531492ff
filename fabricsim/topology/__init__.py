"""Topology builders. ``build_topology(cfg)`` turns any topology section into a :class:`Topology`."""
from __future__ import annotations

from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from ..config.topology import ExplicitTopologyConfig, LeafSpineConfig, TopologyFileRef
from ..errors import TopologyError
from .explicit import build_explicit
from .leaf_spine import build_leaf_spine
from .model import Topology

__all__ = ["Topology", "build_topology", "load_topology_file", "build_leaf_spine", "build_explicit"]

_FILE_ADAPTER = TypeAdapter(LeafSpineConfig | ExplicitTopologyConfig)


def load_topology_file(path: str | Path) -> Topology:
    """Load a topology YAML file (``kind: leaf_spine`` or ``kind: explicit``)."""
    from ..config.scenario import load_yaml, validation_to_config_error
    data, root = load_yaml(path)
    if not isinstance(data, dict):
        raise TopologyError("a topology file must be a YAML mapping", source=str(path), line=1)
    data.setdefault("kind", "leaf_spine")
    if data.get("kind") not in ("leaf_spine", "explicit"):
        raise TopologyError(f"unknown topology kind {data.get('kind')!r} (allowed: leaf_spine, explicit)",
                            source=str(path), field="kind", line=2)
    try:
        cfg = _FILE_ADAPTER.validate_python(data)
    except ValidationError as exc:
        err = validation_to_config_error(exc, str(path), root)
        raise TopologyError(err.message, source=err.source, field=err.field, line=err.line) from None
    return build_topology(cfg, source=str(path), prefix="", name=Path(path).stem)


def build_topology(cfg, source: str = "<scenario>", resolve=None, prefix: str = "topology",
                   name: str | None = None) -> Topology:
    """Build from a topology config; ``resolve`` maps a relative file path to a real one."""
    if isinstance(cfg, LeafSpineConfig):
        return build_leaf_spine(cfg, name=name or "leaf_spine")
    if isinstance(cfg, ExplicitTopologyConfig):
        return build_explicit(cfg, source=source, prefix=prefix or "topology", name=name or "explicit")
    if isinstance(cfg, TopologyFileRef):
        path = resolve(cfg.path) if resolve else Path(cfg.path)
        if not Path(path).exists():
            raise TopologyError(f"topology file {cfg.path!r} not found", source=source, field="topology.path")
        return load_topology_file(path)
    raise TopologyError(f"unsupported topology {type(cfg).__name__}", source=source, field="topology")
