"""The JSON Schema (draft 2020-12) of a scenario file, for editors and CI linters.

:func:`scenario_json_schema` starts from the pydantic models of :mod:`fabricsim.config` and adds
what pydantic cannot see:

* unit fields (``Rate``, ``Size``, ``Time``: :mod:`fabricsim.config.types`) are "a whole number or
  a unit string" with the pattern :func:`fabricsim.units.unit_pattern` builds (``"800Gbps"``,
  ``"4KiB"``, ``"1.5us"``);
* sections whose model is chosen by name (``routing.policy``, ``receiver.model``,
  ``congestion_control.algorithm``, ``nic.plane_split``) get one ``if``/``then`` branch per name
  registered in the section's registry, allowing exactly that model's ``Params``; a model
  registered later (a plug-in) appears as soon as it is registered;
* ``simulation.engine`` lists the registered engines, and each engine with parameters has its
  key (``simulation: {engine: flow, flow: {...}}``, ``packet: {kernel: compiled}``); the
  top-level ``simulation.kernel`` and ``cell_packets`` are listed as aliases of ``packet``'s;
* ``profile`` lists the registered deployment profiles;
* a topology without ``kind`` is a leaf-spine and traffic without ``pattern`` a permutation (the
  defaults of :class:`~fabricsim.config.scenario.Scenario`), every other member of those unions
  needs its tag.

The schema checks a file's shape: what it cannot express (cross-field rules such as ``kmin <=
kmax``, GPU ids against the topology, a profile's settings merged under the file) is left to
``fabricsim validate``. A section naming no model accepts the parameters of any registered model
of it, since a profile may choose the model.

>>> schema = scenario_json_schema()
>>> schema["$schema"]
'https://json-schema.org/draft/2020-12/schema'
>>> "flowlet" in schema["$defs"]["RoutingSection"]["anyOf"][0]["enum"]
True
"""
from __future__ import annotations

import copy
import typing
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from .policy import PolicySection
from .scenario import PACKET_ALIASES, Scenario, SimulationConfig

DRAFT = "https://json-schema.org/draft/2020-12/schema"
_REF = "#/$defs/{model}"


def _params_model(impl) -> type[BaseModel] | None:
    params = getattr(impl, "Params", None)
    return params if isinstance(params, type) and issubclass(params, BaseModel) else None


def _policy_sections() -> dict[type[PolicySection], str]:
    """The scenario's named-model sections: class -> field name."""
    out = {}
    for name, fld in Scenario.model_fields.items():
        ann = fld.annotation
        if isinstance(ann, type) and issubclass(ann, PolicySection):
            out[ann] = name
    return out


def _engines():
    from ..engine import ENGINES
    return ENGINES


def _params_object(props_of: dict, name_field: str | None, name: str | None, params: str | None) -> dict:
    """An object schema allowing exactly the parameters of the model ``name`` (its ``Params``'s
    definition ``params`` in ``$defs``, or none), plus the field naming it."""
    out: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
    if name_field is not None:
        out["properties"][name_field] = {"const": name}
    if params is not None:
        d = props_of[params]
        out["properties"].update(copy.deepcopy(d.get("properties", {})))
        if d.get("required"):
            out["required"] = list(d["required"])
    return out


def _section_schema(cls: type[PolicySection], defs: dict, refs: dict) -> dict:
    """One branch per registered name of ``cls.registry()`` (see module doc)."""
    reg = cls.registry()
    nf = cls.name_field
    names = reg.names()
    param_def = {n: refs.get(_params_model(reg.get(n))) for n in names}
    branches = [{"if": {"required": [nf], "properties": {nf: {"const": n}}},
                 "then": _params_object(defs, nf, n, param_def[n])} for n in names]
    unnamed = {"if": {"not": {"required": [nf]}},
               "then": {"anyOf": [_params_object(defs, None, None, param_def[n]) for n in names]}}
    return {
        "title": cls.__name__,
        "description": (cls.__doc__ or "").strip() + f" Default {nf}: {cls.default_name}.",
        "anyOf": [
            {"type": "string", "enum": names, "description": f"shorthand for {{{nf}: NAME}}"},
            {"type": "null"},
            {"type": "object", "properties": {nf: {"type": "string", "enum": names}},
             "allOf": branches + [unnamed]},
        ],
    }


def _require_tags(node, defaults: dict[str, str]) -> None:
    """In every discriminated union under ``node``, require the tag of each member except the
    default one of a scenario section (``defaults``: member $ref -> section)."""
    if isinstance(node, dict):
        if "discriminator" in node and "oneOf" in node:
            tag = node["discriminator"]["propertyName"]
            node["oneOf"] = [m if m.get("$ref") in defaults else {**m, "required": [tag]}
                             for m in node["oneOf"]]
        for v in node.values():
            _require_tags(v, defaults)
    elif isinstance(node, list):
        for v in node:
            _require_tags(v, defaults)


