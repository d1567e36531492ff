"""The scenario file: one typed model per section, loaded from YAML with located errors."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (BaseModel, Field, StrictFloat, StrictInt, ValidationError, field_validator,
                      model_serializer, model_validator)

from ..errors import ConfigError
from .profiles import apply_profile
from .policy import CongestionControlSection, NicSection, ReceiverSection, RoutingSection
from .switch import SwitchFeatures
from .topology import LeafSpineConfig, TopologyConfig
from .traffic import TrafficConfig, PermutationTraffic
from .yaml_loader import load_yaml_text, load_yaml_value
from .types import STRICT, PositiveSize, PositiveTime, Size


#: a scenario name: one path component that is neither '.', '..', hidden, nor an option ('-x')
NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"
NAME_MAX = 128


class SimulationConfig(BaseModel):
    """Engine, seed, time limit and packetisation.

    ``mtu`` and ``header`` are shared by every engine (the packet engine's packets; the flow
    engine's framing of fluid bytes and its packet-train floor; the ideal references). Each
    engine's own parameters sit under its name (``simulation.packet``, ``simulation.flow``: its
    ``Params``); ``kernel`` and ``cell_packets`` at the top are aliases of ``simulation.packet``'s
    (:data:`PACKET_ALIASES`), read back through the properties of the same names.
    """

    model_config = STRICT
    seed: StrictInt = Field(1, ge=0, le=2**63 - 1)
    time_limit: PositiveTime = Field("1s", description="simulated time after which the run stops (default 1s)")
    mtu: PositiveSize = Field("4KiB", description="payload bytes per packet (RoCEv2 path MTU)")
    header: Size = Field("82B", description="per-packet wire overhead: Eth+FCS 18, IPv4 20, UDP 8, BTH 12, "
                                        "ICRC 4, preamble+IFG 20")
    engine: str = Field("packet", description=(
        "packet: every packet through every hop (fabricsim/engine/packet.py); flow: fluid max-min "
        "rates over the same topology, routing and traffic (fabricsim/engine/flow.py); any engine "
        "registered in fabricsim.engine.ENGINES"))
    #: the chosen engine's own parameters (its ``Params`` model), from the key named after it,
    #: e.g. ``simulation: {engine: flow, flow: {quantum: 1us}}`` or ``{packet: {kernel: compiled}}``;
    #: None for an engine without any
    engine_params: Any = Field(None, exclude=True)
    #: parameters given for engines other than the chosen one, with a value other than their
    #: default: engine name -> the fields, as written (``simulation.packet.kernel``, or the alias
    #: ``simulation.kernel``); validated, then unused (the run warns once naming them:
    #: :meth:`unused_params_warning`)
    unused_params: dict = Field(default_factory=dict, exclude=True)
    compute: Literal["gaps", "gpu"] = Field("gaps", description=(
        "gaps: a message's gap_ps is a plain delay after its dependencies; gpu: it is work on the "
        "sending GPU, which computes one job at a time (messages with the same sender, dependencies "
        "and gap share one job), so overlapping microbatches queue for the GPU"))


    @model_validator(mode="before")
    @classmethod
    def _engine_params(cls, data):
        """Validate ``engine`` against the registry and each engine's parameter mapping (the key
        named after it) against that engine's ``Params``; keep the chosen engine's."""
        if not isinstance(data, dict):
            return data
        from ..engine import ENGINES
        data = dict(data)
        data.pop("engine_params", None)
        data.pop("unused_params", None)
        name = data.get("engine", "packet")
        if not isinstance(name, str) or name not in ENGINES:
            raise ValueError("engine: " + ENGINES.unknown_message(name))
        via_alias = _merge_aliases(data)
        chosen = None
        unused = {}
        for other in ENGINES.names():
            if other not in data:
                continue
            params_model = getattr(ENGINES.get(other), "Params", None)
            raw = data.pop(other)
            if params_model is None:
                raise ValueError(f"{other}: the {other} engine takes no parameters here")
            if raw is not None and not isinstance(raw, dict):
                raise ValueError(f"{other}: expected a mapping of the {other} engine's parameters, got {raw!r}")
            try:
                params = params_model.model_validate(raw or {})
            except ValidationError as exc:
                err = exc.errors()[0]
                loc = ".".join(str(x) for x in err["loc"])
                msg = err["msg"]
                if err["type"] == "extra_forbidden":
                    import difflib
                    close = difflib.get_close_matches(str(err["loc"][-1]), params_model.model_fields, n=1)
                    hint = f"; did you mean {close[0]!r}?" if close else ""
                    msg = f"unknown field (allowed: {', '.join(params_model.model_fields)}){hint}"
                raise ValueError(f"{other}.{loc}: {msg}") from None
            if other == name:
                chosen = params
            else:
                # given with a value other than its default (what would change that engine's run)
                default = params_model.model_validate({})
                changed = [f for f in sorted(params.model_fields_set) if getattr(params, f) != getattr(default, f)]
                if changed:
                    unused[other] = [via_alias.get((other, f), f"simulation.{other}.{f}") for f in changed]
        if chosen is None:
            params_model = getattr(ENGINES.get(name), "Params", None)
            chosen = params_model.model_validate({}) if params_model is not None else None
        data["engine_params"] = chosen
        data["unused_params"] = unused
        return data

    @model_serializer(mode="wrap")
    def _with_engine_params(self, handler):
        out = handler(self)
        if self.engine_params is not None:
            out[self.engine] = self.engine_params.model_dump(mode="json")
        return out

    @property
    def kernel(self) -> str | None:
        """``simulation.packet.kernel`` on a packet-engine run (read-side alias), else None: no
        other engine has an event kernel."""
        return self.engine_params.kernel if self.engine == "packet" else None

    @property
    def cell_packets(self) -> int:
        """MTU packets per simulated unit: ``simulation.packet.cell_packets`` on a packet-engine
        run (read-side alias), else 1 (no other engine moves cells; buffers are checked against
        one packet)."""
        return self.engine_params.cell_packets if self.engine == "packet" else 1

    def unused_params_warning(self) -> str | None:
        """One line naming the parameters given for engines other than the one that runs (None if
        there are none): they were validated and are ignored."""
        if not self.unused_params:
            return None
        parts = []
        for eng, fields in self.unused_params.items():
            one = len(fields) == 1
            parts.append(f"{', '.join(fields)} {'is a parameter' if one else 'are parameters'} of the {eng} engine")
        return f"{'; '.join(parts)}: this run's engine ({self.engine}) ignores {'it' if len(parts) == 1 and one else 'them'}"


#: top-level ``simulation`` fields kept as aliases of the packet engine's parameters (they were
#: top-level before it had ``simulation.packet``): alias -> its field in ``simulation.packet``
PACKET_ALIASES = {"kernel": "kernel", "cell_packets": "cell_packets"}


def _merge_aliases(data: dict) -> dict:
    """Move :data:`PACKET_ALIASES` given at the top of ``simulation`` (``data``) into its
    ``packet`` mapping; a value given both ways and disagreeing is a ``ValueError`` naming both.
    Returns ``{("packet", field): "simulation.<alias>"}`` for the fields given by an alias."""
    given = {k: data.pop(k) for k in list(PACKET_ALIASES) if k in data}
    if not given:
        return {}
    block = data.get("packet")
    if block is not None and not isinstance(block, dict):
        return {}              # the packet engine's own check says what is wrong with it
    block = dict(block or {})
    for alias, value in given.items():
        field = PACKET_ALIASES[alias]
        if field in block and block[field] != value:
            raise ValueError(f"{alias}: {value!r} disagrees with simulation.packet.{field}: {block[field]!r} "
                             f"(simulation.{alias} is an alias of simulation.packet.{field}: give one of them, or "
                             f"the same value)")
        block[field] = value
    data["packet"] = block
    return {("packet", PACKET_ALIASES[a]): f"simulation.{a}" for a in given}


class OutputsConfig(BaseModel):
    """What the results folder holds."""

    model_config = STRICT
    dir: str | None = Field(None, description="results folder; default results/<scenario name>-<hash>")
    formats: list[Literal["parquet", "csv"]] = Field(default_factory=lambda: ["parquet", "csv"], min_length=1)
    timeseries_bin: PositiveTime = Field("10us", description="bin width of the goodput time series (10us)")
    link_sample_interval: PositiveTime | Literal["off"] = Field("10us", description=(
        "every this much simulated time, record each link's transmitted bytes and queue; 'off' "
        "disables the link time series"))
    @field_validator("link_sample_interval", mode="before")
    @classmethod
    def _off(cls, v):
        # YAML 1.1 reads a bare `off` (a file's `link_sample_interval: off`, `--set ...=off`) as false
        return "off" if v is False else v

    link_sample_budget: StrictInt = Field(5_000_000, ge=0, description=(
        "at most this many (link, sample) values; sampling stops (and says so) beyond it"))
    latency_rel_error: StrictFloat = Field(0.01, gt=0, le=0.5,
                                     description="relative bin width of the packet-latency histogram")


class Scenario(BaseModel):
    """A whole scenario. ``base_dir`` is where relative file paths in it are resolved."""

    model_config = STRICT
    name: str = Field("scenario", min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN, description=(
        "names the results folder (results/<name>): letters, digits, '_', '.', '-', starting with "
        "a letter, digit or '_' (so never '.', '..' or a path)"))
    description: str = ""
    profile: str = Field("none", description=(
        "deployment profile expanded beneath the scenario's own settings (fabricsim/config/profiles.py): "
        "spectrum_x, ethernet or none"))
    topology: TopologyConfig = Field(default_factory=LeafSpineConfig)
    traffic: TrafficConfig = Field(default_factory=PermutationTraffic)
    routing: RoutingSection = Field(default_factory=lambda: RoutingSection.model_validate({}))
    receiver: ReceiverSection = Field(default_factory=lambda: ReceiverSection.model_validate({}))
    congestion_control: CongestionControlSection = Field(
        default_factory=lambda: CongestionControlSection.model_validate({}))
    nic: NicSection = Field(default_factory=lambda: NicSection.model_validate({}))
    switch: SwitchFeatures = Field(default_factory=SwitchFeatures)
    simulation: SimulationConfig = Field(default_factory=SimulationConfig)
    outputs: OutputsConfig = Field(default_factory=OutputsConfig)

    @model_validator(mode="before")
    @classmethod
    def _default_kinds(cls, data):
        if isinstance(data, dict):
            data = apply_profile(dict(data))
            for section, key, default in (("topology", "kind", "leaf_spine"), ("traffic", "pattern", "permutation")):
                if isinstance(data.get(section), dict) and key not in data[section]:
                    if section == "topology" and "preset" in data[section]:
                        default = "preset"      # topology: {preset: NAME}
                    data[section] = {key: default, **data[section]}
        return data

    @model_validator(mode="after")
    def _cross(self):
        sim = self.simulation
        if sim.header >= sim.mtu * 4:
            raise ValueError(f"simulation.header: {sim.header} B overhead is implausible for a "
                             f"{sim.mtu} B MTU (allowed: less than 4 x mtu)")
        unit = sim.cell_packets * (sim.mtu + sim.header)
        small = small_buffer(self.topology, unit, ("topology",))
        pool = self.switch.buffer
        if small is None and pool.admission == "dynamic" and pool.size is not None and pool.size < unit:
            small = (("switch", "buffer", "size"), self.switch.buffer.size)
        if small is not None:
            raise ValueError(buffer_message(small, sim))
        start = getattr(self.traffic, "start", None)
        if start is not None and start >= sim.time_limit:
            from .. import units
            raise ValueError(f"traffic.start: {units.exact_time(start)} is not before simulation.time_limit "
                             f"({units.exact_time(sim.time_limit)}), so nothing would be sent (allowed: a start "
                             f"before the time limit)")
        # an engine may refuse combinations it has no model for (engine contract: check_scenario)
        from ..engine import ENGINES
        check = getattr(ENGINES.get(sim.engine), "check_scenario", None)
        if check is not None:
            check(self)
        return self


def small_buffer(cfg, unit_bytes: int, path: tuple = ()) -> tuple[tuple, int] | None:
    """``(field path, size)`` of the first switch buffer in the topology config ``cfg`` that
    cannot hold one unit of ``unit_bytes`` on the wire (one packet: mtu + header, times
    cell_packets), else None. NVLink chip buffers count only with ``transport: roce`` (credit
    flow control does not use them)."""
    from .topology import BufferSpec, NvlinkSpec
    if isinstance(cfg, BufferSpec):
        size = cfg.size_bytes
        return (path + ("size",), size) if size is not None and size < unit_bytes else None
    if isinstance(cfg, NvlinkSpec) and cfg.transport != "roce":
        return None
    if isinstance(cfg, BaseModel):
        for name in type(cfg).model_fields:
            found = small_buffer(getattr(cfg, name), unit_bytes, path + (name,))
            if found is not None:
                return found
    elif isinstance(cfg, list):
        for i, item in enumerate(cfg):
            found = small_buffer(item, unit_bytes, path + (i,))
            if found is not None:
                return found
    return None


def buffer_message(small: tuple[tuple, int], sim: SimulationConfig, with_field: bool = True) -> str:
    """The error for :func:`small_buffer`'s finding."""
    loc, size = small
    unit = sim.cell_packets * (sim.mtu + sim.header)
    cells = f" x cell_packets {sim.cell_packets}" if sim.cell_packets > 1 else ""
    head = f"{format_field(loc)}: " if with_field else ""
    return (f"{head}a {size} B buffer cannot hold one packet of {unit} B (simulation.mtu {sim.mtu} B + header "
            f"{sim.header} B{cells}) (allowed: at least {unit} B, or unbounded)")


