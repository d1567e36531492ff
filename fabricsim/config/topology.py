"""Topology section of a scenario: a leaf-spine builder, an explicit node/link list, an
NVLink scale-up domain, a multi-plane GPU cluster, or a file.

``kind: leaf_spine`` builds a two-tier Clos; ``kind: explicit`` lists nodes and links;
``kind: nvl72_rack`` / ``kind: hgx_node`` build one NVLink domain (optionally with its scale-out
NICs and leaf-spine); ``kind: cluster`` builds NVLink domains joined by a multi-plane,
rail-optimised Ethernet fabric of 2 or 3 tiers; ``kind: file`` points at a YAML file under
topologies/ holding any of the others. Values tagged [EST] are assumptions (no public figure);
see docs/topologies.md and /work/shared/reference/hardware-and-workloads.md.
"""
from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, Field, StrictFloat, StrictInt, model_validator

from .types import STRICT, PositiveSize, PositiveTime, Rate, Size, Time


class LinkSpec(BaseModel):
    """Speed and one-way propagation delay of one tier's links."""

    model_config = STRICT
    rate: Rate = Field("400Gbps", description="line rate, e.g. 400Gbps")
    delay: Time = Field("500ns", description="one-way propagation delay, e.g. 500ns (about 100 m of fibre)")


class BufferSpec(BaseModel):
    """Switch packet buffer: per egress port, or one pool shared by all ports of a switch.

    Default: 2 MiB per egress port [EST] (about a 128 MB shared pool over 64 ports; the vendor does
    not publish the size). ``size: unbounded`` never drops.
    """

    model_config = STRICT
    mode: Literal["per_port", "shared"] = "per_port"
    size: Union[Literal["unbounded"], PositiveSize] = "2MiB"

    @property
    def size_bytes(self) -> int | None:
        return None if self.size == "unbounded" else int(self.size)


#: the largest fabric a scenario may describe: hosts and fabric links (a graph of this size takes
#: gigabytes; a typo such as hosts_per_leaf: 100000 x leaves: 100000 must not run the machine
#: out of memory before an error is given). 1,048,576 hosts is 128x the largest preset.
MAX_HOSTS = 1 << 20
MAX_FABRIC_LINKS = 1 << 24


def _check_size(hosts: int, links: int, hosts_expr: str, links_expr: str) -> None:
    if hosts > MAX_HOSTS:
        raise ValueError(f"{hosts_expr.split(' ')[0]}: {hosts_expr} = {hosts:,} hosts (allowed: at most {MAX_HOSTS:,})")
    if links > MAX_FABRIC_LINKS:
        raise ValueError(f"{links_expr.split(' ')[0]}: {links_expr} = {links:,} links "
                         f"(allowed: at most {MAX_FABRIC_LINKS:,})")


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
        _check_size(self.hosts_per_leaf * self.leaves, self.leaves * self.spines * self.links_per_spine,
                    "hosts_per_leaf x leaves", "leaves x spines x links_per_spine")
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


class TopologyPresetRef(BaseModel):
    """``preset: NAME``: one of the topologies shipped with fabricsim (``fabricsim topo list``).

    Found by name from any directory (installed as package data, fabricsim/topology/catalog.py);
    ``kind: preset`` may be left out.
    """

    model_config = STRICT
    kind: Literal["preset"] = "preset"
    preset: str


class TopologyPluginRef(BaseModel):
    """``kind: plugin``: a topology generated by a third-party plug-in (fabricsim/topology/plugin.py).

    ``builder`` names an entry point of group ``fabricsim.topologies``; it is called with
    ``params`` and returns a topology section of a built-in kind, which is then validated and
    built like one written by hand.
    """

    model_config = STRICT
    kind: Literal["plugin"] = "plugin"
    builder: str
    params: dict = Field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# NVLink domains and multi-plane clusters (built by fabricsim/topology/cluster.py)


