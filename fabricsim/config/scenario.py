"""The scenario file: one typed model per section, loaded from YAML with located errors."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, model_validator

from ..errors import ConfigError
from .policy import CongestionControlSection, ReceiverSection, RoutingSection
from .topology import LeafSpineConfig, TopologyConfig
from .traffic import TrafficConfig, PermutationTraffic
from .types import STRICT, PositiveSize, PositiveTime, Size


class SimulationConfig(BaseModel):
    """Engine, seed, time limit and packetisation."""

    model_config = STRICT
    seed: int = Field(1, ge=0, le=2**63 - 1)
    time_limit: PositiveTime = Field("1s", description="simulated time after which the run stops (default 1s)")
    mtu: PositiveSize = Field("4KiB", description="payload bytes per packet (RoCEv2 path MTU)")
    header: Size = Field("82B", description="per-packet wire overhead: Eth+FCS 18, IPv4 20, UDP 8, BTH 12, "
                                        "ICRC 4, preamble+IFG 20")
    cell_packets: int = Field(1, ge=1, le=1024,
                              description="MTU-sized packets simulated as one unit (1 = exact)")
    engine: Literal["packet"] = "packet"
    kernel: Literal["heap", "simpy"] = "heap"


class OutputsConfig(BaseModel):
    """What the results folder holds."""

    model_config = STRICT
    dir: str | None = Field(None, description="results folder; default results/<scenario name>")
    formats: list[Literal["parquet", "csv"]] = Field(default_factory=lambda: ["parquet", "csv"], min_length=1)
    timeseries_bin: PositiveTime = Field("10us", description="bin width of the goodput time series (10us)")
    latency_rel_error: float = Field(0.01, gt=0, le=0.5,
                                     description="relative bin width of the packet-latency histogram")


class Scenario(BaseModel):
    """A whole scenario. ``base_dir`` is where relative file paths in it are resolved."""

    model_config = STRICT
    name: str = Field("scenario", min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    topology: TopologyConfig = Field(default_factory=LeafSpineConfig)
    traffic: TrafficConfig = Field(default_factory=PermutationTraffic)
    routing: RoutingSection = Field(default_factory=lambda: RoutingSection.model_validate({}))
    receiver: ReceiverSection = Field(default_factory=lambda: ReceiverSection.model_validate({}))
    congestion_control: CongestionControlSection = Field(
        default_factory=lambda: CongestionControlSection.model_validate({}))
    simulation: SimulationConfig = Field(default_factory=SimulationConfig)
    outputs: OutputsConfig = Field(default_factory=OutputsConfig)

    @model_validator(mode="before")
    @classmethod
    def _default_kinds(cls, data):
        if isinstance(data, dict):
            data = dict(data)
            for section, key, default in (("topology", "kind", "leaf_spine"), ("traffic", "pattern", "permutation")):
                if isinstance(data.get(section), dict) and key not in data[section]:
                    data[section] = {key: default, **data[section]}
        return data

    @model_validator(mode="after")
    def _cross(self):
        sim = self.simulation
        if sim.header >= sim.mtu * 4:
            raise ValueError(f"simulation.header: {sim.header} B overhead is implausible for a "
                             f"{sim.mtu} B MTU (allowed: less than 4 x mtu)")
        return self


# --------------------------------------------------------------------------------------------
# loading


def _node_line(node: yaml.Node | None, path: tuple) -> int | None:
    """1-based line of the YAML node at ``path`` (or of its deepest existing parent)."""
    line = None
    for key in path:
        if node is None:
            break
        line = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            nxt = None
            for k, v in node.value:
                if k.value == str(key):
                    nxt = v
                    line = k.start_mark.line + 1
                    break
            node = nxt
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
        else:
            node = None
    if node is not None:
        line = node.start_mark.line + 1
    return line


def _clean_loc(loc: tuple) -> tuple:
    """Drop pydantic's union-tag and validator entries from an error location."""
    out = []
    for part in loc:
        if isinstance(part, str) and (part in ("leaf_spine", "explicit", "file", "permutation",
                                               "all_to_all", "incast", "csv")
                                      or part.startswith("function-") or "[" in part):
            continue
        out.append(part)
    return tuple(out)


