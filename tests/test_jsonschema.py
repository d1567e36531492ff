"""The exported JSON Schema of a scenario file (fabricsim/config/jsonschema.py).

Every shipped scenario validates against it, unit fields take unit strings, malformed files are
rejected, and the parameters of every registered policy (including one registered later) appear.
"""
from __future__ import annotations

import copy
import json

import pytest
import yaml

jsonschema = pytest.importorskip("jsonschema")

from fabricsim.config.jsonschema import scenario_json_schema  # noqa: E402
from fabricsim.config.scenario import load_scenario  # noqa: E402
from fabricsim.config.types import Time  # noqa: E402
from fabricsim.routing import ROUTING  # noqa: E402
from fabricsim.routing.base import PolicyParams, RoutingPolicy  # noqa: E402

from conftest import BASE_SCENARIO, SCENARIOS, TOPOLOGIES  # noqa: E402

FILES = sorted(SCENARIOS.glob("*.yaml"))


@pytest.fixture(scope="module")
def validator():
    schema = scenario_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_schema_is_draft_2020_12_and_json():
    schema = scenario_json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert json.loads(json.dumps(schema)) == schema


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_every_shipped_scenario_validates(path, validator):
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(yaml.safe_load(path.read_text()))]
    assert not errors, errors


@pytest.mark.parametrize("path", sorted(TOPOLOGIES.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_topology_validates_as_a_section(path, validator):
    assert validator.is_valid({"topology": yaml.safe_load(path.read_text())})


@pytest.mark.parametrize("field, value", [
    (("simulation", "time_limit"), "1.5us"), (("simulation", "time_limit"), "10 ms"),
    (("simulation", "mtu"), "4KiB"), (("simulation", "mtu"), 4096), (("simulation", "header"), "82B"),
    (("topology", "host_link"), {"rate": "800Gbps", "delay": "500ns"}),
    (("topology", "host_link"), {"rate": "1.6Tbps", "delay": 0}),
    (("traffic", "start"), "0"),
])
def test_unit_fields_take_unit_strings_and_whole_numbers(field, value, validator):
    data = yaml.safe_load(BASE_SCENARIO)
    data[field[0]][field[1]] = value
    assert validator.is_valid(data), list(validator.iter_errors(data))[0].message
    load_scenario(data)  # and the loader agrees


MALFORMED = {
    "unknown top-level field": {"bogus": 1},
    "unknown routing policy": {"routing": {"policy": "spary"}},
    "parameter of another policy": {"routing": {"policy": "ecmp", "gap": "5us"}},
    "unknown cc parameter": {"congestion_control": {"algorithm": "dcqcn", "bogus": 1}},
    "size in bits": {"simulation": {"mtu": "4Kb"}},
    "negative size": {"simulation": {"mtu": -1}},
    "bare time": {"simulation": {"time_limit": 10}},
    "unknown time unit": {"simulation": {"time_limit": "10 fortnights"}},
    "size beyond int64": {"simulation": {"mtu": 2**63}},
    "unknown engine": {"simulation": {"engine": "fluid"}},
    "unknown profile": {"profile": "spectrumx"},
    "explicit without nodes": {"topology": {"kind": "explicit"}},
    "cluster fields without kind": {"topology": {"racks": 2}},
    "unknown field under a trace": {"traffic": {"pattern": "trace", "path": "t.csv", "bogus": 1}},
    "name with a path separator": {"name": "a/b"},
    "name that is the parent folder": {"name": ".."},
    "wrong type": {"simulation": {"seed": "one"}},
}


@pytest.mark.parametrize("data", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_scenarios_are_rejected(data, validator):
    assert not validator.is_valid(data)


def test_every_registered_policy_has_a_branch_with_its_parameters():
    from fabricsim.config.scenario import Scenario
    from fabricsim.config.policy import PolicySection
    schema = scenario_json_schema()
    for name, fld in Scenario.model_fields.items():
        cls = fld.annotation
        if not (isinstance(cls, type) and issubclass(cls, PolicySection)):
            continue
        sec = schema["$defs"][cls.__name__]
        reg = cls.registry()
        branches = {b["if"]["properties"][cls.name_field]["const"]: b["then"]
                    for b in sec["anyOf"][2]["allOf"] if "properties" in b["if"]}
        assert sorted(branches) == reg.names(), name
        for policy, then in branches.items():
            params = getattr(reg.get(policy), "Params", None)
            want = {cls.name_field} | set(params.model_fields if params else ())
            assert set(then["properties"]) == want, (name, policy)


class _TestPolicy(RoutingPolicy):
    class Params(PolicyParams):
        wobble: Time = "3us"


def test_a_newly_registered_policy_appears_with_its_parameters(monkeypatch):
    monkeypatch.setitem(ROUTING._items, "wobbly", _TestPolicy)
    validator = jsonschema.Draft202012Validator(scenario_json_schema())
    data = yaml.safe_load(BASE_SCENARIO)
    data["routing"] = {"policy": "wobbly", "wobble": "2us"}
    assert validator.is_valid(data)
    assert not validator.is_valid({**data, "routing": {"policy": "wobbly", "wobble": "2 fortnights"}})
    assert not validator.is_valid({**data, "routing": {"policy": "wobbly", "wibble": "2us"}})
    assert not validator.is_valid({**data, "routing": {"policy": "ecmp", "wobble": "2us"}})


def test_schema_accepts_what_the_loader_accepts_for_each_policy(validator):
    """Each registered policy with its defaults, given by name: the schema and loader agree."""
    from fabricsim.config.policy import PolicySection
    from fabricsim.config.scenario import Scenario
    base = yaml.safe_load(BASE_SCENARIO)
    for name, fld in Scenario.model_fields.items():
        cls = fld.annotation
        if not (isinstance(cls, type) and issubclass(cls, PolicySection)):
            continue
        for policy in cls.registry().names():
            data = copy.deepcopy(base)
            data[name] = {cls.name_field: policy}
            try:
                load_scenario(data)
            except Exception:
                continue  # a model that needs another section set (checked by the loader)
            assert validator.is_valid(data), (name, policy)


@pytest.mark.parametrize("path", sorted(TOPOLOGIES.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_topology_file_validates_against_the_topology_schema(path):
    from fabricsim.config.jsonschema import topology_json_schema
    v = jsonschema.Draft202012Validator(topology_json_schema())
    assert v.is_valid(yaml.safe_load(path.read_text()))


def test_topology_schema_rejects_a_file_pointing_at_a_file_and_unknown_kinds():
    from fabricsim.config.jsonschema import topology_json_schema
    v = jsonschema.Draft202012Validator(topology_json_schema())
    assert not v.is_valid({"kind": "file", "path": "x.yaml"})
    assert not v.is_valid({"kind": "torus"})
    assert v.is_valid({"hosts_per_leaf": 2})        # no kind: a leaf-spine, as the loader reads it


def test_schema_text_is_the_schema_as_json():
    from fabricsim.config.jsonschema import schema_text
    from fabricsim.errors import ConfigError
    assert json.loads(schema_text()) == scenario_json_schema()
    assert json.loads(schema_text("topology"))["$id"].endswith("topology.schema.json")
    with pytest.raises(ConfigError, match="allowed: scenario, topology"):
        schema_text("bogus")


def test_module_doctests():
    import doctest
    from fabricsim.config import jsonschema as module
    assert doctest.testmod(module).failed == 0
