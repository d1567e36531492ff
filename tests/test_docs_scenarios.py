"""docs/scenarios.md names every topology kind and traffic pattern the config accepts."""
from __future__ import annotations

import typing

import pytest

from fabricsim.config.topology import TopologyConfig
from fabricsim.config.traffic import TrafficConfig

from conftest import REPO

DOC = (REPO / "docs" / "scenarios.md").read_text()


def _tags(union, field):
    members = typing.get_args(typing.get_args(union)[0])
    return [m.model_fields[field].default for m in members]


@pytest.mark.parametrize("kind", _tags(TopologyConfig, "kind"))
def test_every_topology_kind_is_documented(kind):
    assert f"`{kind}`" in DOC


@pytest.mark.parametrize("pattern", _tags(TrafficConfig, "pattern"))
def test_every_traffic_pattern_is_documented(pattern):
    row = next(line for line in DOC.splitlines() if line.startswith("| `traffic.pattern`"))
    assert f"`{pattern}`" in row