class NvlinkSpec(BaseModel):
    """The NVLink scale-up fabric of one domain (rack or node).

    ``model: switches`` builds the NVLink switch chips (each GPU one link to every chip, of
    ``bandwidth / chips``); ``model: crossbar`` one non-blocking switch per domain with one link
    per GPU of the full ``bandwidth`` (fewer events per packet, same capacity).
    """

    model_config = STRICT
    model: Literal["switches", "crossbar"] = "switches"
    chips: StrictInt | None = Field(None, ge=1, le=64, description=(
        "NVLink switch chips per domain; default 18 for nvl72/nvl36 (9 switch trays x 2 [V] for "
        "NVL72, [EST] for NVL36), 2 for hgx8 [EST]"))
    bandwidth: Rate | None = Field(None, description=(
        "per-GPU NVLink bandwidth per direction; default 7200Gbps = 900 GB/s (18 x 50 GB/s) [V] "
        "(hgx8: [EST], NVLink5 assumed)"))
    link_delay: Time = Field("100ns", description="one-way delay of a GPU-to-chip link incl. SerDes [EST]")
    switch_latency: Time = Field("300ns", description="NVLink switch chip forwarding latency, ~0.3us per hop [EST]")
    buffer: BufferSpec = Field(default_factory=BufferSpec, description=(
        "egress buffer of the chips; used only with transport: roce (credit flow control bounds what "
        "a chip holds by credit_buffer per link instead)"))
    transport: Literal["credit", "roce"] = Field("credit", description=(
        "credit: NVLink as NVLink, lossless link-level credit flow control, no end-to-end ACK, no "
        "retransmission, a message completes when its last byte is delivered (docs/fidelity/"
        "nvlink.md); roce: the earlier model, RoCE packets and ACKs through drop-tail chip buffers, for "
        "comparison"))
    credit_buffer: PositiveSize = Field("64KiB", description=(
        "receive buffer behind each NVLink link (per direction) that the link's credits stand for [EST]; "
        "for full rate it must exceed rate x credit loop (~34 KB at 400 Gbps with the default delays); "
        "a modelled link that stands for several 400 Gbps NVLink5 links (the crossbar's one link per GPU, an "
        "HGX chip's 9 links) gets this per physical link"))
    packet_payload: PositiveSize = Field("256B", description=(
        "payload bytes per NVLink packet [EST] (public estimates: up to 256 B per packet)"))
    packet_header: Size = Field("16B", description=(
        "wire overhead per NVLink packet (header, CRC, flit padding) [EST]; replaces simulation.header "
        "inside the domain with transport: credit"))
    spread: Literal["stripe", "adaptive"] = Field("stripe", description=(
        "how a GPU spreads a queue pair's units over its links (nic.plane_split: per_packet): stripe = "
        "unit i by link (i + queue pair) mod links, as address interleaving [EST]; adaptive = by "
        "whichever link is free and has credit first"))
    unit: PositiveSize = Field("4KiB", description=(
        "payload bytes the simulator moves as one event inside the domain with transport: credit (a "
        "whole number of packet_payload; each unit is framed as ceil(payload / packet_payload) NVLink "
        "packets): smaller is finer-grained, larger is faster"))

    @model_validator(mode="after")
    def _credit(self):
        if self.transport != "credit":
            return self
        if self.unit % self.packet_payload:
            raise ValueError(f"unit: {self.unit} B is not a whole number of packet_payload "
                             f"({self.packet_payload} B) (allowed: a multiple of packet_payload)")
        if self.packet_header >= self.packet_payload * 4:
            raise ValueError(f"packet_header: {self.packet_header} B is implausible for {self.packet_payload} B "
                             f"packets (allowed: less than 4 x packet_payload)")
        # credit_buffer against one unit: checked where the modelled link's NVLink count is known
        # (topology/nvl72.py resolve_nvlink)
        return self


