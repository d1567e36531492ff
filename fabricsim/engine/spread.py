"""How a queue pair's bytes spread over the links: the flow-level meaning of routing and plane split.

The flow engine (:mod:`fabricsim.engine.flow`) does not move packets; it needs, for every queue
pair, the share of its rate that crosses each directed link (:class:`~fabricsim.flows.links.LinkTable`).
That share is built from the same pieces the packet engine uses:

1. **First hop.** The source host's ports towards the destination
   (:meth:`EqualCostPaths.first_hops`, in the NIC order of the packet engine) and the plane-split
   policy's choice among them (``nic.plane_split``: ``per_packet`` keeps all of them, ``per_flow``
   the one its hash picks). A queue pair using several ports splits its rate over them in
   proportion to their line rates (a NIC port is work-conserving; the ports drain one queue).
2. **Switch to switch.** From each first-hop switch towards the switches the destination is
   attached to, the routing policy's flow-level meaning (``RoutingPolicy.fluid``):

   - ``per_flow`` (``ecmp``): at every switch the flow follows ``policy.weights()``, i.e. the
     port :func:`~fabricsim.routing.ecmp.ecmp_index` gives its 5-tuple hash with the run's salt:
     the packet engine's own path, so the same collisions appear;
   - ``uniform`` (``spray``): an even split over the equal-cost ports at every switch
     (``policy.weights()``: the distribution of the packet's draw over the ports);
   - ``balanced`` (``adaptive``, ``flowlet``): ``policy.weights()`` given each equal-cost port's
     capacity towards the destination (its rate, or less if the links beyond it carry less): a
     split in proportion to it, the fluid limit of per-packet load balancing on a fabric with no
     other traffic (docs/fidelity.md). The policy owns the share; this module the capacities;
     with ``simulation.flow.adaptive: waterfill`` the flow engine then moves these shares with the
     load (:mod:`fabricsim.engine.balance`, which rewrites the switch-to-switch segments' rows of
     ``V``, :attr:`SpreadBuilder.mid_walks`).
3. **Last hop.** From the destination's attachment switches to the destination host.

The usage of a queue pair is stored factorised, ``A = F @ V``: ``V`` has one row per *segment*
(a piece of spread shared by many queue pairs: the first hop of a host, the switch-to-switch
spread between two groups of attachment switches, the last hop into a host), ``F`` one row per
queue pair holding the weights of its segments. At 8,192 GPUs ``A`` itself would hold hundreds of
millions of entries; ``F`` holds three per queue pair (uniform and balanced policies). For a
per-flow policy the switch-to-switch path is the queue pair's own: it is written on the links
(segment ``l`` < number of links is link ``l`` alone), so ``V`` grows only by the shared host
segments (one per host and set of ports, and per last hop), not per queue pair.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ..errors import ConfigError
from ..flows.identity import mix64_array


FLUID_KINDS = ("per_flow", "uniform", "balanced")


def fluid_kind(policy_cls) -> str:
    """The flow-level meaning (``RoutingPolicy.fluid``) of a routing policy class; ``ValueError``
    naming the policies that have one if it has none (the scenario check and the builder share it)."""
    kind = getattr(policy_cls, "fluid", "")
    if kind not in FLUID_KINDS:
        from ..routing import ROUTING
        name = getattr(policy_cls, "registry_name", policy_cls.__name__)
        ok = [n for n in ROUTING.names() if getattr(ROUTING.get(n), "fluid", "") in FLUID_KINDS]
        raise ValueError(f"routing policy {name!r} has no flow-level model (allowed with simulation.engine flow: "
                         f"{', '.join(ok)})")
    return kind


def _unique_rows(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows of an int64 matrix and each row's index among them (the distinct rows in the
    order of their hashes): rows grouped by a 64-bit hash, checked equal to their group's first row;
    ``np.unique(axis=0)`` (a sort of whole rows, several times slower) only on a hash collision."""
    h = np.zeros(len(key), np.uint64)
    for c in range(key.shape[1]):
        h = mix64_array(h ^ key[:, c].view(np.uint64))
    uh, first, inv = np.unique(h, return_index=True, return_inverse=True)
    inv = inv.ravel()
    uk = key[first]
    if not (uk[inv] == key).all():                   # a collision: group the rows themselves
        uk, inv = np.unique(key, axis=0, return_inverse=True)
        inv = inv.ravel()
    return uk, inv