def _union_defaults(defs: dict) -> set[str]:
    """$refs of the members a scenario section holding a union defaults to when its tag is absent
    (the type of the section's default value)."""
    out = set()
    for fld in Scenario.model_fields.values():
        if not typing.get_args(fld.annotation):
            continue
        default = fld.get_default(call_default_factory=True)
        if isinstance(default, BaseModel) and type(default).__name__ in defs:
            out.add(_REF.format(model=type(default).__name__))
    return out


def scenario_json_schema() -> dict:
    """The JSON Schema (draft 2020-12) of a scenario file, built from the config models and the
    registries at call time (see module doc). Validates a YAML scenario loaded as data:

    >>> import jsonschema, yaml                                             # doctest: +SKIP
    >>> jsonschema.validate(yaml.safe_load(open("scenarios/quickstart.yaml")),
    ...                     scenario_json_schema())                          # doctest: +SKIP
    """
    from .profiles import PROFILES
    sections = _policy_sections()
    models: list[type[BaseModel]] = [Scenario]
    for cls in sections:
        reg = cls.registry()
        models += [p for p in (_params_model(reg.get(n)) for n in reg.names()) if p is not None]
    engines = _engines()
    models += [p for p in (_params_model(engines.get(n)) for n in engines.names()) if p is not None]
    models = list(dict.fromkeys(models))          # a Params shared by two models: once
    keys, top = models_json_schema([(m, "validation") for m in models], ref_template=_REF)
    defs = top["$defs"]
    refs = {m: keys[(m, "validation")]["$ref"] for m in models}
    names = {m: r.rsplit("/", 1)[1] for m, r in refs.items()}
    # policy sections: their pydantic shape (name, params) is internal; the file names a model
    for cls in sections:
        defs[cls.__name__] = _section_schema(cls, defs, names)
    # engines and their parameter keys
    sim = defs[SimulationConfig.__name__]
    sim["properties"].pop("engine_params", None)
    sim["properties"].pop("unused_params", None)
    sim["properties"]["engine"]["enum"] = engines.names()
    for n in engines.names():
        p = _params_model(engines.get(n))
        if p is not None:
            sim["properties"][n] = {"anyOf": [{"$ref": refs[p]}, {"type": "null"}],
                                    "description": f"parameters of the {n} engine"}
    # the top-level aliases of the packet engine's parameters (SimulationConfig: PACKET_ALIASES)
    packet = _params_model(engines.get("packet")) if "packet" in engines else None
    if packet is not None:
        for alias, fld in PACKET_ALIASES.items():
            prop = copy.deepcopy(defs[names[packet]]["properties"][fld])
            prop["description"] = (f"alias of simulation.packet.{fld} (a value given both ways must agree): "
                                   + prop.get("description", ""))
            sim["properties"][alias] = prop
    root = defs.pop(names[Scenario])
    root["properties"]["profile"]["enum"] = PROFILES.names()
    # ``topology: {preset: NAME}`` may leave out ``kind: preset`` (Scenario._default_kinds): its
    # member needs no tag, as its required ``preset`` key tells it from the leaf-spine default
    from .topology import TopologyPresetRef
    _require_tags(root, _union_defaults(defs) | {_REF.format(model=TopologyPresetRef.__name__)})
    _require_tags(defs, set())
    return {"$schema": DRAFT, "$id": "https://fabricsim/scenario.schema.json", **root, "$defs": defs}



def topology_json_schema() -> dict:
    """The JSON Schema (draft 2020-12) of a topology file under topologies/: the scenario's
    ``topology`` section without ``kind: file``, ``preset`` or ``plugin`` (a file holds a topology
    itself); as in a
    scenario, a file without ``kind`` is a leaf-spine.

    >>> sorted(topology_json_schema()["oneOf"][0])
    ['$ref']
    """
    from .topology import TopologyFileRef, TopologyPluginRef, TopologyPresetRef
    full = scenario_json_schema()
    section = copy.deepcopy(full["properties"]["topology"])
    # a file holds a topology itself: it does not point at another file, a preset or a plug-in
    refs = {_REF.format(model=m.__name__) for m in (TopologyFileRef, TopologyPresetRef, TopologyPluginRef)}
    section["oneOf"] = [m for m in section["oneOf"] if m.get("$ref") not in refs]
    mapping = section.get("discriminator", {}).get("mapping", {})
    section.get("discriminator", {})["mapping"] = {k: v for k, v in mapping.items() if v not in refs}
    section.pop("default", None)
    return {"$schema": DRAFT, "$id": "https://fabricsim/topology.schema.json",
            "title": "fabricsim topology file", **section, "$defs": full["$defs"]}


def schema_text(kind: str = "scenario") -> str:
    """``kind`` ("scenario" or "topology") schema as indented JSON text, what ``fabricsim schema``
    prints."""
    import json
    builders = {"scenario": scenario_json_schema, "topology": topology_json_schema}
    if kind not in builders:
        from ..errors import ConfigError
        raise ConfigError(f"got {kind!r} (allowed: {', '.join(builders)})", field="schema")
    return json.dumps(builders[kind](), indent=2, sort_keys=False) + "\n"
