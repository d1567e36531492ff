"""GPU clusters: NVLink domains joined by a multi-plane, rail-optimised Ethernet fabric.

Each GPU has one NIC with ``P`` ports; port ``p`` attaches to a leaf of plane ``p``, and every
plane is the same fabric: rail-optimised leaves (local rank ``i`` of every tray or node goes to
a rail-``i mod rails`` leaf), then spines (2 tiers) or spines in pods plus super-spines (3 tiers).

Sizing, per plane, with ``k = switch.capacity / nic.rate`` ports per switch (SN5600 at 200G:
256):

- leaf: ``d`` host ports and ``u = ceil(h / oversubscription)`` uplinks, ``d + u <= k``; the
  ``E / rails`` GPUs of a rail fill ``ceil(E / rails / d)`` leaves evenly (``h`` hosts each);
  leaves are numbered group by group (``leaf = group * rails + rail``), so a pod holds every rail
  of a set of racks.
- 2 tiers (``L <= k`` leaves): ``S`` spines, the fewest that divide ``u`` with ``L * u / S <= k``
  ports each; every leaf has ``u / S`` parallel links to every spine. This reproduces the DGX
  SuperPOD B300 tables (e.g. 8,192 GPUs x 2 x 400G: 128 leaves and 64 spines per plane).
- 3 tiers: pods of ``pod_leaves`` leaves (default ``k/2`` rounded down to whole rail groups) and
  ``spines`` spines (default ``u``), each spine with as many uplinks as downlinks; spine ``s`` of
  every pod connects to the same group of ``C`` super-spines (the fewest that divide its uplinks
  with ``pods * uplinks / C <= k`` ports each).

A sizing that needs more ports than a switch has raises :class:`TopologyError` naming the field.
Bisection per plane is computed analytically here (a max-flow at 8k GPUs would take minutes)
and stored in ``Topology.meta``; planes touched by failures get an exact max-flow instead.
"""
from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field

import networkx as nx

from ..config.topology import ClusterConfig, FailedSpec, HgxNodeConfig, NvlRackConfig, ScaleOutSpec
from ..errors import TopologyError
from ..units import format_rate
from .model import Topology, maxflow_cut
from .nvl72 import DOMAINS, DomainShape, add_domain, add_nvlink, rack_as_cluster, resolve_nvlink


# --------------------------------------------------------------------------------------------
# accumulating nodes and edges (one networkx call each at the end)


class _Acc:
    """Nodes in id order and edges as ``(u, v, attrs)``; applies the failures by name."""

    def __init__(self, failed: FailedSpec):
        self.attrs: list[dict] = []
        self.ids: dict[str, int] = {}
        self.dead: set[str] = set()           # names of failed switches (built, then dropped)
        self.failed_sw = set(failed.switches)
        self.failed_links: dict[tuple[str, str], list] = {}  # (a, b) sorted -> [to remove or None, removed]
        for a, b, *n in failed.links:
            self.failed_links[(min(a, b), max(a, b))] = [n[0] if n else None, 0]
        self.edges: list[tuple[int, int, dict]] = []

    def host(self, hid: int, attrs: dict) -> int:
        assert hid == len(self.attrs), "hosts must be added in id order, before any switch"
        self.attrs.append(attrs)
        self.ids[attrs["name"]] = hid
        return hid

    def switch(self, name: str, attrs: dict, dead: bool = False) -> int | None:
        if dead or name in self.failed_sw:
            self.dead.add(name)
            return None
        i = len(self.attrs)
        self.attrs.append(attrs)
        self.ids[name] = i
        return i

    def link(self, u: int | None, v: int | None, attrs: dict, count: int = 1) -> None:
        if u is None or v is None:
            return
        if self.failed_links:
            a, b = self.attrs[u]["name"], self.attrs[v]["name"]
            f = self.failed_links.get((min(a, b), max(a, b)))
            if f is not None:
                drop = count if f[0] is None else min(count, f[0] - f[1])
                f[1] += drop
                count -= drop
        self.edges.extend([(u, v, attrs)] * count)

    def graph(self) -> nx.MultiGraph:
        g = nx.MultiGraph()
        g.add_nodes_from(enumerate(self.attrs))
        g.add_edges_from(self.edges)
        return g


