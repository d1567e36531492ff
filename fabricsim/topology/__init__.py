"""Topology builders. ``build_topology(cfg)`` turns any topology section into a :class:`Topology`."""
from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from ..config.topology import (ClusterConfig, ExplicitTopologyConfig, HgxNodeConfig, LeafSpineConfig,
                               NvlRackConfig, TopologyFileRef, TopologyPluginRef, TopologyPresetRef)
from ..errors import ConfigError, TopologyError
from ..registry import UnknownName
from .catalog import preset_path
from .cluster import build_cluster
from .explicit import build_explicit
from .leaf_spine import build_leaf_spine
from .model import Topology
from .plugin import TOPOLOGY_PLUGINS

__all__ = ["Topology", "build_topology", "load_topology_file", "load_topology_or_scenario", "build_leaf_spine", "build_explicit",
           "build_cluster"]

_FILE_MODELS = {"leaf_spine": LeafSpineConfig, "explicit": ExplicitTopologyConfig, "nvl72_rack": NvlRackConfig,
                "hgx_node": HgxNodeConfig, "cluster": ClusterConfig}


def load_topology_file(path: str | Path) -> Topology:
    """Load a topology YAML file (``kind:`` leaf_spine, explicit, nvl72_rack, hgx_node or cluster)."""
    from ..config.scenario import load_yaml, locate
    data, root = load_yaml(path)
    if not isinstance(data, dict):
        raise TopologyError("a topology file must be a YAML mapping", source=str(path), line=1)
    try:
        return _build_section(data, str(path), root, prefix="", name=Path(path).stem)
    except TopologyError as exc:
        raise locate(exc, str(path), root) from None


def _build_section(data: dict, source: str, root, prefix: str, name: str) -> Topology:
    """Validate and build a topology section of a built-in kind (a file's, or a plug-in's output)."""
    from ..config.scenario import _node_line, validation_to_config_error
    at = (lambda f: f"{prefix}.{f}" if prefix else f)
    data = {"kind": "leaf_spine", **data}
    model = _FILE_MODELS.get(data["kind"]) if isinstance(data["kind"], str) else None
    if model is None:
        raise TopologyError(f"got {data.get('kind')!r} (allowed: {', '.join(repr(k) for k in _FILE_MODELS)})",
                            source=source, field=at("kind"), line=_node_line(root, ("kind",)) if root else None)
    try:
        cfg = model.model_validate(data)
    except ValidationError as exc:
        err = validation_to_config_error(exc, source, root, data=data, model=model)
        field = at(err.field) if err.field and prefix else err.field
        raise TopologyError(err.message, source=err.source, field=field, line=err.line) from None
    return build_topology(cfg, source=source, prefix=prefix, name=name)


def _build_plugin(cfg: TopologyPluginRef, source: str, prefix: str) -> Topology:
    at = (lambda f: f"{prefix}.{f}" if prefix else f)
    try:
        build = TOPOLOGY_PLUGINS.get(cfg.builder)
    except UnknownName as exc:
        raise TopologyError(exc.message, source=source, field=at("builder")) from None
    try:
        data = build(dict(cfg.params))
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - third-party code: one line, not a traceback
        raise TopologyError(f"topology plug-in {cfg.builder!r} failed: {type(exc).__name__}: {exc}",
                            source=source, field=at("params")) from None
    if not isinstance(data, dict):
        raise TopologyError(f"topology plug-in {cfg.builder!r} returned {type(data).__name__} "
                            f"(allowed: a topology section, a dict with a built-in kind)", source=source,
                            field=at("builder"))
    # errors in the generated section name the plug-in, not a line of the user's file
    return _build_section(data, f"{source} (topology plug-in {cfg.builder!r})", None, prefix="",
                          name=cfg.builder)


def build_topology(cfg, source: str = "<scenario>", resolve=None, prefix: str = "topology",
                   name: str | None = None) -> Topology:
    """Build from a topology config; ``resolve`` maps a relative file path to a real one."""
    if isinstance(cfg, LeafSpineConfig):
        return build_leaf_spine(cfg, name=name or "leaf_spine")
    if isinstance(cfg, ExplicitTopologyConfig):
        return build_explicit(cfg, source=source, prefix=prefix, name=name or "explicit")
    if isinstance(cfg, (ClusterConfig, NvlRackConfig, HgxNodeConfig)):
        return build_cluster(cfg, source=source, prefix=prefix, name=name or cfg.kind)
    if isinstance(cfg, TopologyFileRef):
        path = resolve(cfg.path) if resolve else Path(cfg.path)
        if not Path(path).is_file():
            raise TopologyError(f"topology file {cfg.path!r} not found (looked at {path})", source=source,
                                field=f"{prefix}.path" if prefix else "path")
        return load_topology_file(path)
    if isinstance(cfg, TopologyPresetRef):
        try:
            path = preset_path(cfg.preset)
        except KeyError as exc:
            raise TopologyError(exc.args[0], source=source, field=f"{prefix}.preset" if prefix else "preset") from None
        return load_topology_file(path)
    if isinstance(cfg, TopologyPluginRef):
        return _build_plugin(cfg, source, prefix)
    raise TopologyError(f"unsupported topology {type(cfg).__name__}", source=source, field="topology")


def load_topology_or_scenario(path: str | Path) -> Topology:
    """The topology of a topology YAML file, or of a scenario file (one with a ``topology:``)."""
    from ..config.scenario import load_yaml
    data, _ = load_yaml(path)
    if isinstance(data, dict) and "topology" in data:
        from ..config import load_scenario
        loaded = load_scenario(path)
        return build_topology(loaded.scenario.topology, source=loaded.source, resolve=loaded.resolve_path)
    return load_topology_file(path)