def check_topology_file_buffers(loaded: "LoadedScenario") -> None:
    """A ``kind: file`` topology's switch buffers against one packet of the scenario (the file is
    read and validated, not built; a file that does not load is reported when it is built)."""
    from .topology import TopologyFileRef
    topo = loaded.scenario.topology
    if not isinstance(topo, TopologyFileRef):
        return
    path = loaded.resolve_path(topo.path)
    if not path.is_file():
        return
    try:
        data, root = load_yaml(path)
        from ..topology import _FILE_MODELS
        model = _FILE_MODELS.get(data.get("kind", "leaf_spine")) if isinstance(data, dict) else None
        cfg = model.model_validate(data) if model is not None else None
    except (ConfigError, ValidationError, TypeError):
        return
    sim = loaded.scenario.simulation
    small = small_buffer(cfg, sim.cell_packets * (sim.mtu + sim.header))
    if small is not None:
        from ..errors import TopologyError
        raise TopologyError(buffer_message(small, sim, with_field=False), source=str(path),
                            field=format_field(small[0]), line=_node_line(root, small[0]) if root else None)


# --------------------------------------------------------------------------------------------
# loading


def _node_line(node: yaml.Node | None, path: tuple) -> int | None:
    """1-based line of the YAML entry at ``path``: the line of its key (or list item), else of
    its deepest existing parent."""
    if node is None:
        return None
    line = node.start_mark.line + 1
    for key in path:
        if isinstance(node, yaml.MappingNode):
            found = next(((k, v) for k, v in node.value if getattr(k, "value", None) == str(key)), None)
            if found is None:
                break
            line = found[0].start_mark.line + 1
            node = found[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and 0 <= key < len(node.value):
            node = node.value[key]
            line = node.start_mark.line + 1
        else:
            break
    return line


def union_tags() -> tuple[set[str], set[str]]:
    """``(sections, tags)``: the scenario sections holding a discriminated union (topology,
    traffic) and every tag of their members (``kind: ...``, ``pattern: ...``), read from the
    models, so a new topology kind or traffic pattern is covered without listing it here."""
    import typing
    sections, tags = set(), set()
    for name, fld in Scenario.model_fields.items():
        disc = fld.discriminator
        if not isinstance(disc, str):
            continue
        sections.add(name)
        for m in typing.get_args(fld.annotation):
            if isinstance(m, type) and issubclass(m, BaseModel) and disc in m.model_fields:
                tags.add(str(m.model_fields[disc].default))
    return sections, tags


def _clean_loc(loc: tuple) -> tuple:
    """Drop pydantic's union-tag and validator entries from an error location.

    A union tag is only dropped right after the section holding the union (``topology``,
    ``traffic``) or at the very start (a topology file), so a user key that happens to be
    spelled like a tag (``topology: {file: x}``) is still reported.
    """
    sections, tags = union_tags()
    out = []
    for i, part in enumerate(loc):
        if isinstance(part, str):
            if part.startswith("function-") or "[" in part or part.endswith("Config"):
                continue
            if part in tags and (i == 0 or (i == 1 and loc[0] in sections)):
                continue
        out.append(part)
    return tuple(out)


def format_field(loc) -> str | None:
    """``('topology', 'links', 1, 'b')`` -> ``'topology.links[1].b'``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or None


def parse_field(field: str) -> tuple:
    """Inverse of :func:`format_field`: ``'topology.links[1].b'`` -> ``('topology', 'links', 1, 'b')``."""
    out: list = []
    for part in field.split("."):
        name, *idx = part.split("[")
        if name:
            out.append(name)
        for i in idx:
            i = i.rstrip("]")
            out.append(int(i) if i.isdigit() else i)
    return tuple(out)


#: longest repr of a bad value in an error message (a value may be a huge nested list)
SHOWN_CHARS = 80


class _Shown:
    """A value as an error message shows it: a repr (``reprlib``: a few items, a few levels)
    cut to :data:`SHOWN_CHARS` characters, never built in full first."""

    def __init__(self, value):
        self.value = value

    def __repr__(self) -> str:
        import reprlib
        r = reprlib.Repr()
        r.maxlevel, r.maxlist, r.maxtuple, r.maxdict, r.maxset = 3, 6, 6, 6, 6
        r.maxstring = r.maxother = r.maxlong = SHOWN_CHARS
        text = r.repr(self.value) if isinstance(self.value, (list, tuple, dict, set)) else repr(self.value)
        return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 3] + "..."


def _bound_message(err: dict) -> str | None:
    """Pydantic's generic constraint messages -> 'got X (allowed: ...)'."""
    ctx = err.get("ctx") or {}
    got = _Shown(err.get("input"))
    t = err["type"]
    bounds = {"greater_than_equal": (">=", "ge"), "greater_than": (">", "gt"),
              "less_than_equal": ("<=", "le"), "less_than": ("<", "lt")}
    if t in bounds:
        op, key = bounds[t]
        return f"got {got!r} (allowed: {op} {ctx.get(key)})"
    if t in ("int_type", "int_parsing", "int_from_float"):
        return f"got {got!r} (allowed: a whole number)"
    if t in ("float_type", "float_parsing"):
        return f"got {got!r} (allowed: a number)"
    if t in ("string_type",):
        return f"got {got!r} (allowed: a string)"
    if t in ("bool_type", "bool_parsing"):
        return f"got {got!r} (allowed: true or false)"
    if t == "missing":
        return "required field is missing"
    if t in ("model_type", "model_attributes_type", "dict_type"):
        return f"got {got!r} (allowed: a mapping of fields)"
    if t == "list_type":
        return f"got {got!r} (allowed: a list)"
    if t == "string_pattern_mismatch":
        return (f"got {got!r} (allowed: letters, digits, '_', '.', '-', starting with a letter, digit "
                f"or '_')")
    if t == "string_too_long":
        return f"got {len(got.value)} characters (allowed: at most {ctx.get('max_length')})"
    if t in ("too_short", "too_long"):
        return err["msg"].replace("List should", "list should")
    return None


def _model_of(annotation, value):
    """The pydantic model class an annotation stands for, given the input ``value`` (picks the
    member of a discriminated union by its tag)."""
    import types
    import typing
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _model_of(typing.get_args(annotation)[0], value)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        models = [m for m in (_model_of(a, value) for a in members) if m is not None]
        if len(models) == 1:
            return models[0]
        for m in models:
            for tag in ("kind", "pattern"):
                fld = m.model_fields.get(tag)
                if fld is not None and isinstance(value, dict) and value.get(tag, fld.default) == fld.default:
                    return m
        return None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def allowed_fields(model, loc: tuple, data) -> list[str] | None:
    """Field names allowed in the mapping at ``loc`` under ``model`` (None if unknown)."""
    import typing
    from .policy import PolicySection
    for key in loc:
        if isinstance(key, int):
            data = data[key] if isinstance(data, list) and key < len(data) else None
            continue
        if model is None or not isinstance(data, dict):
            return None
        if issubclass(model, PolicySection):
            return None  # parameters of a policy: handled below
        fld = model.model_fields.get(key)
        if fld is None:
            return None
        data = data.get(key)
        ann = fld.annotation
        while typing.get_origin(ann) is list:
            ann = typing.get_args(ann)[0]
        model = _model_of(ann, data if not isinstance(data, list) else (data[0] if data else None))
    if model is None:
        return None
    if issubclass(model, PolicySection):
        name = data.get(model.name_field, model.default_name) if isinstance(data, dict) else model.default_name
        try:
            impl = model.registry().get(name)
        except Exception:
            return None
        params = getattr(impl, "Params", None)
        return [model.name_field] + (sorted(params.model_fields) if params else [])
    names = [n for n, f in model.model_fields.items() if not f.exclude]
    if model is SimulationConfig:        # each engine's parameter mapping, keyed by its name
        from ..engine import ENGINES
        names += [n for n in ENGINES.names() if getattr(ENGINES.get(n), "Params", None) is not None]
        names += list(PACKET_ALIASES)
    return sorted(names)


def _union_error(errors: list) -> tuple[dict, str | None]:
    """The error to report, and the literal alternatives of its field (``'unbounded'``, ``'auto'``)
    when the field is a union of a literal and a value: the value's own error says what is wrong
    with it ('-1: a size must not be negative'), where the literal's ('should be unbounded') hides it."""
    first = errors[0]
    loc = tuple(first["loc"])
    if not loc or not isinstance(loc[-1], str) or not (loc[-1].startswith("literal[") or loc[-1].startswith("function-")):
        return first, None
    siblings = [e for e in errors if tuple(e["loc"])[:-1] == loc[:-1] and len(e["loc"]) == len(loc)]
    values = [e for e in siblings if e["type"] != "literal_error"]
    literals = [e for e in siblings if e["type"] == "literal_error"]
    if not values or not literals:
        return first, None
    return values[0], " or ".join(str((e.get("ctx") or {}).get("expected")) for e in literals)


def validation_to_config_error(exc: ValidationError, source: str, root: yaml.Node | None,
                               prefix: tuple = (), data=None, model=None) -> ConfigError:
    """First pydantic error -> one-line ConfigError naming file, field path (and line).

    With the input ``data`` and the root ``model``, unknown fields list the allowed ones."""
    errors = exc.errors()
    err, also = _union_error(errors)
    raw = tuple(err["loc"])
    if err["type"] == "extra_forbidden" and raw:
        # the last entry is the user's own key: kept even when it is spelled like a union tag
        # (``preset: x`` at the top of a file whose model has no such field)
        loc = prefix + _clean_loc(raw[:-1]) + raw[-1:]
    else:
        loc = prefix + _clean_loc(raw)
    msg = err["msg"]
    for p in ("Value error, ", "Assertion failed, "):
        msg = msg.replace(p, "")
    # validators that name their own sub-field write "field: message"
    if ": " in msg and msg.split(": ", 1)[0].replace("_", "").replace(".", "").isalnum() \
            and " " not in msg.split(": ", 1)[0]:
        sub, msg = msg.split(": ", 1)
        loc = loc + tuple(sub.split("."))
    ctx = err.get("ctx") or {}
    if err["type"] == "extra_forbidden":
        allowed = None
        if model is not None:
            try:
                allowed = allowed_fields(model, loc[len(prefix):-1], data)
            except Exception:  # best effort: never hide the real error
                allowed = None
        if allowed:
            import difflib
            close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            msg = f"unknown field (allowed: {', '.join(allowed)}){hint}"
        else:
            msg = "unknown field (check spelling)"
    elif err["type"] == "union_tag_invalid":
        key = str(ctx.get("discriminator", "kind")).strip("'")
        loc = loc + (key,)
        msg = f"got {ctx.get('tag')!r} (allowed: {ctx.get('expected_tags')})"
    elif err["type"] == "literal_error":
        expected = ctx.get("expected")
        if expected:
            msg = f"got {_Shown(err.get('input'))!r} (allowed: {expected})"
    else:
        msg = _bound_message(err) or msg
    if also:
        msg = f"{msg} (or {also})"
    msg = " ".join(msg.split())  # one line
    return ConfigError(msg, source=source, field=format_field(loc),
                       line=_node_line(root, loc) if root else None)


def _override_of(field: str | None, overrides) -> tuple[str, str] | None:
    """``(key, how it was given)`` of the override that set ``field`` (or one of its parents or children)."""
    if not field:
        return None
    try:
        loc = parse_field(field)
    except ValueError:
        return None
    for key, value, *label in reversed(list(overrides)):
        k = tuple(key.split("."))
        n = min(len(k), len(loc))
        if n and tuple(str(x) for x in loc[:n]) == k[:n]:
            return key, (label[0] if label else f"--set {key}={value}")
    return None


def mark_override(exc: ConfigError, overrides) -> ConfigError:
    """If ``exc`` is about a field given by ``--set`` (or ``--seed``), say so and drop the file
    line, which would point at the value the override replaced."""
    hit = _override_of(exc.field, overrides)
    if hit is not None and not exc.from_override:
        _, shown = hit
        exc.from_override = True
        exc.line = None
        exc.message = f"{exc.message} (from {shown})"
        exc.args = (exc.one_line(),)
    return exc


def locate(exc: ConfigError, path: str | Path, root: yaml.Node | None = None, overrides=()) -> ConfigError:
    """Fill in the line of an error raised after validation (topology or traffic building)
    when it names a field of the YAML file ``path``. ``overrides`` are as returned by
    :func:`parse_overrides`; errors about them get no line. Returns ``exc`` (updated in place)."""
    if exc.source != str(path) or not exc.field:
        return exc
    mark_override(exc, overrides)
    if exc.line is not None or exc.from_override:
        return exc
    if root is None:
        try:
            _, root = load_yaml(path)
        except ConfigError:
            return exc
    if root is None:
        return exc
    try:
        loc = parse_field(exc.field)
    except ValueError:
        return exc
    if loc and _has_path(root, loc[:1]):
        exc.line = _node_line(root, loc)
        exc.args = (exc.one_line(),)
    return exc


def _has_path(node, path) -> bool:
    for key in path:
        if not isinstance(node, yaml.MappingNode):
            return False
        node = next((v for k, v in node.value if k.value == str(key)), None)
        if node is None:
            return False
    return True


def load_yaml(path: str | Path) -> tuple[Any, yaml.Node | None]:
    """Read a YAML file -> (data, node tree for line numbers). Raises ConfigError."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise ConfigError("file not found", source=str(path)) from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read: {exc.__class__.__name__} (allowed: a readable UTF-8 YAML file)", source=str(path)) from None
    return load_yaml_text(text, str(path))


def set_path(data: dict, dotted: str, value: Any, source: str = "--set") -> None:
    """Apply one ``--set a.b.c=value`` override to nested dicts (value parsed as YAML)."""
    keys = dotted.split(".")
    if not dotted or any(not k for k in keys):
        raise ConfigError(f"--set {dotted}={value}: empty key in the field path", source=source)
    cur = data
    for i, k in enumerate(keys[:-1]):
        nxt = cur.get(k)
        if nxt is None:
            nxt = cur[k] = {}
        if not isinstance(nxt, dict):
            raise ConfigError(f"{'.'.join(keys[:i + 1])} is a value, not a section", field=dotted, source=source)
        cur = nxt
    cur[keys[-1]] = value


def parse_overrides(items: list[str] | tuple[str, ...], source: str = "--set") -> list[tuple[str, Any, str]]:
    """``["a.b=1"]`` -> ``[("a.b", 1, "--set a.b=1")]`` (values parsed as YAML; the last item is how
    the override was written, for error messages)."""
    out = []
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected KEY.PATH=VALUE", source=source)
        key, raw = item.split("=", 1)
        try:
            value = load_yaml_value(raw, "--set") if raw != "" else ""
        except ConfigError as exc:   # a value beyond the YAML limits (duplicate keys, aliases)
            err = ConfigError(f"{exc.message} (from --set {item})", source=source, field=key.strip())
            err.from_override = True
            raise err from None
        out.append((key.strip(), value, f"--set {item}"))
    return out


class LoadedScenario:
    """A validated scenario with where it came from (for resolving relative paths)."""

    def __init__(self, scenario: Scenario, source: str, base_dir: Path):
        self.scenario = scenario
        self.source = source
        self.base_dir = base_dir
        self.root: yaml.Node | None = None  # YAML node tree, for line numbers
        self.overrides: list[tuple] = []  # (key, value, as written) applied by --set / --seed

    def input_files(self) -> list[Path]:
        """The files the scenario reads besides itself (a topology file, a message list or a
        trace), resolved as the run resolves them; their contents name the run as much as the
        scenario's text does (:func:`fabricsim.analysis.writer.default_results_dir`)."""
        sc = self.scenario
        refs = [getattr(sc.topology, "path", None) if sc.topology.kind == "file" else None,
                getattr(sc.traffic, "path", None) if sc.traffic.pattern in ("csv", "trace") else None]
        return [self.resolve_path(r) for r in refs if isinstance(r, str)]

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
    applied: list = parse_overrides(list(overrides), source=name)
    for key, value, _ in applied:
        try:
            set_path(data, key, value, source=name)
        except ConfigError as exc:
            raise mark_override(exc, applied) from None
    if seed is not None:
        set_path(data, "simulation.seed", seed, source=name)
        applied.append(("simulation.seed", seed, f"--seed {seed}"))
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise mark_override(validation_to_config_error(exc, name, root, data=data, model=Scenario),
                            applied) from None
    loaded = LoadedScenario(scenario, name, base)
    loaded.root = root
    loaded.overrides = applied
    check_topology_file_buffers(loaded)
    return loaded