# --------------------------------------------------------------------------------------------
# sizing one plane


@dataclass
class PlanePlan:
    """How every plane is built (planes are identical)."""

    endpoints: int
    rails: int
    rate: int             # port rate of every scale-out link
    radix: int            # k: ports per switch at that rate
    tiers: int
    hosts_per_leaf: int   # h (the last leaf of a rail may have fewer)
    leaf_down: int        # d: most host ports a leaf may use at this oversubscription
    uplinks: int          # u per leaf
    groups: int           # leaves per rail
    leaves: int           # L
    spines: int           # 2 tiers: per plane; 3 tiers: per pod
    links_leaf_spine: int  # parallel links per leaf-spine pair
    pod_leaves: int = 0
    pods: int = 0
    spine_up: int = 0     # uplinks per spine (3 tiers)
    ss_per_group: int = 0  # super-spines per spine index (3 tiers)
    links_spine_ss: int = 0
    leaf_hosts: list[int] = field(default_factory=list)  # hosts on each leaf, by leaf index

    @property
    def superspines(self) -> int:
        return self.spines * self.ss_per_group if self.tiers == 3 else 0

    @property
    def spines_total(self) -> int:
        return self.spines * self.pods if self.tiers == 3 else self.spines

    def leaf_of(self, rail: int, j: int) -> int:
        """Leaf index of the ``j``-th GPU of rail ``rail``."""
        return (j // self.hosts_per_leaf) * self.rails + rail


def _smallest_divisor_at_least(n: int, lo: int) -> int | None:
    for c in range(max(1, lo), n + 1):
        if n % c == 0:
            return c
    return None


def plan_plane(so: ScaleOutSpec, endpoints: int, default_rails: int, source: str, at) -> PlanePlan:
    """Size one plane for ``endpoints`` NIC ports; ``at(field)`` -> the dotted field name."""
    nic, sw = so.nic, so.switch
    if nic.rate not in sw.speeds:
        raise TopologyError(f"{format_rate(nic.rate)} is not a port speed of the switch (allowed: "
                            f"{', '.join(format_rate(s) for s in sw.speeds)}, switch.speeds)",
                            source=source, field=at("nic.rate"))
    if sw.port_rate is not None and sw.port_rate != nic.rate:
        raise TopologyError(f"{format_rate(nic.rate)} does not match the leaf port speed switch.port_rate = "
                            f"{format_rate(sw.port_rate)} (a NIC port and its leaf port run at one speed)",
                            source=source, field=at("nic.rate"))
    k = sw.capacity // nic.rate
    if k < 2:
        raise TopologyError(f"a {format_rate(sw.capacity)} switch has {k} port(s) of {format_rate(nic.rate)} "
                            f"(allowed: at least 2)", source=source, field=at("switch.capacity"))
    rails = so.rails or default_rails
    if default_rails % rails:
        raise TopologyError(f"got {rails} (allowed: a divisor of the {default_rails} GPUs per tray/node)",
                            source=source, field=at("rails"))
    o = so.oversubscription

    def up(h: int) -> int:
        return max(1, math.ceil(h / o - 1e-9))

    d = max(1, int(k * o / (1 + o)))
    while d + 1 + up(d + 1) <= k:
        d += 1
    while d > 1 and d + up(d) > k:
        d -= 1
    if d + up(d) > k:
        raise TopologyError(f"{o:g}:1 needs {up(1)} uplinks for one host port on a {k}-port leaf "
                            f"(allowed: fewer uplinks than the radix)", source=source, field=at("oversubscription"))
    per_rail = endpoints // rails
    groups = math.ceil(per_rail / d)
    h = math.ceil(per_rail / groups)
    u = up(h)
    L = groups * rails
    leaf_hosts = [0] * L
    for r in range(rails):
        for g in range(groups):
            leaf_hosts[g * rails + r] = min(h, per_rail - g * h)
    tiers = so.tiers if so.tiers != "auto" else (2 if L <= k else 3)
    plan = PlanePlan(endpoints, rails, nic.rate, k, tiers, h, d, u, groups, L, 0, 0, leaf_hosts=leaf_hosts)
    if L == 1 and so.tiers == "auto":
        plan.tiers = 2  # one leaf: no spines needed
        return plan
    if tiers == 2:
        if L > k:
            raise TopologyError(
                f"2 tiers of {k}-port switches reach {k} leaves ({k * d} endpoints) per plane; this plane "
                f"needs {L} leaves for {endpoints} endpoints (allowed: 3 or auto)", source=source, field=at("tiers"))
        if so.spines is not None:
            S = so.spines
            if u % S:
                raise TopologyError(f"got {S} (allowed: a divisor of the {u} uplinks per leaf)",
                                    source=source, field=at("spines"))
            if L * (u // S) > k:
                raise TopologyError(f"{S} spines would need {L * (u // S)} ports each, radix {k} at "
                                    f"{format_rate(nic.rate)} (allowed: at least {math.ceil(L * u / k)} spines)",
                                    source=source, field=at("spines"))
        else:
            S = _smallest_divisor_at_least(u, math.ceil(L * u / k))
        plan.spines, plan.links_leaf_spine = S, u // S
        return plan
    # three tiers: pods of leaves, spines per pod, super-spine groups
    S = so.spines or u
    if u % S:
        raise TopologyError(f"got {S} (allowed: a divisor of the {u} uplinks per leaf)", source=source,
                            field=at("spines"))
    m = u // S
    if so.pod_leaves is not None:
        Lp = so.pod_leaves
        if 2 * Lp * m > k:
            raise TopologyError(f"a spine would need {Lp * m} down + {Lp * m} up ports, radix {k} at "
                                f"{format_rate(nic.rate)} (allowed: pod_leaves <= {k // (2 * m)})",
                                source=source, field=at("pod_leaves"))
    else:
        Lp = (k // 2 // m // rails) * rails or (k // 2 // m)
        if Lp == 0:
            raise TopologyError(f"{m} links from each leaf to each of {S} spines leave no room for a pod "
                                f"(allowed: more spines)", source=source, field=at("spines"))
    Lp = min(Lp, L)
    P = math.ceil(L / Lp)
    U = Lp * m
    if P > k:
        raise TopologyError(f"{endpoints} endpoints per plane need {P} pods, more than a {k}-port super-spine "
                            f"can join (allowed: fewer GPUs, a faster port or larger pod_leaves)",
                            source=source, field=at("tiers"))
    C = _smallest_divisor_at_least(U, math.ceil(P * U / k))
    plan.spines, plan.links_leaf_spine = S, m
    plan.pod_leaves, plan.pods, plan.spine_up, plan.ss_per_group, plan.links_spine_ss = Lp, P, U, C, U // C
    return plan


def analytic_bisection(plan: PlanePlan) -> int:
    """One-direction capacity between the first and second half of a plane's hosts in leaf order,
    for the intact plane: leaf-local, pod-local, then cross traffic, each limited by uplinks.
    (Exact for these symmetric trees; checked against a max-flow in the tests.)"""
    E, R = plan.endpoints, plan.rate
    half = E // 2
    a_left = half
    leaf_a, leaf_b = [], []
    local = 0
    for n in plan.leaf_hosts:
        a = min(n, a_left)
        a_left -= a
        b = n - a
        lo = min(a, b)
        local += lo
        leaf_a.append(min(a - lo, plan.uplinks))
        leaf_b.append(min(b - lo, plan.uplinks))
    if plan.tiers == 2 or plan.pods == 0:
        if plan.leaves == 1:
            return local * R
        return (local + min(sum(leaf_a), sum(leaf_b))) * R
    pod_up = plan.spines * plan.spine_up
    up_a = up_b = 0
    for q in range(plan.pods):
        sa = sum(leaf_a[q * plan.pod_leaves:(q + 1) * plan.pod_leaves])
        sb = sum(leaf_b[q * plan.pod_leaves:(q + 1) * plan.pod_leaves])
        lo = min(sa, sb)
        local += lo
        up_a += min(sa - lo, pod_up)
        up_b += min(sb - lo, pod_up)
    return (local + min(up_a, up_b)) * R


# --------------------------------------------------------------------------------------------
# building


def _add_plane(acc: _Acc, so: ScaleOutSpec, plan: PlanePlan, p: int, rail_hosts: list[list[int]],
               dead: bool) -> None:
    sw = so.switch
    base = {"type": "switch", "domain": "ethernet", "plane": p, "switch_latency_ps": sw.latency,
            "buffer_bytes": sw.buffer.size_bytes, "buffer_mode": sw.buffer.mode}
    leaves = []
    for i in range(plan.leaves):
        g, r = divmod(i, plan.rails)
        nm = f"p{p}.leaf{i}"
        attrs = dict(base, tier=1, name=nm, rail=r, group=g)
        if plan.tiers == 3:
            attrs["pod"] = i // plan.pod_leaves
        leaves.append(acc.switch(nm, attrs, dead))
    hl = {"rate_bps": plan.rate, "delay_ps": so.delays.host_leaf, "kind": "host-leaf", "plane": p}
    for r, hosts in enumerate(rail_hosts):
        for j, h in enumerate(hosts):
            acc.link(h, leaves[plan.leaf_of(r, j)], hl)
    if plan.leaves == 1 and plan.spines == 0:
        return
    ls = {"rate_bps": plan.rate, "delay_ps": so.delays.leaf_spine, "kind": "leaf-spine", "plane": p}
    m = plan.links_leaf_spine
    if plan.tiers == 2:
        spines = [acc.switch(f"p{p}.spine{j}", dict(base, tier=2, name=f"p{p}.spine{j}"), dead)
                  for j in range(plan.spines)]
        for lf in leaves:
            for s in spines:
                acc.link(lf, s, ls, m)
        return
    sss = {"rate_bps": plan.rate, "delay_ps": so.delays.spine_superspine, "kind": "spine-superspine", "plane": p}
    supers = [[acc.switch(f"p{p}.ss{s * plan.ss_per_group + c}",
                          dict(base, tier=3, name=f"p{p}.ss{s * plan.ss_per_group + c}", group=s), dead)
               for c in range(plan.ss_per_group)] for s in range(plan.spines)]
    for q in range(plan.pods):
        pod_leaves = leaves[q * plan.pod_leaves:(q + 1) * plan.pod_leaves]
        for s in range(plan.spines):
            nm = f"p{p}.pod{q}.spine{s}"
            sp = acc.switch(nm, dict(base, tier=2, name=nm, pod=q), dead)
            for lf in pod_leaves:
                acc.link(lf, sp, ls, m)
            for ss in supers[s]:
                acc.link(sp, ss, sss, plan.links_spine_ss)


def _check_routable(g: nx.MultiGraph, H: int, source: str, fld: str) -> None:
    """Every pair of GPUs must share a connected switch network (switches never forward through a
    host, so a graph connected only through GPUs is not enough)."""
    parent: dict[int, int] = {}

    def find(x):
        root = x
        while parent.get(root, root) != root:
            root = parent[root]
        while parent.get(x, x) != root:
            parent[x], x = root, parent[x]
        return root

    for u, v in g.edges():
        if u >= H and v >= H:
            ru, rv = find(u), find(v)
            if ru != rv:
                parent[ru] = rv
    sigs: dict[frozenset, int] = {}
    for h in range(H):
        sig = frozenset(find(n) for n in g.adj[h])
        if not sig:
            raise TopologyError(f"GPU {g.nodes[h]['name']!r} has no link left", source=source, field=fld)
        sigs.setdefault(sig, h)
    common = frozenset.intersection(*sigs)
    if common:
        return
    items = list(sigs.items())
    for i, (s1, h1) in enumerate(items):
        for s2, h2 in items[i + 1:]:
            if not s1 & s2:
                raise TopologyError(f"the topology is disconnected: {g.nodes[h1]['name']!r} cannot reach "
                                    f"{g.nodes[h2]['name']!r} through any switch", source=source, field=fld)


def _failure_errors(acc: _Acc, failed: FailedSpec, source: str, at) -> None:
    known = set(acc.ids) | acc.dead
    for i, name in enumerate(failed.switches):
        if name not in known or (name in acc.ids and acc.attrs[acc.ids[name]]["type"] == "host"):
            close = difflib.get_close_matches(name, [n for n in known if "." in n and ".g" not in n], n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TopologyError(f"unknown switch {name!r} (allowed: a switch name such as 'p0.spine0' or "
                                f"'r0.nvs0'){hint}", source=source, field=at(f"failed.switches[{i}]"))
    for i, (a, b, *_) in enumerate(failed.links):
        for end, nm in ((0, a), (1, b)):
            if nm not in known:
                close = difflib.get_close_matches(nm, list(known), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise TopologyError(f"unknown node {nm!r}{hint}", source=source, field=at(f"failed.links[{i}][{end}]"))
        if a in acc.dead or b in acc.dead:
            continue
        want, removed = acc.failed_links[(min(a, b), max(a, b))]
        if removed == 0 or (want is not None and removed < want):
            raise TopologyError(f"there are {removed} links between {a!r} and {b!r} (allowed: an existing link)",
                                source=source, field=at(f"failed.links[{i}]"))


def build_cluster_from(domain: str, count: int | None, nvlink, scale_out: ScaleOutSpec | None,
                       failed: FailedSpec, name: str, builder: str, source: str = "<topology>",
                       prefix: str = "topology", so_field: str | None = None, gpus: int | None = None) -> Topology:
    """Build ``count`` domains of kind ``domain`` (or enough for ``gpus``, the last one partial)
    and, if ``scale_out``, their planes."""
    def at(sub: str) -> str:
        return f"{prefix}.{sub}" if prefix else sub

    def so_at(sub: str) -> str:
        return at(f"{so_field}.{sub}" if so_field else sub)

    shape: DomainShape = DOMAINS[domain]
    if gpus is None:
        H = count * shape.gpus
    else:
        need = math.ceil(gpus / shape.gpus)
        if count is not None and count != need:
            raise TopologyError(f"{gpus} GPUs fill {need} {shape.unit} of {shape.gpus}, not {count} "
                                f"(allowed: {need}, or leave {shape.unit} out)", source=source, field=at(shape.unit))
        if gpus % shape.per_tray:
            raise TopologyError(f"got {gpus} (allowed: whole trays/nodes, a multiple of {shape.per_tray})",
                                source=source, field=at("gpus"))
        count, H = need, gpus
    sizes = [shape.gpus] * (count - 1) + [H - (count - 1) * shape.gpus]
    nv = resolve_nvlink(shape, nvlink, source, at("nvlink"))
    planes = scale_out.nic.ports if scale_out else 0
    for i, p in enumerate(failed.planes):
        if not 0 <= p < planes:
            raise TopologyError(f"got {p} (allowed: 0..{planes - 1})" if planes else
                                f"got {p} (allowed: none, there is no scale-out fabric)",
                                source=source, field=at(f"failed.planes[{i}]"))
    if nv is None and scale_out is None:
        raise TopologyError("a domain without NVLink needs a scale-out fabric", source=source, field=at("domain"))
    if H < 2:
        raise TopologyError("a topology needs at least two GPUs", source=source, field=at(shape.unit))
    plan = None
    if scale_out is not None:
        plan = plan_plane(scale_out, H, shape.per_tray, source, so_at)
    acc = _Acc(failed)
    domains = [add_domain(acc, shape, d, d * shape.gpus, n) for d, n in enumerate(sizes)]
    if plan is not None:
        for h in range(H):
            acc.attrs[h]["ports"] = planes
            acc.attrs[h]["rail"] = acc.attrs[h]["local_rank"] % plan.rails
    if nv is not None:
        for d, gpus in enumerate(domains):
            add_nvlink(acc, shape, d, gpus, nv)
    if plan is not None:
        rail_hosts = [[] for _ in range(plan.rails)]
        for h in range(H):
            rail_hosts[acc.attrs[h]["rail"]].append(h)
        for p in range(planes):
            _add_plane(acc, scale_out, plan, p, rail_hosts, dead=p in failed.planes)
    _failure_errors(acc, failed, source, at)
    g = acc.graph()
    _check_routable(g, H, source, at("failed") if failed else (prefix or "topology"))

    # ---- meta: counts, sizing and bisection per plane (analytic; max-flow where failures touch)
    touched_planes: set[int] = set()
    touched_nvlink = False
    names = list(failed.switches) + [x for lk in failed.links for x in lk[:2]]
    for nm in names:
        if nm.startswith("p") and "." in nm and nm[1:nm.index(".")].isdigit():
            touched_planes.add(int(nm[1:nm.index(".")]))
        else:
            touched_nvlink = True
    meta: dict = {"builder": builder, "domain": domain, "domains": count, "domain_unit": shape.unit, "gpus": H,
                  "gpus_per_domain": shape.gpus}
    if nv is not None:
        meta["nvlink"] = {"model": nv.model, "switches_per_domain": nv.switches_per_domain,
                          "bandwidth_bps": nv.bandwidth_bps, "link_rate_bps": nv.link_rate_bps}
    bisection = 0
    if plan is not None:
        meta.update({"planes": planes, "nic": f"{planes}x{format_rate(plan.rate)}", "rails": plan.rails,
                     "tiers": plan.tiers, "radix": plan.radix,
                     "oversubscription": round(plan.hosts_per_leaf / plan.uplinks, 6) if plan.spines else None})
        per_plane = []
        intact = analytic_bisection(plan)
        for p in range(planes):
            row = {"plane": p, "endpoints": H, "leaves": plan.leaves, "spines": plan.spines_total,
                   "superspines": plan.superspines, "hosts_per_leaf": plan.hosts_per_leaf,
                   "uplinks_per_leaf": plan.uplinks, "links_per_leaf_spine": plan.links_leaf_spine}
            if p in failed.planes:
                row.update(failed=True, bisection_bps=0)
            elif p in touched_planes:
                tiers = [a["tier"] for a in acc.attrs[H:] if a.get("plane") == p]
                row.update(leaves=tiers.count(1), spines=tiers.count(2), superspines=tiers.count(3),
                           degraded=True, bisection_bps=_plane_maxflow(g, H, p, plan, acc))
            else:
                row["bisection_bps"] = intact
            bisection += row["bisection_bps"]
            per_plane.append(row)
        meta["per_plane"] = per_plane
        meta["bisection_method"] = "analytic per plane" + (" (max-flow on planes with failures)"
                                                           if touched_planes else "")
    if count == 1 and nv is not None:
        # one domain: the halves of the rack also talk over NVLink
        if touched_nvlink:
            gpus = list(range(H))
            nvnodes = [n for n in g if n >= H and g.nodes[n].get("domain") == "nvlink"]
            meta["nvlink_bisection_bps"] = maxflow_cut(g, gpus + nvnodes, gpus[:H // 2], gpus[H // 2:])
        else:
            meta["nvlink_bisection_bps"] = (H // 2) * nv.bandwidth_bps
        bisection += meta["nvlink_bisection_bps"]
    meta["bisection_bps"] = bisection
    if failed:
        meta["failed"] = failed.model_dump()
    return Topology(g, name=name, meta=meta)


def _plane_maxflow(g: nx.MultiGraph, H: int, p: int, plan: PlanePlan, acc: _Acc) -> int:
    """Max-flow between the halves of a plane's hosts (in intact leaf order) over that plane only."""
    order = []
    counters = [0] * plan.rails
    for h in range(H):
        r = acc.attrs[h]["rail"]
        order.append((plan.leaf_of(r, counters[r]), h))
        counters[r] += 1
    order.sort()
    hosts = [h for _, h in order]
    nodes = hosts + [n for n in range(H, len(acc.attrs)) if acc.attrs[n].get("plane") == p]
    return maxflow_cut(g, nodes, hosts[:H // 2], hosts[H // 2:])


def build_cluster(cfg: ClusterConfig | NvlRackConfig | HgxNodeConfig, source: str = "<topology>",
                  prefix: str = "topology", name: str = "cluster") -> Topology:
    """Build a ``kind: cluster``, ``kind: nvl72_rack`` or ``kind: hgx_node`` topology."""
    if isinstance(cfg, ClusterConfig):
        count = cfg.racks if cfg.racks is not None else cfg.nodes
        return build_cluster_from(cfg.domain, count, cfg.nvlink, cfg, cfg.failed, name, "cluster",
                                  source=source, prefix=prefix, gpus=cfg.gpus)
    args = rack_as_cluster(cfg)
    return build_cluster_from(args["domain"], args["count"], args["nvlink"], args["scale_out"], args["failed"],
                              name, args["builder"], source=source, prefix=prefix, so_field=args["so_field"])