class _KeyMemo:
    """int64 keys -> int64 values, kept as sorted arrays: a batch of keys is looked up with one
    ``searchsorted`` (no Python per key)."""

    def __init__(self):
        self.keys = np.zeros(0, dtype=np.int64)
        self.vals = np.zeros(0, dtype=np.int64)

    def lookup(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(values, known)``: each key's value where ``known``."""
        pos = np.searchsorted(self.keys, keys)
        known = pos < len(self.keys)
        pos = np.minimum(pos, max(len(self.keys) - 1, 0))
        known &= self.keys[pos] == keys if len(self.keys) else False
        return (self.vals[pos] if len(self.keys) else np.zeros(len(keys), np.int64)), known

    def add(self, keys: np.ndarray, vals: np.ndarray):
        """Add new (distinct, absent) keys: merged into the sorted arrays (linear in their size)."""
        keys = np.asarray(keys, dtype=np.int64)
        if not len(keys):
            return
        order = np.argsort(keys, kind="stable")
        keys, vals = keys[order], np.asarray(vals, dtype=np.int64)[order]
        pos = np.searchsorted(self.keys, keys)
        self.keys, self.vals = np.insert(self.keys, pos, keys), np.insert(self.vals, pos, vals)


def _by_id(ids: dict, known: list) -> list:
    """The keys of ``ids`` (key -> 0, 1, 2, ... in order of numbering) listed by number: ``known``
    if it lists them all already, else rebuilt."""
    if len(known) == len(ids):
        return known
    out = [None] * len(ids)
    for key, i in ids.items():
        out[i] = key
    return out


class SpreadBuilder:
    """Segments and queue-pair rows for one run (see the module doc).

    Parameters
    ----------
    links : LinkTable
    paths : EqualCostPaths
    policy : RoutingPolicy
        The run's routing policy instance (its ``fluid`` attribute and ``weights()``).
    split : PlaneSplit
        The run's plane-split policy instance.
    """

    def __init__(self, links, paths, policy, split):
        try:
            self.kind = fluid_kind(type(policy))
        except ValueError as exc:
            raise ConfigError(str(exc), field="routing.policy") from None
        self.links = links
        self.paths = paths
        self.policy = policy
        self.split = split
        self.seg_links: list[np.ndarray] = []
        self.seg_coef: list[np.ndarray] = []
        self._up: dict = {}
        self._mid: dict = {}              # (starts, their near attachments) -> (segment, exits)
        self._level: dict = {}            # (level, weights, near attachments) -> :meth:`_step`
        self._down: dict = {}
        # per (switch, the destination's attachments in its component,
        # :meth:`EqualCostPaths.attachments_near`): what lies beyond the switch depends on the
        # destination only through those (paths stay in a component), so GPUs of many racks on
        # one rail share one entry
        self._cap_to: dict = {}           # (switch, those) -> :meth:`_capacity_to`
        self._spread: dict = {}           # (switch, those) -> its spread (:meth:`_spread_at`)
        self._near_dst: dict = {}         # those -> a destination they are the attachments of
        # a shared policy's switch-to-switch segments as made: (segment, starts, a destination),
        # what a load-dependent split (:mod:`fabricsim.engine.balance`) walks again
        self.mid_walks: list = []
        self._first: dict = {}
        self._fh_memo = _KeyMemo()        # (neighbour class of src, attachments of dst) -> first-hop set id
        self._fh_ids: dict = {}           # first-hop switches (tuple) -> their id
        self._fh_by_id: list = []
        self._eid_memo = _KeyMemo()       # (src, first-hop set id) -> _eligible_id
        self._nbr_cls = None
        self._elig: list[np.ndarray] = []     # eligible port sets, by _eligible_id
        self._elig_src: list[int] = []
        self._elig_n: list[int] = []          # their sizes
        # equal-cost egress links per _candidates key: sorted keys, their (offset, count) in _cand_flat
        self._cand_keys = np.zeros(0, dtype=np.int64)
        self._cand_off = np.zeros(0, dtype=np.int64)
        self._cand_cnt = np.zeros(0, dtype=np.int64)
        self._cand_flat = np.zeros(0, dtype=np.int64)      # (its first _cand_len entries used)
        self._cand_len = 0
        self._attach_id = None
        self._attach_keys = None
        self._switch_stub: dict = {}
        self._starts_id: dict = {}         # starts tuple (switches entered, weights) -> id
        self._starts_by_id: list = []
        self._exits_id: dict = {}          # exits tuple (attachment switches reached, weights) -> id
        self._exits_by_id: list = []
        self._direct_ok: dict = {}         # (starts id, attachment id) -> last hop without a walk?
        self._direct_seg = _KeyMemo()      # (starts id, destination) -> its last-hop segment
        self._down_seg = _KeyMemo()        # (exits id, destination) -> its shared last-hop segment
        self._mid_memo = _KeyMemo()        # (starts id, attachment id) -> :meth:`_mid_id`
        self._multi_into = None
        rate = links.rate_bps.astype(np.float64)
        self._rate = rate
        if self.kind == "per_flow":
            # per-flow paths are written on the links themselves: segment l is link l, so a
            # queue pair's path adds entries to F, never rows to V (V is fixed once built)
            # (one-link rows of an identity, as views: one array each is half a second at 8,192 GPUs)
            self.seg_links = list(np.arange(len(links), dtype=np.int64).reshape(-1, 1))
            self.seg_coef = list(np.ones((len(links), 1)))

    # ------------------------------------------------------------------ segments
    @property
    def segments(self) -> int:
        return len(self.seg_links)

    def _segment(self, acc: dict) -> int:
        ids = np.fromiter(acc.keys(), dtype=np.int64, count=len(acc))
        coef = np.fromiter(acc.values(), dtype=np.float64, count=len(acc))
        order = np.argsort(ids)
        self.seg_links.append(ids[order])
        self.seg_coef.append(coef[order])
        return len(self.seg_links) - 1

    def _stub(self, node: int):
        s = self._switch_stub.get(node)
        if s is None:
            s = self._switch_stub[node] = SimpleNamespace(id=node)
        return s

    # ------------------------------------------------------------------ the three parts
    def _eligible_id(self, src: int, dst: int) -> int:
        """Number of the eligible port set of ``src`` towards ``dst`` (its ports to the first-hop
        switches, :meth:`EqualCostPaths.first_hops`, in NIC order); one per (host, first hops)."""
        first = self.paths.first_hops(src, dst)
        if not first:
            raise ValueError(f"host {src} has no port towards host {dst}")
        key = (src, tuple(first))
        got = self._first.get(key)
        if got is None:
            got = self._first[key] = len(self._elig)
            self._elig.append(self.links.ports_towards(src, sorted(first)))
            self._elig_src.append(src)
            self._elig_n.append(len(self._elig[-1]))
        return got

    def _eligible_ids(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """:meth:`_eligible_id` of many (source, destination) pairs, new sets numbered in the
        order of the pairs (as one by one). The first hops depend on the pair only through the
        source's neighbour class and the destination's attachments
        (:meth:`EqualCostPaths.first_hops`), and the eligible set on (source, first hops): both
        are looked up in sorted key arrays, :meth:`EqualCostPaths.first_hops` called once per new
        (class, attachments)."""
        if self._nbr_cls is None:
            self._nbr_cls = np.asarray(self.paths.neighbour_classes(), dtype=np.int64)
        att = self._attach_ids(dst)
        A = int(self._attach_id.max()) + 1
        k1 = self._nbr_cls[src] * A + att
        u1, f1, inv1 = np.unique(k1, return_index=True, return_inverse=True)
        fh, known = self._fh_memo.lookup(u1)
        if not known.all():
            new = np.flatnonzero(~known)
            for u in new.tolist():
                j = int(f1[u])
                first = tuple(self.paths.first_hops(int(src[j]), int(dst[j])))
                if not first:
                    raise ValueError(f"host {int(src[j])} has no port towards host {int(dst[j])}")
                got = self._fh_ids.get(first)
                if got is None:
                    got = self._fh_ids[first] = len(self._fh_by_id)
                    self._fh_by_id.append(first)
                fh[u] = got
            self._fh_memo.add(u1[new], fh[new])
        fh = fh[inv1.ravel()]
        k2 = src * (1 << 24) + fh
        u2, f2, inv2 = np.unique(k2, return_index=True, return_inverse=True)
        eid, known = self._eid_memo.lookup(u2)
        if not known.all():
            new = np.flatnonzero(~known)
            for u in new[np.argsort(f2[new], kind="stable")].tolist():     # in the pairs' order
                j = int(f2[u])
                s_ = int(src[j])
                key = (s_, self._fh_by_id[int(fh[j])])
                got = self._first.get(key)
                if got is None:
                    got = self._first[key] = len(self._elig)
                    self._elig.append(self.links.ports_towards(s_, sorted(key[1])))
                    self._elig_src.append(s_)
                    self._elig_n.append(len(self._elig[-1]))
                eid[u] = got
            self._eid_memo.add(u2[new], eid[new])
        return eid[inv2.ravel()]

    def _first_ports(self, src: int, dst: int) -> np.ndarray:
        return self._elig[self._eligible_id(src, dst)]

    def _weights(self, node: int, ports: np.ndarray, dst: int, qp) -> np.ndarray:
        n = len(ports)
        if n == 1:
            return np.ones(1)
        # the policy's own flow-level share (RoutingPolicy.weights); a shared policy's is given
        # each port's capacity towards dst (balanced: in proportion to it)
        caps = None if self.kind == "per_flow" else self._port_capacities(ports, dst)
        return np.asarray(self.policy.weights(self._stub(node), list(ports), qp, capacity_bps=caps), dtype=np.float64)

    def _port_capacities(self, ports, dst: int) -> list:
        """Per port (links out of one switch towards ``dst``), min(its rate, the line rate beyond
        it, :meth:`_capacity_to`): its rate where it reaches one of ``dst``'s attachment switches."""
        attach = self.paths.attachments(dst)
        near = self.paths.attachments_near
        ports = np.asarray(ports, dtype=np.int64)
        caps = self._rate[ports].tolist()
        memo = self._cap_to
        for k, nxt in enumerate(self.links.dst[ports].tolist()):
            if nxt not in attach:
                beyond = memo.get((nxt, near(nxt, dst)))
                if beyond is None:
                    beyond = self._capacity_to(nxt, dst)
                caps[k] = min(caps[k], beyond)
        return caps

    def _capacity_to(self, node: int, dst: int) -> float:
        """Line rate from switch ``node`` to the destination's attachment switches along equal-cost
        paths (a sum over its ports of min(port rate, what lies beyond)); infinite at an attachment
        switch (the last hop is counted separately)."""
        attach = self.paths.attachments(dst)
        if node in attach:
            return float("inf")
        key = (node, self.paths.attachments_near(node, dst))
        v = self._cap_to.get(key)
        if v is None:
            ports = self.links.ports_towards(node, self.paths.next_hops(node, dst))
            v = self._cap_to[key] = float(sum(self._port_capacities(ports, dst)))
        return v

    def _walk(self, starts: dict, dst: int, qp, near=None) -> tuple[dict, dict]:
        """Spread ``starts`` ({switch: weight}) towards ``dst``'s attachment switches: (link ->
        coefficient, attachment switch -> weight arriving there). Level by level: the switches of
        a level in order of first arrival, each link's and each next switch's weight summed in
        that order (as one dict update after another would). A shared policy's step from one
        level to the next is kept per (level, its weights, the attachments the walk's starts can
        reach, :meth:`EqualCostPaths.attachments_reachable`, passed as ``near`` when the caller
        has them): the spines of every plane, evenly loaded, form the second level of walks from
        many sources."""
        attach = self.paths.attachments(dst)
        memo = self._level if self.kind != "per_flow" else None
        if memo is not None and near is None:
            near = self.paths.attachments_reachable(starts, dst)
        acc_p: list = []
        acc_x: list = []
        exits: dict = {}
        nodes, weights = list(starts.keys()), list(starts.values())
        while nodes:
            key = (tuple(nodes), tuple(weights), near) if memo is not None else None
            step = memo.get(key) if key is not None else None
            if step is None:
                step = self._step(nodes, weights, dst, attach, qp)
                if key is not None:
                    memo[key] = step
            arrived, p, x, nodes, weights = step
            for node, w in arrived:
                exits[node] = exits.get(node, 0.0) + w
            if p is None:
                break
            acc_p.append(p)
            acc_x.append(x)
        if not acc_p:
            return {}, exits
        p, x = np.concatenate(acc_p), np.concatenate(acc_x)
        up, inv = np.unique(p, return_inverse=True)
        return dict(zip(up.tolist(), np.bincount(inv.ravel(), weights=x, minlength=len(up)).tolist())), exits

    def _step(self, nodes: list, weights: list, dst: int, attach, qp) -> tuple:
        """One level of :meth:`_walk`: ``(the level's attachment switches with their weights, the
        links leaving the rest, their coefficients, the next level's switches in order of first
        arrival, their weights)``; links ``None`` when nothing leaves."""
        arrived, ps, bs, xs = [], [], [], []
        for node, w in zip(nodes, weights):
            if node in attach:
                arrived.append((node, w))
                continue
            p, b, x = self._spread_at(node, dst, attach, qp)
            ps.append(p)
            bs.append(b)
            xs.append(x * w)
        if not ps:
            return arrived, None, None, [], []
        p, b, x = np.concatenate(ps), np.concatenate(bs), np.concatenate(xs)
        ub, first, inv = np.unique(b, return_index=True, return_inverse=True)
        total = np.bincount(inv.ravel(), weights=x, minlength=len(ub))
        order = np.argsort(first)                      # first arrival
        return arrived, p, x, ub[order].tolist(), total[order].tolist()

    def _spread_at(self, node: int, dst: int, attach, qp) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(links, switches they lead to, shares)`` of the equal-cost ports of switch ``node``
        towards ``dst`` that the policy gives a share; kept per (switch, destination's attachment
        switches in its component) unless the policy decides per queue pair (a shared policy's
        ports and weights depend on the destination only through them:
        :meth:`EqualCostPaths.next_hops`, :meth:`_capacity_to`,
        :meth:`EqualCostPaths.attachments_near`)."""
        key = (node, self.paths.attachments_near(node, dst)) if self.kind != "per_flow" else None
        got = self._spread.get(key) if key is not None else None
        if got is None:
            ports = self.links.ports_towards(node, self.paths.next_hops(node, dst))
            if not len(ports):
                raise ValueError(f"switch {node} has no route to host {dst}")
            x = np.asarray(self._weights(node, ports, dst, qp), dtype=np.float64)
            on = x != 0
            ports = np.asarray(ports, dtype=np.int64)[on]
            got = (ports, self.links.dst[ports].astype(np.int64), x[on])
            if key is not None:
                self._spread[key] = got
                self._near_dst.setdefault(key[1], dst)
        return got

    def row(self, src: int, dst: int, uid: int, flow_hash: int) -> list[tuple[int, float]]:
        """The segments (with weights) of the queue pair ``uid`` from ``src`` to ``dst`` with
        5-tuple hash ``flow_hash``: first hop, switch-to-switch spread, last hop."""
        qp = SimpleNamespace(uid=uid, hash=flow_hash)
        eligible = self._first_ports(src, dst)
        chosen = np.asarray(self.split.ports(qp, list(eligible)), dtype=np.int64)
        # (its parts are memoised per host, per attachment groups and per destination; a memo per
        # (src, dst) pair would hold a million rows at 8,192 GPUs)
        return self._row(src, dst, qp, chosen)

    def _up_segment(self, src: int, chosen: np.ndarray) -> tuple[int, tuple]:
        """The first-hop segment of ``src`` over its ``chosen`` ports (rate-proportional shares),
        and the switches it hands the flow to with their weights; one per (host, ports)."""
        key = (src, tuple(chosen.tolist()))
        up = self._up.get(key)
        if up is None:
            r = self._rate[chosen]
            w = r / r.sum()
            acc = {int(p): float(x) for p, x in zip(chosen, w)}
            starts: dict = {}
            for p, x in acc.items():
                b = int(self.links.dst[p])
                starts[b] = starts.get(b, 0.0) + x
            up = self._up[key] = (self._segment(acc), tuple(sorted(starts.items())))
        return up

    def _last_hop(self, dst: int, exits: tuple, qp):
        """The last hop into ``dst`` from its attachment switches ``exits`` ((switch, weight),
        sorted): a segment shared by every queue pair into ``dst`` with the same exits, unless a
        per-flow policy has a choice there (parallel links into the host); then its links with
        their coefficients, as a dict (written in F)."""
        shared = self.kind != "per_flow" or all(len(self.links.ports_towards(x, [dst])) == 1 for x, _w in exits)
        dkey = (dst, exits) if shared else None
        down = self._down.get(dkey) if dkey is not None else None
        if down is None:
            acc = {}
            for x, w in exits:
                ports = self.links.ports_towards(x, [dst])
                for p, c in zip(ports.tolist(), self._weights(x, ports, dst, qp).tolist()):
                    if c:
                        acc[p] = acc.get(p, 0.0) + w * c
            if dkey is None:          # per-flow choice on the last hop: its links, in F
                down = acc
            else:
                down = self._down[dkey] = self._segment(acc)
        return down

    def _row(self, src: int, dst: int, qp, chosen: np.ndarray) -> list[tuple[int, float]]:
        up_seg, starts = self._up_segment(src, chosen)
        if self.kind == "per_flow":
            acc, exits = self._walk(dict(starts), dst, qp)
            mid = (acc, tuple(sorted(exits.items())))
        else:
            mkey = (starts, self.paths.attachments_reachable([x for x, _w in starts], dst))
            mid = self._mid.get(mkey)
            if mid is None:
                mid = self._mid[mkey] = self._new_mid(starts, dst, mkey[1])
        mid_seg, exits = mid
        down = self._last_hop(dst, exits, qp)
        out = [(up_seg, 1.0)]
        if isinstance(mid_seg, dict):
            out.extend(sorted(mid_seg.items()))           # per-flow path: link segments
        elif mid_seg is not None:
            out.append((mid_seg, 1.0))
        if isinstance(down, dict):
            out.extend(sorted(down.items()))
        else:
            out.append((down, 1.0))
        return out

    # ------------------------------------------------------------------ many queue pairs at once
    def rows(self, src, dst, uid, hashes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`row` of many queue pairs, as CSR pieces ``(counts, segments, weights)``: queue
        pair ``k`` has ``counts[k]`` entries, in order. A ``per_flow`` policy with a vectorised
        choice (``flow_index``, e.g. ECMP) walks all of them level by level in numpy; a shared
        policy (spray, adaptive) looks its three segments up once per distinct key of the batch
        (:meth:`_rows_shared`); other per-flow policies are assembled queue pair by queue pair."""
        n = len(src)
        if self.kind != "per_flow":
            return self._rows_shared(np.asarray(src, np.int64), np.asarray(dst, np.int64),
                                     np.asarray(uid, np.int64), np.asarray(hashes, dtype=np.uint64))
        probe = self.policy.flow_index(np.zeros(1, np.int64), np.ones(1, np.int64), np.zeros(1, np.uint64))
        if probe is None:
            counts = np.zeros(n, dtype=np.int64)
            segs: list = []
            ws: list = []
            for k in range(n):
                r = self.row(int(src[k]), int(dst[k]), int(uid[k]), int(hashes[k]))
                counts[k] = len(r)
                for seg, w in r:
                    segs.append(seg)
                    ws.append(w)
            return counts, np.asarray(segs, dtype=np.int64), np.asarray(ws, dtype=np.float64)
        return self._rows_per_flow(np.asarray(src, np.int64), np.asarray(dst, np.int64),
                                   np.asarray(uid, np.int64), np.asarray(hashes, dtype=np.uint64))

    def _rows_shared(self, src, dst, uid, hashes):
        """:meth:`rows` for a policy whose spread is shared (``uniform``, ``balanced``): every
        queue pair's row is its first-hop segment (:meth:`_up_rows`), the switch-to-switch segment
        of (switches entered, the destination's attachments they can reach) if there is one, and
        the last-hop segment
        of (destination, exits), each looked up once per distinct key of the batch (the segments of
        :meth:`row`; new ones numbered first-hop segments first, in queue-pair order)."""
        n = len(src)
        if not n:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
        up, sid, _q, _node, _w = self._up_rows(src, dst, uid, hashes)
        att = self._attach_ids(dst)
        A = int(self._attach_id.max()) + 1
        # the switch-to-switch part depends on the queue pair only through (starts, the
        # destination's attachments): attachments_reachable reads dst through them alone
        key = sid * A + att
        uk, first, inv = np.unique(key, return_index=True, return_inverse=True)
        got, known = self._mid_memo.lookup(uk)
        if not known.all():
            new = np.flatnonzero(~known)
            new = new[np.argsort(first[new], kind="stable")]       # first-use order: segment numbers
            starts_of = self._starts_list()
            for u in new.tolist():
                j = int(first[u])
                got[u] = self._mid_id(starts_of[int(sid[j])], int(dst[j]))
            self._mid_memo.add(uk[new], got[new])
        got = got[inv.ravel()]
        m, e = (got >> 32) - 1, got & 0xFFFFFFFF      # (m = -1: no switch-to-switch segment)
        # the last hop, per (exits, destination)
        down = self._shared_downs(dst, e)
        has_mid = m >= 0
        counts = 2 + has_mid.astype(np.int64)
        ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=ptr[1:])
        segs = np.empty(int(ptr[-1]), dtype=np.int64)
        segs[ptr[:-1]] = up
        mids = np.flatnonzero(has_mid)
        segs[ptr[mids] + 1] = m[mids]
        segs[ptr[1:] - 1] = down
        return counts, segs, np.ones(len(segs))

    def _new_mid(self, starts: tuple, dst: int, near) -> tuple:
        """A shared policy's switch-to-switch segment from ``starts`` towards ``dst`` (the
        attachments ``near`` reachable) and its exits, ``(segment or None, exits)``; the segment's
        walk is recorded in :attr:`mid_walks`."""
        acc, exits = self._walk(dict(starts), dst, None, near)
        seg = self._segment(acc) if acc else None
        if seg is not None:
            self.mid_walks.append((seg, starts, dst))
        return seg, tuple(sorted(exits.items()))

    @property
    def shared_spreads(self) -> dict:
        """The shared spreads made so far, in the order they were made: (switch, the destination's
        attachment switches in its component) -> (links, the switches they lead to, shares)
        (:meth:`_spread_at`); for reading."""
        return self._spread

    def near_destination(self, near) -> int:
        """A destination host whose attachment switches in some component are ``near`` (a key of
        the shared spreads, :meth:`spread_of`)."""
        return self._near_dst[near]

    def spread_of(self, node: int, dst: int) -> tuple:
        """The shared spread of switch ``node`` towards ``dst`` (:meth:`_spread_at`): ``(links,
        the switches they lead to, shares)``, the links those the policy gives a share."""
        return self._spread_at(node, dst, self.paths.attachments(dst), None)

    def _mid_id(self, starts: tuple, dst: int) -> int:
        """The switch-to-switch segment of ``starts`` towards ``dst`` (:meth:`_row`'s ``mid``) and
        its exits' id, packed as ``(segment + 1) << 32 | exits id`` (``0 << 32``: no segment), for
        :meth:`_rows_shared`'s memo."""
        mkey = (starts, self.paths.attachments_reachable([x for x, _w in starts], dst))
        got = self._mid.get(mkey)
        if got is None:
            got = self._mid[mkey] = self._new_mid(starts, dst, mkey[1])
        eid = self._exits_id.setdefault(got[1], len(self._exits_id))
        if len(self.seg_links) >= 2**31 - 1 or eid >= 2**32:
            raise OverflowError("more than 2^31 - 2 segments or 2^32 exits")
        return ((0 if got[0] is None else got[0] + 1) << 32) | eid

    def _shared_downs(self, dst: np.ndarray, e: np.ndarray) -> np.ndarray:
        """The shared last-hop segment of each queue pair into ``dst`` from the exits ``e`` (ids of
        ``_exits_id``) under a shared policy (:meth:`_last_hop`), looked up per distinct (exits,
        destination) at once; new ones made in first-use order (the numbering of one by one),
        all at once where every exit has one link into the destination (the usual case)."""
        hosts = self.links.topology.num_hosts
        dk = e * hosts + dst
        udk, dfirst, dinv = np.unique(dk, return_index=True, return_inverse=True)
        down, known = self._down_seg.lookup(udk)
        if not known.all():
            new = np.flatnonzero(~known)
            new = new[np.argsort(dfirst[new], kind="stable")]
            exits_of = self._exits_list()
            for u, seg in zip(new.tolist(), self._new_downs(dst[dfirst[new]], e[dfirst[new]], exits_of)):
                down[u] = seg
            self._down_seg.add(udk[new], down[new])
        return down[dinv.ravel()]

    def _new_downs(self, d: np.ndarray, e: np.ndarray, exits_of: list) -> list:
        """:meth:`_last_hop` (shared) of the pairs ``(d[k], exits_of[e[k]])``, in order, as
        segment numbers: the pairs already in ``_down`` read from it; the others, where each
        exit has exactly one link into its destination, made at once (its coefficient the exit's
        weight, as ``w * 1.0`` in :meth:`_last_hop`); any other by :meth:`_last_hop`."""
        out = []
        xs, ws, ks = [], [], []
        todo = []
        for k, (d_, ei) in enumerate(zip(d.tolist(), e.tolist())):
            exits = exits_of[ei]
            got = self._down.get((d_, exits))
            out.append(got)
            if got is None:
                todo.append(k)
                for x, w in exits:
                    xs.append(x)
                    ws.append(w)
                    ks.append(k)
        if not todo:
            return out
        xs_a = np.asarray(xs, dtype=np.int64)
        ks_a = np.asarray(ks, dtype=np.int64)
        links, cnt = self.links.links_between(xs_a, d[ks_a])
        one = np.ones(len(todo), dtype=bool)                   # every exit of the pair: one link
        single = cnt == 1
        one[np.searchsorted(todo, ks_a[~single])] = False
        # per pair in order: its exits' links sorted (as _segment sorts them), coefficients w
        pair = np.searchsorted(todo, ks_a)
        keep = one[pair] & single
        lk = links[np.cumsum(cnt)[keep] - 1]
        cw = np.asarray(ws, dtype=np.float64)[keep]
        pk = pair[keep]
        order = np.lexsort((lk, pk))
        lk, cw, pk = lk[order], cw[order], pk[order]
        bounds = np.searchsorted(pk, np.arange(len(todo) + 1))
        for t, k in enumerate(todo):
            d_, exits = int(d[k]), exits_of[int(e[k])]
            if (d_, exits) in self._down:                      # (a pair repeated in this batch)
                out[k] = self._down[(d_, exits)]
            elif one[t] and self.kind != "per_flow":
                a, b = bounds[t], bounds[t + 1]
                self.seg_links.append(lk[a:b])
                self.seg_coef.append(cw[a:b])
                out[k] = self._down[(d_, exits)] = len(self.seg_links) - 1
            else:
                out[k] = self._last_hop(d_, exits, None)
        return out

    def _exits_list(self) -> list:
        """The exits tuples by id (:meth:`_rows_shared`)."""
        self._exits_by_id = _by_id(self._exits_id, self._exits_by_id)
        return self._exits_by_id

    def _rows_per_flow(self, src, dst, uid, hashes):
        n = len(src)
        # first hop: the plane split's choice (per queue pair), the host's shared segment
        up, sid, q, node, w = self._up_rows(src, dst, uid, hashes)
        hosts = self.links.topology.num_hosts
        # queue pairs whose first hop enters only attachment switches of the destination, none
        # with parallel links into it: their last hop follows from (switches entered, destination)
        # alone, the shared segment of the per-queue-pair row (NVLink inside a rack), no walk
        direct, dq0, ds0 = self._direct(sid, dst, hosts)
        if direct.any():
            keep = ~direct[q]
            q, node, w = q[keep], node[keep], w[keep]
        eq, el, ew = [], [], []
        xq, xn, xw = [], [], []                 # exits: (queue pair, attachment switch, weight)
        while len(q):
            d = dst[q]
            go = node != d                      # (a first hop straight into the destination host)
            q, node, w, d = q[go], node[go], w[go], d[go]
            ex = self._is_attachment(node, d)   # at one of dst's attachment switches: the last hop
            if ex.any():
                xq.append(q[ex])
                xn.append(node[ex])
                xw.append(w[ex])
                go = ~ex
                q, node, w, d = q[go], node[go], w[go], d[go]
                if not len(q):
                    break
            ports, offset, count = self._candidates(node, d, hosts)
            idx = self.policy.flow_index(node.astype(np.uint64), count.astype(np.uint64), hashes[q])
            link = ports[offset + idx]
            eq.append(q)
            el.append(link)
            ew.append(w)
            node = self.links.dst[link]
        dq, ds, dw = self._last_hops(dst, hashes, xq, xn, xw, hosts)
        eq = np.concatenate(eq) if eq else np.zeros(0, np.int64)
        el = np.concatenate(el) if el else np.zeros(0, np.int64)
        ew = np.concatenate(ew) if ew else np.zeros(0)
        # F rows: the host segment first, the path's links in link order (link l is segment l),
        # then the last hop (a shared segment, or its links)
        order = np.lexsort((el, eq))
        eq, el, ew = eq[order], el[order], ew[order]
        allq = np.concatenate([np.arange(n, dtype=np.int64), eq, dq0, dq])
        segs = np.concatenate([up, el, ds0, ds])
        ws = np.concatenate([np.ones(n), ew, np.ones(len(dq0)), dw])
        order = np.argsort(allq, kind="stable")
        counts = np.bincount(allq, minlength=n).astype(np.int64)
        return counts, segs[order], ws[order]

    def _direct(self, sid, dst, hosts):
        """Which queue pairs enter only attachment switches of their destination on the first
        hop, with one link from each into it (:meth:`_rows_per_flow`), and for those the last-hop
        segment: ``(mask, queue pairs, segments)``, decided per distinct (switches entered,
        destination's attachments) and the segment found per (switches entered, destination)."""
        if self._multi_into is None:
            # hosts with parallel links from one of their attachment switches
            # (a link into host h comes from one of its attachments: h has parallel links from one
            # of them when a (source, h) pair repeats among the links)
            L = self.links
            into = L.dst < hosts
            pair, count = np.unique(L.src[into] * hosts + L.dst[into], return_counts=True)
            self._multi_into = np.zeros(hosts, dtype=bool)
            self._multi_into[pair[count > 1] % hosts] = True
        starts_of = self._starts_list()
        # the verdict depends on the destination through its attachment switches only
        att = self._attach_ids(dst)
        A = int(self._attach_id.max()) + 1
        uv, vfirst, vinv = np.unique(sid * A + att, return_index=True, return_inverse=True)
        ok = np.empty(len(uv), dtype=bool)
        for u, (k, j) in enumerate(zip(uv.tolist(), vfirst.tolist())):
            got = self._direct_ok.get(k)
            if got is None:
                attach = self.paths.attachments(int(dst[j]))
                got = self._direct_ok[k] = all(x in attach for x, _w in starts_of[k // A])
            ok[u] = got
        mask = ok[vinv.ravel()] & ~self._multi_into[dst]
        qs = np.flatnonzero(mask)
        key = sid[qs] * hosts + dst[qs]
        uk, inv = np.unique(key, return_inverse=True)
        useg, known = self._direct_seg.lookup(uk)
        if not known.all():
            # new (switches entered, destination): its last-hop segment, one link from each
            # switch into the destination (no parallel links: the mask) with its weight, as
            # _last_hop builds it; new segments numbered in key order
            new = np.flatnonzero(~known)
            made_k, made_x, made_w = [], [], []
            for u in new.tolist():
                s_, d_ = divmod(int(uk[u]), hosts)
                starts = starts_of[s_]
                got = self._down.get((d_, starts))
                if got is None:
                    made_k += [u] * len(starts)
                    made_x += [x for x, _w in starts]
                    made_w += [w for _x, w in starts]
                    got = -1
                useg[u] = got
            if made_k:
                mk = np.asarray(made_k, dtype=np.int64)
                links, counts = self.links.links_between(np.asarray(made_x, dtype=np.int64),
                                                         uk[mk] % hosts)
                if not (counts == 1).all():
                    raise AssertionError("a direct last hop with parallel links into its host")
                mw = np.asarray(made_w, dtype=np.float64)
                order = np.lexsort((links, mk))
                mk, links, mw = mk[order], links[order], mw[order]
                bounds = np.flatnonzero(np.r_[True, mk[1:] != mk[:-1], True])
                for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
                    u = int(mk[a])
                    s_, d_ = divmod(int(uk[u]), hosts)
                    self.seg_links.append(links[a:b])
                    self.seg_coef.append(mw[a:b])
                    useg[u] = self._down[(d_, starts_of[s_])] = len(self.seg_links) - 1
            self._direct_seg.add(uk[new], useg[new])
        return mask, qs, useg[inv.ravel()]

    def _starts_list(self) -> list:
        """The ``starts`` tuples by id (:meth:`_up_rows`)."""
        self._starts_by_id = _by_id(self._starts_id, self._starts_by_id)
        return self._starts_by_id

    def _last_hops(self, dst, hashes, xq, xn, xw, hosts):
        """The last hop of every queue pair from its exits (attachment switches reached, with
        weights): as :meth:`_last_hop`, one shared segment per (destination, exits) when no exit
        has a choice of link into the host, else the links the policy picks. Returns F entries
        ``(queue pair, segment, weight)``."""
        none = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))
        if not xq:
            return none
        q, node, w = np.concatenate(xq), np.concatenate(xn), np.concatenate(xw)
        # one entry per (queue pair, switch), weights summed (a switch reached along two branches)
        order = np.lexsort((node, q))
        q, node, w = q[order], node[order], w[order]
        first = np.ones(len(q), bool)
        first[1:] = (q[1:] != q[:-1]) | (node[1:] != node[:-1])
        starts = np.flatnonzero(first)
        w = np.add.reduceat(w, starts)
        q, node = q[starts], node[starts]
        d = dst[q]
        ports, offset, count = self._candidates(node, d, hosts)
        nq = int(q.max()) + 1
        choice = np.bincount(q, weights=(count != 1), minlength=nq) > 0
        out_q, out_s, out_w = [], [], []
        pick = choice[q]                      # queue pairs with a choice on some exit: links in F
        if pick.any():
            qq = q[pick]
            idx = self.policy.flow_index(node[pick].astype(np.uint64), count[pick].astype(np.uint64), hashes[qq])
            out_q.append(qq)
            out_s.append(ports[offset[pick] + idx])
            out_w.append(w[pick])
        shared = ~pick
        if shared.any():
            q, node, w, link = q[shared], node[shared], w[shared], ports[offset[shared]]
            # queue pairs with the same (destination, exits) share a segment: group them by that key
            bounds = np.flatnonzero(np.r_[True, q[1:] != q[:-1], True])
            lens = np.diff(bounds)
            flows = q[bounds[:-1]]
            for m in np.unique(lens).tolist():
                sel = np.flatnonzero(lens == m)
                rows = bounds[:-1][sel][:, None] + np.arange(m)[None, :]
                key = np.column_stack([dst[flows[sel]], node[rows], w[rows].view(np.int64)])
                uk, inv = _unique_rows(key)
                seg = np.empty(len(uk), np.int64)
                # (exits id, destination) -> segment, looked up at once: the exits' distinct rows
                # (few) numbered by tuple; the keys not seen yet made in uk's order, as one by one
                ex, ex_inv = _unique_rows(uk[:, 1:])
                ex_id = np.empty(len(ex), np.int64)
                for j, k in enumerate(ex.tolist()):
                    exits = tuple(zip(k[:m], np.asarray(k[m:], np.int64).view(np.float64).tolist()))
                    ex_id[j] = self._exits_id.setdefault(exits, len(self._exits_id))
                e_of = ex_id[ex_inv]
                dkey = e_of * hosts + uk[:, 0]
                seg[:], known = self._down_seg.lookup(dkey)
                new = np.flatnonzero(~known)
                if len(new):
                    exits_of = self._exits_list()
                    for u in new.tolist():
                        d_, exits = int(uk[u, 0]), exits_of[int(e_of[u])]
                        got = self._down.get((d_, exits))       # (known to be shared: no choice)
                        seg[u] = got if got is not None else self._last_hop(d_, exits, None)
                    self._down_seg.add(dkey[new], seg[new])
                out_q.append(flows[sel])
                out_s.append(seg[inv.ravel()])
                out_w.append(np.ones(len(sel)))
        return np.concatenate(out_q), np.concatenate(out_s), np.concatenate(out_w)

    def _up_rows(self, src, dst, uid, hashes):
        """First hops of many queue pairs: each one's host segment (:meth:`_up_segment` of the
        ports the plane split gives it, :meth:`PlaneSplit.pinned`), the id of the switches it
        enters (one per distinct ``starts`` of :meth:`_up_segment`), and those switches with their
        weights as flat arrays ``(queue pair, switch, weight)``, queue pair by queue pair. Work per distinct (source, destination's attachments) and (eligible set, choice),
        not per queue pair; new first-hop segments are numbered in queue-pair order, as one by one."""
        n = len(src)
        # the eligible set depends on dst only through its attachment switches (first_hops)
        group = self._attach_ids(dst)
        pairs, pfirst, pinv = np.unique(src * (int(group.max()) + 1) + group, return_index=True,
                                        return_inverse=True)
        eid = self._eligible_ids(src[pfirst], dst[pfirst])[pinv.ravel()]
        n_elig = np.asarray(self._elig_n, dtype=np.int64)
        pick = self.split.pinned(hashes, n_elig[eid])
        subsets: list = []
        if pick is NotImplemented:
            # a split with no vectorised form: its ports() per queue pair, each distinct subset once
            ids: dict = {}
            pick = np.empty(n, dtype=np.int64)
            for k, (e, u, h) in enumerate(zip(eid.tolist(), uid.tolist(), hashes.tolist())):
                got = tuple(self.split.ports(SimpleNamespace(uid=u, hash=h), list(self._elig[e])))
                j = ids.get((e, got))
                if j is None:
                    j = ids[(e, got)] = len(subsets)
                    subsets.append(np.asarray(got, dtype=np.int64))
                pick[k] = j
        wide = (len(subsets) if subsets else int(n_elig.max())) + 1
        case = eid * wide + (0 if pick is None else pick + 1)      # 0: every eligible port
        ucase, first, cinv = np.unique(case, return_index=True, return_inverse=True)
        cinv = cinv.ravel()
        useg = np.empty(len(ucase), dtype=np.int64)
        ustart = np.empty(len(ucase), dtype=np.int64)             # id of the switches it enters
        unode: list = [None] * len(ucase)
        uw: list = [None] * len(ucase)
        for j in np.argsort(first, kind="stable").tolist():        # first-use order: segment numbers
            e, c = divmod(int(ucase[j]), wide)
            chosen = self._elig[e] if c == 0 else subsets[c - 1] if subsets else self._elig[e][c - 1:c]
            seg, starts = self._up_segment(self._elig_src[e], chosen)
            useg[j] = seg
            ustart[j] = self._starts_id.setdefault(starts, len(self._starts_id))
            unode[j] = [x for x, _w in starts]
            uw[j] = [x for _n, x in starts]
        clen = np.fromiter((len(x) for x in unode), dtype=np.int64, count=len(unode))
        cptr = np.zeros(len(ucase) + 1, dtype=np.int64)
        np.cumsum(clen, out=cptr[1:])
        cnode = np.fromiter((x for xs in unode for x in xs), dtype=np.int64, count=int(cptr[-1]))
        cw = np.fromiter((x for xs in uw for x in xs), dtype=np.float64, count=int(cptr[-1]))
        cnt = clen[cinv]
        q = np.repeat(np.arange(n, dtype=np.int64), cnt)
        end = np.cumsum(cnt)
        pos = np.arange(int(end[-1]) if n else 0, dtype=np.int64) - np.repeat(end - cnt, cnt) + np.repeat(cptr[cinv], cnt)
        return useg[cinv], ustart[cinv], q, cnode[pos], cw[pos]

    def _candidates(self, node: np.ndarray, dst: np.ndarray, hosts: int):
        """Equal-cost egress links of every (switch, destination host) pair, as a flat array with
        per-pair offsets and counts (in the order a switch lists them), computed once per
        distinct (switch, destination's attachment group) and, at an attachment switch, per
        (switch, destination), and kept in sorted key arrays (a lookup is a ``searchsorted``)."""
        att = self._attach_ids(dst)
        in_att = self._is_attachment(node, dst)
        keys = np.where(in_att, -(node * hosts + dst) - 1, node * (1 << 32) + att)
        uniq, first, inv = np.unique(keys, return_index=True, return_inverse=True)
        pos = np.searchsorted(self._cand_keys, uniq)
        known = pos < len(self._cand_keys)
        known[known] = self._cand_keys[pos[known]] == uniq[known]
        if not known.all():
            unknown = np.flatnonzero(~known)
            new_cnt = np.empty(len(unknown), dtype=np.int64)
            new_off = np.empty(len(unknown), dtype=np.int64)
            start = self._cand_len
            # at an attachment switch: its links into the destination host, all pairs at once
            last = in_att[first[unknown]]
            parts = []
            if last.any():
                j = first[unknown[last]]
                got, cnt = self.links.links_between(node[j], dst[j])
                if not cnt.all():
                    k = int(j[np.flatnonzero(cnt == 0)[0]])
                    raise ValueError(f"switch {int(node[k])} has no route to host {int(dst[k])}")
                new_cnt[last] = cnt
                new_off[last] = start + np.cumsum(cnt) - cnt
                start += len(got)
                parts.append(got)
            for u in np.flatnonzero(~last).tolist():
                j = first[unknown[u]]
                x, d_ = int(node[j]), int(dst[j])
                got = self.links.ports_towards(x, self.paths.next_hops(x, d_))
                if not len(got):
                    raise ValueError(f"switch {x} has no route to host {d_}")
                new_cnt[u] = len(got)
                new_off[u] = start
                start += len(got)
                parts.append(got)
            need = start
            if need > len(self._cand_flat):
                grown = np.empty(max(need, 2 * len(self._cand_flat)), dtype=np.int64)
                grown[:self._cand_len] = self._cand_flat[:self._cand_len]
                self._cand_flat = grown
            if parts:
                self._cand_flat[self._cand_len:need] = np.concatenate(parts)
            self._cand_len = need
            new_keys = uniq[unknown]
            keys_all = np.concatenate([self._cand_keys, np.asarray(new_keys, dtype=np.int64)])
            order = np.argsort(keys_all, kind="stable")
            self._cand_keys = keys_all[order]
            self._cand_off = np.concatenate([self._cand_off, new_off])[order]
            self._cand_cnt = np.concatenate([self._cand_cnt, new_cnt])[order]
            pos = np.searchsorted(self._cand_keys, uniq)
        inv = inv.ravel()
        return self._cand_flat, self._cand_off[pos][inv], self._cand_cnt[pos][inv]

    def _attach_ids(self, dst: np.ndarray) -> np.ndarray:
        if self._attach_id is None:
            hosts = self.links.topology.hosts
            ids: dict = {}
            self._attach_id = np.array([ids.setdefault(self.paths.attachments(h), len(ids)) for h in hosts],
                                       dtype=np.int64)
        return self._attach_id[dst]

    def _is_attachment(self, node: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Whether each ``node`` is one of host ``dst``'s attachment switches (vectorised)."""
        if self._attach_keys is None:
            hosts = self.links.topology.num_hosts
            keys = [s * hosts + h for h in self.links.topology.hosts for s in self.paths.attachments(h)]
            self._attach_keys = np.unique(np.asarray(keys, dtype=np.int64))
        hosts = self.links.topology.num_hosts
        k = node * hosts + dst
        pos = np.searchsorted(self._attach_keys, k)
        pos = np.minimum(pos, len(self._attach_keys) - 1)
        return self._attach_keys[pos] == k

    def usage(self, row: list[tuple[int, float]]) -> dict:
        """The link coefficients of a queue pair (``row`` from :meth:`row`), summed over its
        segments: link id -> share of the queue pair's rate on it (for tests and reports)."""
        out: dict = {}
        for seg, w in row:
            for link, c in zip(self.seg_links[seg].tolist(), self.seg_coef[seg].tolist()):
                out[link] = out.get(link, 0.0) + w * c
        return out
