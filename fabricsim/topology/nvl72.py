"""NVLink scale-up domains: an NVL72/NVL36 rack or an 8-GPU HGX-style node.

A domain is ``gpus`` GPUs in trays of ``per_tray`` (NVL72: 18 trays x 4 [V]); each GPU has
one link to each of ``chips`` NVLink switch chips (NVL72: 18 chips, 18 links per GPU [V]), each
of ``bandwidth / chips`` per direction (NVL72: 7.2 Tbps / 18 = 400 Gbps [V]). The crossbar model
replaces the chips by one non-blocking switch per domain with one link per GPU of the full
per-GPU bandwidth: the same capacity between any two sets of GPUs, and one switch hop either way.

Node and edge attributes (the contract the engines rely on):

- GPUs: ``type="host"``, ``tier=0``, ``name="r{rack}.g{i}"`` (``"n{node}.g{i}"`` for 8-GPU
  nodes), ``rack`` (the domain index, also for nodes), ``tray``, ``local_rank`` (0..per_tray-1).
- chips: ``type="switch"``, ``tier=1``, ``domain="nvlink"``, ``name="r{rack}.nvs{k}"``; the
  crossbar ``name="r{rack}.nvx"``; ``switch_latency_ps``, ``buffer_bytes``, ``buffer_mode``;
  ``nvlink_transport`` (``"credit"`` or ``"roce"``) and, for ``"credit"``, the framing
  ``nvlink_unit_bytes``, ``nvlink_packet_payload_bytes``, ``nvlink_packet_header_bytes`` and
  ``nvlink_spread`` (:mod:`fabricsim.net.nvlink`).
- GPU-chip edges: ``kind="nvlink"``, ``rate_bps``, ``delay_ps``, ``credit_bytes`` (the receive
  buffer behind the link in each direction; the crossbar's link stands for ``chips`` links and
  gets ``chips`` times the per-link buffer). NVLink switches connect only to GPUs.

The functions here add to an accumulator (see :mod:`.cluster`) so that a cluster builds all its
domains and its Ethernet planes into one graph in one pass.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..config.topology import HgxNodeConfig, NvlinkSpec, NvlRackConfig
from ..errors import TopologyError


@dataclass(frozen=True)
class DomainShape:
    """Fixed shape of one kind of scale-up domain, with default NVLink figures."""

    kind: str
    gpus: int
    per_tray: int
    chips: int          # default NVLink switch chips (0: no NVLink)
    bandwidth_bps: int  # default per-GPU NVLink bandwidth per direction
    prefix: str         # "r" for racks, "n" for nodes
    unit: str           # "racks" | "nodes"


NVLINK5_BPS = 7_200 * 10**9  # 900 GB/s per direction per GPU = 18 x 50 GB/s [V]

DOMAINS = {
    # 18 trays x 4 GPUs, 9 switch trays x 2 chips [V]
    "nvl72": DomainShape("nvl72", 72, 4, 18, NVLINK5_BPS, "r", "racks"),
    # 9 trays x 4 GPUs; 18 chips with each GPU one link to each [EST]
    "nvl36": DomainShape("nvl36", 36, 4, 18, NVLINK5_BPS, "r", "racks"),
    # HGX-style board: 8 GPUs on one baseboard, 2 NVLink switch chips, NVLink5 [EST]
    "hgx8": DomainShape("hgx8", 8, 8, 2, NVLINK5_BPS, "n", "nodes"),
    # 8-GPU nodes without an NVLink fabric (scale-out only)
    "none": DomainShape("none", 8, 8, 0, 0, "n", "nodes"),
}


@dataclass(frozen=True)
class NvlinkPlan:
    """Resolved NVLink parameters of a domain (defaults filled in)."""

    model: str
    chips: int
    bandwidth_bps: int
    link_rate_bps: int
    link_delay_ps: int
    switch_latency_ps: int
    buffer_bytes: int | None
    buffer_mode: str
    transport: str = "credit"
    credit_bytes: int = 0          # per link and direction (crossbar: already x chips)
    unit_bytes: int = 0
    packet_payload_bytes: int = 0
    packet_header_bytes: int = 0
    spread: str = "stripe"

    @property
    def switches_per_domain(self) -> int:
        return self.chips if self.model == "switches" else 1


#: one NVLink5 link, per direction: 50 GB/s [V] (hardware-and-workloads.md)
NVLINK5_LINK_BPS = 400 * 10**9


def resolve_nvlink(shape: DomainShape, spec: NvlinkSpec | None, source: str, field: str) -> NvlinkPlan | None:
    """Fill in the per-domain defaults; None for a domain without NVLink."""
    if shape.chips == 0:
        return None
    spec = spec or NvlinkSpec()
    chips = spec.chips or shape.chips
    bw = spec.bandwidth or shape.bandwidth_bps
    if spec.model == "switches" and bw % chips:
        raise TopologyError(f"{bw} bit/s per GPU does not split evenly over {chips} chips "
                            f"(allowed: a bandwidth divisible by nvlink.chips)", source=source,
                            field=f"{field}.bandwidth")
    rate = bw // chips if spec.model == "switches" else bw
    # one modelled link may stand for several physical NVLinks (the crossbar's one link per GPU, or
    # an HGX chip reached by 9 links): the credit buffer is per physical link
    credit = spec.credit_buffer * -(-rate // NVLINK5_LINK_BPS)
    wire = spec.unit + (spec.unit // spec.packet_payload) * spec.packet_header
    if spec.transport == "credit" and credit < wire:
        raise TopologyError(f"{spec.credit_buffer} B per NVLink link x {credit // spec.credit_buffer} links cannot "
                            f"hold one {wire} B unit (allowed: enough for unit + its headers; a link could never "
                            f"send)", source=source, field=f"{field}.credit_buffer")
    return NvlinkPlan(spec.model, chips, bw, rate, spec.link_delay, spec.switch_latency,
                      spec.buffer.size_bytes, spec.buffer.mode, spec.transport, credit, spec.unit,
                      spec.packet_payload, spec.packet_header, spec.spread)


def add_domain(acc, shape: DomainShape, index: int, first_host: int, gpus: int | None = None) -> list[int]:
    """Add the ``gpus`` (default: a full domain) GPUs of domain ``index`` (ids ``first_host..``)
    to ``acc``; returns their ids.

    Hosts must be added in id order, so a cluster adds every domain's GPUs before any switch,
    then calls :func:`add_nvlink` per domain.
    """
    p = shape.prefix
    ids = []
    for i in range(shape.gpus if gpus is None else gpus):
        tray, rank = divmod(i, shape.per_tray)
        ids.append(acc.host(first_host + i, {"type": "host", "tier": 0, "name": f"{p}{index}.g{i}", "rack": index,
                                             "tray": tray, "local_rank": rank}))
    return ids


def add_nvlink(acc, shape: DomainShape, index: int, gpus: list[int], nv: NvlinkPlan) -> None:
    """Add the NVLink switches (chips or one crossbar) of domain ``index`` and their GPU links."""
    p = shape.prefix
    sw_attrs = {"type": "switch", "tier": 1, "domain": "nvlink", "rack": index,
                "switch_latency_ps": nv.switch_latency_ps, "buffer_bytes": nv.buffer_bytes,
                "buffer_mode": nv.buffer_mode, "nvlink_transport": nv.transport}
    edge = {"rate_bps": nv.link_rate_bps, "delay_ps": nv.link_delay_ps, "kind": "nvlink"}
    if nv.transport == "credit":
        sw_attrs.update(nvlink_unit_bytes=nv.unit_bytes, nvlink_packet_payload_bytes=nv.packet_payload_bytes,
                        nvlink_packet_header_bytes=nv.packet_header_bytes, nvlink_spread=nv.spread)
        edge["credit_bytes"] = nv.credit_bytes
    if nv.model == "crossbar":
        chips = [acc.switch(f"{p}{index}.nvx", dict(sw_attrs, name=f"{p}{index}.nvx"))]
    else:
        chips = [acc.switch(f"{p}{index}.nvs{k}", dict(sw_attrs, name=f"{p}{index}.nvs{k}", chip=k))
                 for k in range(nv.chips)]
    for g in gpus:
        for c in chips:
            acc.link(g, c, edge)


def rack_as_cluster(cfg: NvlRackConfig | HgxNodeConfig) -> dict:
    """``kind: nvl72_rack`` / ``kind: hgx_node`` -> the arguments of a one-domain cluster build."""
    domain = ("nvl72" if cfg.domain_size == 72 else "nvl36") if isinstance(cfg, NvlRackConfig) else "hgx8"
    return {"domain": domain, "count": 1, "nvlink": cfg.nvlink, "scale_out": cfg.scale_out,
            "failed": cfg.failed, "builder": cfg.kind, "so_field": "scale_out"}
