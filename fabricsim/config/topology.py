"""Topology section of a scenario: a leaf-spine builder, an explicit node/link list, or a file.

``kind: leaf_spine`` builds a two-tier Clos; ``kind: explicit`` lists nodes and links;
``kind: file`` points at a YAML file under topologies/ holding either of the other two.
"""
from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, Field, StrictFloat, StrictInt, model_validator

from .types import STRICT, PositiveSize, PositiveTime, Rate, Time


class LinkSpec(BaseModel):
    """Speed and one-way propagation delay of one tier's links."""

    model_config = STRICT
    rate: Rate = Field("400Gbps", description="line rate, e.g. 400Gbps")
    delay: Time = Field("500ns", description="one-way propagation delay, e.g. 500ns (about 100 m of fibre)")


class BufferSpec(BaseModel):
    """Switch packet buffer: per egress port, or one pool shared by all ports of a switch.

    ``size: unbounded`` (the default until loss recovery exists) never drops.
    """

    model_config = STRICT
    mode: Literal["per_port", "shared"] = "per_port"
    size: Union[Literal["unbounded"], PositiveSize] = "unbounded"

    @property
    def size_bytes(self) -> int | None:
        return None if self.size == "unbounded" else int(self.size)


class LeafSpineConfig(BaseModel):
    """Two-tier leaf-spine (folded Clos). Every leaf connects to every spine with
    ``links_per_spine`` parallel links; hosts attach to one leaf each.

    ``oversubscription`` (host bandwidth / uplink bandwidth per leaf), when given, must agree
    with the other fields: it is a check, not a knob, so the file says what it builds.
    """

    model_config = STRICT
    kind: Literal["leaf_spine"] = "leaf_spine"
    hosts_per_leaf: StrictInt = Field(4, ge=1)
    leaves: StrictInt = Field(4, ge=1)
    spines: StrictInt = Field(4, ge=0)
    links_per_spine: StrictInt = Field(1, ge=1)
    host_link: LinkSpec = Field(default_factory=LinkSpec)
    fabric_link: LinkSpec = Field(default_factory=LinkSpec)
    switch_latency: Time = Field("600ns", description="port-to-port forwarding latency [EST] 0.6-1.0us")
    buffer: BufferSpec = Field(default_factory=BufferSpec)
    oversubscription: StrictFloat | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _check(self):
        if self.leaves > 1 and self.spines == 0:
            raise ValueError("spines: a fabric with more than one leaf needs at least one spine")
        if self.oversubscription is not None and self.spines > 0:
            actual = self.actual_oversubscription
            if abs(actual - self.oversubscription) > 1e-9 * max(1.0, actual):
                raise ValueError(
                    f"oversubscription: {self.oversubscription} disagrees with the fabric described "
                    f"({self.hosts_per_leaf} x host_link.rate / ({self.spines} spines x {self.links_per_spine} "
                    f"x fabric_link.rate) = {actual:g}); change spines, rates or drop the field")
        return self

    @property
    def actual_oversubscription(self) -> float:
        down = self.hosts_per_leaf * self.host_link.rate
        up = self.spines * self.links_per_spine * self.fabric_link.rate
        return down / up if up else float("inf")


class NodeSpec(BaseModel):
    """One node of an explicit topology. Hosts get GPU ids 0..H-1 in listing order."""

    model_config = STRICT
    name: str = Field(min_length=1)
    type: Literal["host", "switch"]
    tier: StrictInt | None = Field(None, ge=0, description="0 for hosts; 1 leaf, 2 spine, ... for switches")
    switch_latency: Time | None = None
    buffer: BufferSpec | None = None


class LinkListSpec(BaseModel):
    """A bidirectional link (or ``count`` parallel links) between two named nodes."""

    model_config = STRICT
    a: str
    b: str
    rate: Rate
    delay: Time = "500ns"
    count: StrictInt = Field(1, ge=1)


class ExplicitTopologyConfig(BaseModel):
    """A topology given as lists of nodes and links."""

    model_config = STRICT
    kind: Literal["explicit"] = "explicit"
    nodes: list[NodeSpec] = Field(min_length=2)
    links: list[LinkListSpec] = Field(min_length=1)
    switch_latency: Time = "600ns"
    buffer: BufferSpec = Field(default_factory=BufferSpec)


class TopologyFileRef(BaseModel):
    """``kind: file``: load the topology from a YAML file (relative to the scenario's folder)."""

    model_config = STRICT
    kind: Literal["file"] = "file"
    path: str


TopologyConfig = Annotated[Union[LeafSpineConfig, ExplicitTopologyConfig, TopologyFileRef],
                           Field(discriminator="kind")]