def validation_to_config_error(exc: ValidationError, source: str, root: yaml.Node | None,
                               prefix: tuple = ()) -> ConfigError:
    """First pydantic error -> one-line ConfigError naming file, field path (and line)."""
    err = exc.errors()[0]
    loc = prefix + _clean_loc(tuple(err["loc"]))
    msg = err["msg"]
    for p in ("Value error, ", "Assertion failed, "):
        msg = msg.replace(p, "")
    # validators that name their own sub-field write "field: message"
    if ": " in msg and msg.split(": ", 1)[0].replace("_", "").replace(".", "").isalnum() \
            and " " not in msg.split(": ", 1)[0]:
        sub, msg = msg.split(": ", 1)
        loc = loc + tuple(sub.split("."))
    if err["type"] == "extra_forbidden":
        msg = "unknown field (check spelling; see docs/scenarios.md for allowed fields)"
    elif err["type"] in ("literal_error", "union_tag_invalid"):
        ctx = err.get("ctx") or {}
        expected = ctx.get("expected") or ctx.get("expected_tags")
        if expected:
            msg = f"got {err.get('input')!r}; allowed: {expected}"
    field = ".".join(str(p) for p in loc) or None
    return ConfigError(msg, source=source, field=field, line=_node_line(root, loc) if root else None)


def load_yaml(path: str | Path) -> tuple[Any, yaml.Node | None]:
    """Read a YAML file -> (data, node tree for line numbers). Raises ConfigError."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise ConfigError("file not found", source=str(path)) from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read: {exc.__class__.__name__}", source=str(path)) from None
    try:
        data = yaml.safe_load(text)
        node = yaml.compose(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"not valid YAML: {problem}", source=str(path),
                          line=mark.line + 1 if mark else None) from None
    return data, node


def set_path(data: dict, dotted: str, value: Any) -> None:
    """Apply one ``--set a.b.c=value`` override to nested dicts (value parsed as YAML)."""
    keys = dotted.split(".")
    cur = data
    for k in keys[:-1]:
        nxt = cur.get(k)
        if nxt is None:
            nxt = cur[k] = {}
        if not isinstance(nxt, dict):
            raise ConfigError(f"cannot set {dotted}: {k} is not a section", field=dotted, source="--set")
        cur = nxt
    cur[keys[-1]] = value


def parse_overrides(items: list[str] | tuple[str, ...]) -> list[tuple[str, Any]]:
    out = []
    for item in items:
        if "=" not in item:
            raise ConfigError(f"expected key.path=value, got {item!r}", source="--set")
        key, raw = item.split("=", 1)
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError:
            value = raw
        out.append((key.strip(), value))
    return out


class LoadedScenario:
    """A validated scenario with where it came from (for resolving relative paths)."""

    def __init__(self, scenario: Scenario, source: str, base_dir: Path):
        self.scenario = scenario
        self.source = source
        self.base_dir = base_dir

    def resolve_path(self, rel: str) -> Path:
        p = Path(rel)
        if p.is_absolute():
            return p
        candidate = self.base_dir / p
        if candidate.exists():
            return candidate
        # also try the project root (parent of scenarios/) and the cwd
        for base in (self.base_dir.parent, Path.cwd()):
            if (base / p).exists():
                return base / p
        return candidate


def load_scenario(source: str | Path | dict | Scenario, overrides=(), seed: int | None = None
                  ) -> LoadedScenario:
    """Validate a scenario from a YAML path, a dict or a :class:`Scenario`.

    ``overrides`` are ``"key.path=value"`` strings (as ``--set``); ``seed`` replaces
    ``simulation.seed``. Raises :class:`ConfigError` with the file, field and line.
    """
    root = None
    if isinstance(source, Scenario):
        data = source.model_dump(mode="json")
        name, base = "<Scenario>", Path.cwd()
    elif isinstance(source, dict):
        data, name, base = source, "<dict>", Path.cwd()
    else:
        data, root = load_yaml(source)
        name, base = str(source), Path(source).resolve().parent
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError("a scenario must be a YAML mapping of sections", source=name, line=1)
    import copy
    data = copy.deepcopy(data)
    if isinstance(source, (str, Path)) and "name" not in data:
        data["name"] = Path(source).stem
    for key, value in parse_overrides(list(overrides)):
        set_path(data, key, value)
    if seed is not None:
        set_path(data, "simulation.seed", seed)
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise validation_to_config_error(exc, name, root) from None
    return LoadedScenario(scenario, name, base)