class NicSpec(BaseModel):
    """One NIC per GPU; each of its ``ports`` goes to its own plane (CX-8: 2 x 400G or 4 x 200G [V];
    1 x 800G is offered for comparison although CX-8 does not run a single 800GbE port [V])."""

    model_config = STRICT
    ports: Literal[1, 2, 4] = Field(4, description="ports per NIC = number of planes")
    rate: Rate = Field("200Gbps", description="line rate of each port (= the leaf port speed)")


class SwitchSpec(BaseModel):
    """The Ethernet switch used at every tier (default SN5600 / Spectrum-4)."""

    model_config = STRICT
    capacity: Rate = Field("51.2Tbps", description="total port bandwidth: radix = capacity / port rate "
                                                    "(SN5600: 64x800G, 128x400G, 256x200G) [V]")
    speeds: list[Rate] = Field(default_factory=lambda: ["200Gbps", "400Gbps", "800Gbps"], min_length=1,
                               description="port speeds the switch supports [V]")
    port_rate: Rate | None = Field(None, description="leaf port speed; must equal nic.rate (default: nic.rate)")
    latency: Time = Field("600ns", description="port-to-port forwarding latency [EST] 0.6-1.0us")
    buffer: BufferSpec = Field(default_factory=BufferSpec, description="size not published [EST]")


class FabricDelays(BaseModel):
    """One-way propagation delay per tier of the scale-out fabric (all [EST]: cable lengths)."""

    model_config = STRICT
    host_leaf: Time = Field("150ns", description="NIC to leaf, ~30 m of fibre [EST]")
    leaf_spine: Time = Field("500ns", description="leaf to spine, ~100 m of fibre [EST]")
    spine_superspine: Time = Field("1us", description="spine to super-spine, ~200 m of fibre [EST]")


class FailedSpec(BaseModel):
    """Elements removed from the built graph: they carry nothing and shortest-path routing avoids them.

    ``switches``: node names (``p1.spine0``, ``r0.nvs3``); ``links``: ``[a, b]`` removes every
    link between two named nodes, ``[a, b, n]`` n of the parallel ones; ``planes``: whole planes
    (every switch of the plane and the NIC port on it).
    """

    model_config = STRICT
    switches: list[str] = Field(default_factory=list)
    links: list[list[Union[str, StrictInt]]] = Field(default_factory=list)
    planes: list[StrictInt] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check(self):
        for i, link in enumerate(self.links):
            ok = len(link) in (2, 3) and all(isinstance(x, str) for x in link[:2]) and \
                (len(link) == 2 or (isinstance(link[2], int) and link[2] >= 1))
            if not ok:
                raise ValueError(f"links[{i}]: got {link!r} (allowed: [node, node] or [node, node, count >= 1])")
        return self

    def __bool__(self) -> bool:
        return bool(self.switches or self.links or self.planes)


class ScaleOutSpec(BaseModel):
    """GPU -> NIC -> planes -> rail-optimised leaf-spine (2 tiers) or leaf-spine-superspine in pods
    (3 tiers), one identical fabric per plane."""

    model_config = STRICT
    nic: NicSpec = Field(default_factory=NicSpec)
    rails: StrictInt | None = Field(None, ge=1, description=(
        "rails per plane: local rank i goes to a rail-(i mod rails) leaf; default = GPUs per tray "
        "(4, NVL72/NVL36) or per node (8)"))
    tiers: Literal[2, 3, "auto"] = Field("auto", description=(
        "2 or 3; auto: 3 when a plane needs more leaves than a spine has ports (non-blocking: more "
        "than k^2/2 endpoints, k = radix at the port speed)"))
    oversubscription: StrictFloat = Field(1.0, gt=0, description=(
        "leaf host ports : leaf uplinks (1 = non-blocking, as NVIDIA reference designs [V])"))
    spines: StrictInt | None = Field(None, ge=1, description=(
        "spines per plane (2 tiers) or per pod (3 tiers); default: as few as the radix allows, "
        "with parallel links (as the DGX SuperPOD tables)"))
    pod_leaves: StrictInt | None = Field(None, ge=1, description="leaves per pod (3 tiers); default k/2 rounded "
                                                                 "down to whole rail groups")
    switch: SwitchSpec = Field(default_factory=SwitchSpec)
    delays: FabricDelays = Field(default_factory=FabricDelays)


class ClusterConfig(ScaleOutSpec):
    """A GPU cluster: ``racks`` NVL72/NVL36 racks or ``nodes`` 8-GPU nodes, each with its NVLink
    domain, every GPU with one multi-port NIC into a rail-optimised multi-plane fabric.

    Hosts (GPUs) are numbered rack by rack, tray by tray; see docs/topologies.md.
    """

    kind: Literal["cluster"] = "cluster"
    domain: Literal["nvl72", "nvl36", "hgx8", "none"] = Field("nvl72", description=(
        "scale-up domain: NVL72 rack (72 GPUs), NVL36 rack (36), HGX-style 8-GPU node, or none (8-GPU "
        "nodes without NVLink)"))
    racks: StrictInt | None = Field(None, ge=1, description="number of racks (nvl72, nvl36)")
    nodes: StrictInt | None = Field(None, ge=1, description="number of 8-GPU nodes (hgx8, none)")
    gpus: StrictInt | None = Field(None, ge=2, description=(
        "total GPUs, when not a whole number of racks (8,192 GPUs = 113 NVL72 racks + 14 trays): the "
        "last rack holds the rest, in whole trays; racks/nodes may then be left out"))
    nvlink: NvlinkSpec | None = Field(None, description="scale-up fabric (not with domain: none)")
    failed: FailedSpec = Field(default_factory=FailedSpec)

    @model_validator(mode="after")
    def _count(self):
        rack_domain = self.domain in ("nvl72", "nvl36")
        want, other = ("racks", "nodes") if rack_domain else ("nodes", "racks")
        if getattr(self, other) is not None:
            raise ValueError(f"{other}: domain {self.domain} counts {want}, not {other}")
        if getattr(self, want) is None and self.gpus is None:
            raise ValueError(f"{want}: required for domain {self.domain} (or give gpus)")
        if self.domain == "none" and self.nvlink is not None:
            raise ValueError("nvlink: domain none has no NVLink (use domain: hgx8)")
        per = {"nvl72": 72, "nvl36": 36}.get(self.domain, 8)
        count = self.gpus if self.gpus is not None else per * (getattr(self, want) or 0)
        _check_size(count, 0, "gpus" if self.gpus is not None else f"{want} x {per} GPUs", "")
        return self


class NvlRackConfig(BaseModel):
    """One NVL72 (or NVL36) rack: its NVLink domain, and optionally its scale-out NICs and fabric."""

    model_config = STRICT
    kind: Literal["nvl72_rack"] = "nvl72_rack"
    domain_size: Literal[72, 36] = Field(72, description="GPUs in the rack: 72 (18 trays x 4) or 36 (9 x 4)")
    nvlink: NvlinkSpec = Field(default_factory=NvlinkSpec)
    scale_out: ScaleOutSpec | None = Field(None, description="NICs and leaf-spine for this rack alone")
    failed: FailedSpec = Field(default_factory=FailedSpec)


class HgxNodeConfig(BaseModel):
    """One 8-GPU HGX-style node with its NVLink switches, optionally with scale-out."""

    model_config = STRICT
    kind: Literal["hgx_node"] = "hgx_node"
    gpus: Literal[8] = 8
    nvlink: NvlinkSpec = Field(default_factory=NvlinkSpec)
    scale_out: ScaleOutSpec | None = None
    failed: FailedSpec = Field(default_factory=FailedSpec)


TopologyConfig = Annotated[Union[LeafSpineConfig, ExplicitTopologyConfig, NvlRackConfig, HgxNodeConfig,
                                 ClusterConfig, TopologyFileRef, TopologyPresetRef, TopologyPluginRef],
                           Field(discriminator="kind")]
