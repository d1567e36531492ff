"""Adaptive routing at flow level under load: the water-filled split (``simulation.flow.adaptive: waterfill``).

The packet engine's ``adaptive`` (and ``flowlet``) routing sends each packet (flowlet) to the
candidate port of the best grade: the least backlog, combined with the grade the next switch
reports for its port towards the destination (CONGA's ``max(local, remote)``,
:mod:`fabricsim.routing.quality`). All packets at one switch towards one destination group face the
same candidates and the same grades, so in the fluid limit the switch splits that group's traffic
over its candidates in shares that depend on the load, not on the flow. The flow engine's
``balanced`` spread (:mod:`fabricsim.engine.spread`) fixes those shares in proportion to each
port's capacity towards the destination: the fluid limit when every candidate carries the same
other traffic. This module makes them load-dependent.

**The model.** An *entry* is one shared spread: a switch and the attachment switches of a
destination group (:attr:`SpreadBuilder.shared_spreads`), with its candidate links (*slots*) and their shares
``x``. Given the flows' max-min rates, each entry carries ``T`` (its flows' rates times the weight
arriving at the switch) and each slot link carries ``L`` (all flows); the *other* load of slot ``s``
is ``L_s - T x_s``. When the slot leads to another switch ``n`` (not an attachment switch of the
group), ``n``'s candidate links towards the group form its downstream pool, with capacity ``C_n``
(the pool's links added up) and other load ``P_n - T X`` (``P_n`` the pool links' loads, ``X`` the
entry's share into ``n``; parallel slots into ``n`` each stand for their capacity's part of it): the
one-hop look-ahead of the packet engine's remote reports. :func:`~fabricsim.flows.waterfill.fill_one`
then splits ``T`` over the slots so that ``max(local utilisation, downstream pool utilisation)`` is
level: the least-loaded candidates fill first.

**The fixed point.** The split and the max-min rates are solved together, at each rate
recomputation of the flow engine (``FlowEngine._rebalance``): from the rates, :meth:`residual`
re-fills every entry from the same loads and measures how far the split is from that (the largest
change of a slot's load, as a fraction of its link's capacity); while that exceeds
``waterfill_tolerance``, :meth:`settle` re-fills the entries one after the other, upstream first, each
from the loads the ones before it left, its moves carried down the switches it feeds (Gauss-Seidel
sweeps with the rates fixed: every entry's move sees the others', where simultaneous moves of groups
sharing links overshoot), the segments' ``V`` rows are rewritten and the rates solved again, at most
``waterfill_iterations`` times. The last split is kept; a recomputation that reaches the cap is
counted (``run.flow_waterfill_unconverged``) and the run warns. The split carries over from one
recomputation to the next (the sweeps start from it).

**When it cannot change anything.** If at every switch the candidate sets of all groups that use a
link are one and the same set (a *class*), split in proportion to link capacity, and the classes a
switch's candidates lead into receive the same traffic per unit of capacity from every source,
then for any rates every candidate of an entry has the same local and downstream utilisation and
the proportional split is already water-filled: :meth:`AdaptiveBalance.sync` checks this once per
new set of entries (a symmetric fabric, every flow adaptive: the 8,192-GPU presets), and the flow
engine then skips the iteration, running exactly as ``proportional``.

**What is kept fixed.** A switch whose candidates lead to different mixes of the destination's
attachment switches (a destination attached to several switches of one component, reached through
a choice) keeps the proportional split: its shares decide how the traffic reaches the destination's
ports, which the shared last-hop segments fix. First hops (the NIC's ports, the plane split) are
not routing and are not rebalanced.
"""
from __future__ import annotations

import itertools

import numpy as np

from ..flows.identity import mix64_array
from ..flows.waterfill import fill_one

#: shares within this (relative) of the capacity-proportional ones count as proportional
_REL = 1e-9
#: a segment's coefficient on a link below this is dropped (products of shares a water-filled
#: entry left at rounding level; the max-min solvers divide by sums of coefficients)
_TINY = 1e-12


class AdaptiveBalance:
    """The water-filled split of a run's shared spreads (module doc).

    Parameters
    ----------
    spread : SpreadBuilder
        The run's spreads (a ``balanced`` policy).
    cap : numpy.ndarray
        Link capacities in the rates' unit (the flow engine's payload capacities).
    tolerance : float
        Fixed-point tolerance: the largest change of a slot's load a new split would make, as a
        fraction of the slot's link capacity.
    iterations : int
        Re-solves per rate recomputation at most.
    compiled : bool
        Run the sweeps compiled with numba (:mod:`fabricsim.engine.balance_compiled`), the same
        arithmetic.
    """

    def __init__(self, spread, cap, tolerance: float, iterations: int, compiled: bool = False):
        self.sb = spread
        if compiled:
            from .balance_compiled import sweep
            self._sweep_fn = sweep
        else:
            self._sweep_fn = _sweep
        self.cap = np.asarray(cap, dtype=np.float64)
        self.tolerance = float(tolerance)
        self.iterations = int(iterations)
        self._key_id: dict = {}
        self._keys: list = []
        self._e_links: list = []
        self._e_next: list = []
        self._e_x0: list = []
        self._e_nodes: list = []            # per entry: the switches its slots lead to
        self._e_near: list = []             # per entry: its attachment set's number
        self._near_num: dict = {}           # attachment set -> number
        self._member = np.zeros(0, dtype=np.int64)    # (set number << 32 | switch) of every set
        self._ecode = np.zeros(0, dtype=np.int64)     # (set number << 32 | switch) of the entries, sorted
        self._eid = np.zeros(0, dtype=np.int64)       # ... and their numbers
        self._pending: list = []
        self._spread_seen = 0
        self._walks_seen = 0
        self._mid_seg: list = []            # per recorded switch-to-switch segment: its number in V
        self._st: list = []                 # its starts at entries: (segment index, entry, weight)
        #: whether the split can differ from the proportional one (:meth:`sync`; module doc, "When
        #: it cannot change anything")
        self.needed = False
        #: whether the shares moved from the proportional ones (:meth:`settle`)
        self.moved = False
        self.x = np.zeros(0)                # the current shares, slot by slot
        self._target = None

    # ------------------------------------------------------------------ entries
    def _near_id(self, near) -> int:
        """A number for an attachment set (its switches added to the membership codes)."""
        i = self._near_num.get(near)
        if i is None:
            i = self._near_num[near] = len(self._near_num)
            codes = (np.int64(i) << 32) | np.asarray(sorted(near), dtype=np.int64)
            self._member = np.union1d(self._member, codes)
        return i

    def _add(self, keys) -> None:
        """Register the entries ``keys`` = (switch, the group's attachments in its component) and,
        batch by batch, the entries their slots lead to; each slot's next entry (-1: it enters an
        attachment switch) found by sorted integer codes, not per slot."""
        sb = self.sb
        while keys:
            first = len(self._keys)
            for key in keys:
                if key in self._key_id:
                    continue
                got = sb.shared_spreads.get(key)
                if got is None:             # (every entry a walk crosses exists; made if not)
                    got = sb.spread_of(key[0], sb.near_destination(key[1]))
                ports, nxt, x = got
                e = self._key_id[key] = len(self._keys)
                self._keys.append(key)
                self._e_links.append(np.asarray(ports, dtype=np.int64))
                self._e_x0.append(np.asarray(x, dtype=np.float64))
                self._e_nodes.append(np.asarray(nxt, dtype=np.int64))
                self._e_near.append(self._near_id(key[1]))
            new = range(first, len(self._keys))
            if not len(new):
                return
            codes = np.array([(self._e_near[e] << 32) | key[0] for e, key in zip(new, self._keys[first:])],
                             dtype=np.int64)
            ids = np.arange(first, len(self._keys), dtype=np.int64)
            allc = np.concatenate([self._ecode, codes])
            o = np.argsort(allc, kind="stable")
            self._ecode, self._eid = allc[o], np.concatenate([self._eid, ids])[o]
            cnt = [len(self._e_nodes[e]) for e in new]
            nodes = np.concatenate([self._e_nodes[e] for e in new])
            near = np.repeat(np.array([self._e_near[e] for e in new], dtype=np.int64), cnt)
            code = (near << 32) | nodes
            pos = np.minimum(np.searchsorted(self._member, code), len(self._member) - 1)
            exit_ = self._member[pos] == code
            pos = np.minimum(np.searchsorted(self._ecode, code), max(len(self._ecode) - 1, 0))
            found = self._ecode[pos] == code
            nxt = np.where(exit_, -1, np.where(found, self._eid[pos], -2))
            bounds = np.zeros(len(cnt) + 1, dtype=np.int64)
            np.cumsum(cnt, out=bounds[1:])
            self._e_next.extend(nxt[a:b] for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()))
            # next entries not registered yet: registered in the next batch, then filled in below
            missing = np.flatnonzero(nxt == -2)
            keys = []
            if len(missing):
                nearset = {i: n for n, i in self._near_num.items()}
                keys = list(dict.fromkeys((int(nodes[j]), nearset[int(near[j])]) for j in missing.tolist()))
                self._pending.extend(first + np.unique(np.searchsorted(bounds, missing, side="right") - 1))
        for e in self._pending:
            near = self._keys[e][1]
            self._e_next[e] = np.array([n if n != -2 else self._key_id[(int(m), near)]
                                        for n, m in zip(self._e_next[e].tolist(), self._e_nodes[e].tolist())],
                                       dtype=np.int64)
        self._pending = []

    def sync(self) -> bool:
        """Take in the entries and switch-to-switch segments the spread made since the last call
        and check again whether the split can differ from the proportional one (:attr:`needed`).
        Segments made after the split moved were walked with proportional shares: their ``V``
        rows are rewritten with the current ones (they have carried nothing yet). Returns whether
        ``V`` rows were rewritten."""
        sb = self.sb
        if len(sb.shared_spreads) == self._spread_seen and len(sb.mid_walks) == self._walks_seen:
            return False
        first_new = len(self._mid_seg)
        while len(sb.shared_spreads) != self._spread_seen:
            keys = list(itertools.islice(sb.shared_spreads.keys(), self._spread_seen, None))
            self._spread_seen = len(sb.shared_spreads)
            self._add(keys)
        for seg, starts, dst in sb.mid_walks[self._walks_seen:]:
            m = len(self._mid_seg)
            self._mid_seg.append(seg)
            for node, w in starts:
                near = sb.paths.attachments_near(node, dst)
                if node not in near:
                    if (node, near) not in self._key_id:
                        self._add([(node, near)])
                    self._st.append((m, self._key_id[(node, near)], w))
        self._walks_seen = len(sb.mid_walks)
        self._spread_seen = len(sb.shared_spreads)
        self._build()
        self.needed = not self._proportional_is_level()
        if self.moved and len(self._mid_seg) > first_new:
            self._prepare()
            self._write(range(first_new, len(self._mid_seg)))
            return True
        return False

    def _build(self):
        """Slot arrays of every entry registered (entries only ever added: the shares of the slots
        known keep their values, new slots start proportional)."""
        cnt = np.fromiter((len(x) for x in self._e_links), dtype=np.int64, count=len(self._e_links))
        E = len(cnt)
        self.ptr = np.zeros(E + 1, dtype=np.int64)
        np.cumsum(cnt, out=self.ptr[1:])
        self.cnt = cnt
        self.s_entry = np.repeat(np.arange(E, dtype=np.int64), cnt)
        self.s_link = np.concatenate(self._e_links) if E else np.zeros(0, np.int64)
        self.s_next = np.concatenate(self._e_next) if E else np.zeros(0, np.int64)
        self.s_x0 = np.concatenate(self._e_x0) if E else np.zeros(0)
        self.x = np.concatenate([self.x, self.s_x0[len(self.x):]])
        self.a = self.cap[self.s_link]
        self.pool = np.bincount(self.s_entry, weights=self.a, minlength=E)
        self.nx = self.s_next >= 0
        self.free = self._free()
        self.multi = (cnt >= 2) & self.free
        self._prepared = False

    def _prepare(self):
        """What the fixed point needs beyond the static check, made on first use: bundles, the
        starts matrix, the sweep order, work arrays."""
        if self._prepared:
            return
        self._prepared = True
        E, cnt, nx = len(self._keys), self.cnt, self.nx
        # slots into the same next switch form a bundle (parallel links): they share its pool
        _u, bundle = np.unique(self.s_entry * (E + 1) + np.where(nx, self.s_next, E), return_inverse=True)
        self.bundle = bundle.ravel()
        self.a_bundle = np.bincount(self.bundle, weights=self.a)
        # heights (switch hops to the group's attachment switches, at most) and, per entry, the
        # slot visits a move entering it makes (the propagation stack's bound)
        height = np.zeros(E, dtype=np.int64)
        reach = np.zeros(E, dtype=np.int64)
        for e in self._post_order():
            lo, hi = self.ptr[e], self.ptr[e + 1]
            nxt = self.s_next[lo:hi]
            inner = nxt[nxt >= 0]
            height[e] = 1 + int(height[inner].max()) if len(inner) else 0
            reach[e] = (hi - lo) + int(reach[inner].sum())
        self._walk_plan(height)
        movers = np.flatnonzero(self.multi)
        self.order = movers[np.argsort(-height[movers], kind="stable")]
        kmax = int(cnt.max()) if E else 0
        self._work = (np.zeros(len(self.a_bundle)), np.zeros(len(self.a_bundle)), np.zeros(kmax), np.zeros(kmax), np.zeros(kmax),
                      np.zeros(kmax), np.zeros(2 * kmax), np.zeros(2 * kmax))
        size = 1 + (int(reach.max()) if E else 0)
        self._stack_s = np.zeros(size, dtype=np.int64)
        self._stack_v = np.zeros(size)
        self._seen_l = np.zeros(len(self.cap), dtype=np.int64)
        self._seen_t = np.zeros(E, dtype=np.int64)
        self._done = np.full(E, -1, dtype=np.int64)
        self._target = None

    def _walk_plan(self, height):
        """The walks of the recorded switch-to-switch segments as (segment, entry) *pairs* (the
        entries a segment's walk reaches): its starts, the moves from pair to pair through
        non-exit slots (grouped by the height of the entry they leave, upstream first), and the
        place in the segment's ``V`` row of every (pair, slot) link. :meth:`_arrive` and
        :meth:`_write` then cost a few ``bincount`` over them."""
        E = len(self._keys)
        st = np.array(self._st, dtype=np.float64).reshape(-1, 3)
        sm, se = st[:, 0].astype(np.int64), st[:, 1].astype(np.int64)
        code = sm * E + se
        pairs = np.unique(code)
        self._start_w = st[:, 2]
        src, slot, dst = [], [], []
        frontier = pairs
        while len(frontier):
            pm, pe = np.divmod(frontier, E)
            cnt = self.cnt[pe]
            rep = np.repeat(np.arange(len(frontier)), cnt)
            sl = np.repeat(self.ptr[pe], cnt) + (np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt))
            keep = self.s_next[sl] >= 0
            rep, sl = rep[keep], sl[keep]
            to = pm[rep] * E + self.s_next[sl]
            src.append(frontier[rep])
            slot.append(sl)
            dst.append(to)
            new = np.setdiff1d(np.unique(to), pairs)
            pairs = np.union1d(pairs, new)
            frontier = new
        src = np.concatenate(src) if src else np.zeros(0, np.int64)
        slot = np.concatenate(slot) if slot else np.zeros(0, np.int64)
        dst = np.concatenate(dst) if dst else np.zeros(0, np.int64)
        o = np.argsort(-height[src % E], kind="stable")
        self._tr = (np.searchsorted(pairs, src[o]), slot[o], np.searchsorted(pairs, dst[o]))
        self._tr_bounds = np.flatnonzero(np.r_[True, np.diff(height[src[o] % E]) != 0, True]) if len(o) \
            else np.zeros(1, np.int64)
        self._pair_m, self._pair_e = np.divmod(pairs, E)
        self._start_pair = np.searchsorted(pairs, code)
        # every (pair, slot) link: its place among the segments' V entries
        cnt = self.cnt[self._pair_e]
        self._cp = np.repeat(np.arange(len(pairs)), cnt)
        self._cs = np.repeat(self.ptr[self._pair_e], cnt) + (np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt))
        sb = self.sb
        lens = np.fromiter((len(sb.seg_links[g]) for g in self._mid_seg), dtype=np.int64, count=len(self._mid_seg))
        self._vptr = np.zeros(len(lens) + 1, dtype=np.int64)
        np.cumsum(lens, out=self._vptr[1:])
        flat = np.concatenate([sb.seg_links[g] for g in self._mid_seg]) if self._mid_seg else np.zeros(0, np.int64)
        m = self._pair_m[self._cp]
        link = self.s_link[self._cs]
        # (each segment's links are sorted: a search in its own part)
        key_all = np.repeat(np.arange(len(lens), dtype=np.int64), lens) * (len(self.cap) + 1) + flat
        key = m * (len(self.cap) + 1) + link
        self._vpos = np.searchsorted(key_all, key)
        if len(key) and not (key_all[np.minimum(self._vpos, len(key_all) - 1)] == key).all():
            raise AssertionError("a water-filled segment reaches a link outside its walk")

    def _arrive(self) -> np.ndarray:
        """Weight of each recorded segment's walk arriving at each of its entries (per pair) under
        the current shares."""
        arr = np.bincount(self._start_pair, weights=self._start_w, minlength=len(self._pair_m))
        src, slot, dst = self._tr
        b = self._tr_bounds
        for lo, hi in zip(b[:-1].tolist(), b[1:].tolist()):
            arr += np.bincount(dst[lo:hi], weights=arr[src[lo:hi]] * self.x[slot[lo:hi]], minlength=len(arr))
        return arr

    def _post_order(self) -> list:
        """Every entry after the entries its slots lead to (depth first, by number)."""
        seen = np.zeros(len(self._keys), dtype=bool)
        out = []
        for root in range(len(self._keys)):
            if seen[root]:
                continue
            stack = [(root, False)]
            while stack:
                e, done = stack.pop()
                if done:
                    out.append(e)
                    continue
                if seen[e]:
                    continue
                seen[e] = True
                stack.append((e, True))
                for n in self._e_next[e].tolist():
                    if n >= 0 and not seen[n]:
                        stack.append((n, False))
        return out

    def _free(self) -> np.ndarray:
        """Entries whose slots all lead to the same mix of the group's attachment switches (under
        the proportional shares): any split of theirs reaches the destination's ports as the
        proportional one does. An entry of a group with one attachment switch in its component is."""
        E = len(self._keys)
        free = np.ones(E, dtype=bool)
        memo: dict = {}

        def profile(e):
            got = memo.get(e)
            if got is None:
                acc: dict = {}
                for p, n, w in zip(self._e_links[e].tolist(), self._e_next[e].tolist(), self._e_x0[e].tolist()):
                    for k, v in (slot_profile(e, p, n)).items():
                        acc[k] = acc.get(k, 0.0) + w * v
                got = memo[e] = acc
            return got

        def slot_profile(e, p, n):
            return {int(self.sb.links.dst[p]): 1.0} if n < 0 else profile(n)

        for e, key in enumerate(self._keys):
            if len(key[1]) < 2 or len(self._e_links[e]) < 2:
                continue
            profs = [slot_profile(e, p, n) for p, n in zip(self._e_links[e].tolist(), self._e_next[e].tolist())]
            first = profs[0]
            free[e] = all(pr.keys() == first.keys() and all(abs(pr[k] - first[k]) <= 1e-9 for k in first)
                          for pr in profs[1:])
        return free

    def _proportional_is_level(self) -> bool:
        """The static check of the module doc: (A) every link is a slot of entries with one slot set
        only, their shares proportional to link capacity; (B) the slots of every multi-slot entry
        lead to classes whose load per unit of capacity comes from the same sources in the same
        proportions (or all leave the component's switches for the destination's)."""
        E = len(self._keys)
        if not E:
            return True
        s_entry, s_link, a = self.s_entry, self.s_link, self.a
        h = mix64_array((s_link + 1).astype(np.uint64))
        with np.errstate(over="ignore"):
            sig = np.add.reduceat(h, self.ptr[:-1]) if len(h) else np.zeros(E, np.uint64)
            sig = mix64_array(sig ^ mix64_array(self.cnt.astype(np.uint64)))
        # (A) one slot set per link, shares in proportion to capacity
        s_sig = sig[s_entry]
        order = np.lexsort((s_sig, s_link))
        same_link = s_link[order][1:] == s_link[order][:-1]
        if (s_sig[order][1:] != s_sig[order][:-1])[same_link].any():
            return False
        if (np.abs(self.s_x0 - a / self.pool[s_entry]) > _REL * np.maximum(self.s_x0, 1e-300)).any():
            return False
        # (B) the sources of each class's load per unit of capacity: entries through their slots,
        # switch-to-switch segments through their starts
        nx = self.nx
        st = np.array(self._st, dtype=np.float64).reshape(-1, 3)
        st_e = st[:, 1].astype(np.int64)
        cls = np.concatenate([sig[self.s_next[nx]], sig[st_e]])
        src = np.concatenate([s_entry[nx], E + st[:, 0].astype(np.int64)]).astype(np.uint64)
        val = np.concatenate([self.s_x0[nx] / self.pool[self.s_next[nx]], st[:, 2] / self.pool[st_e]])
        if len(cls):
            o = np.lexsort((src, cls))
            cls, src, val = cls[o], src[o], val[o]
            first = np.r_[True, (cls[1:] != cls[:-1]) | (src[1:] != src[:-1])]
            starts = np.flatnonzero(first)
            val = np.add.reduceat(val, starts)
            cls, src = cls[starts], src[starts]
            mant, ex = np.frexp(val)
            code = (np.round(mant * 2.0**36).astype(np.int64) ^ (ex.astype(np.int64) << 40)).astype(np.uint64)
            hv = mix64_array(mix64_array(src) ^ code)
            cstart = np.flatnonzero(np.r_[True, cls[1:] != cls[:-1]])
            with np.errstate(over="ignore"):
                col = np.add.reduceat(hv, cstart)
            classes = cls[cstart]
        else:
            classes, col = np.zeros(0, np.uint64), np.zeros(0, np.uint64)
        # per slot of a multi-slot entry: its next class's column (exits: a value of their own)
        multi = self.multi[s_entry]
        pos = np.searchsorted(classes, sig[np.maximum(self.s_next, 0)])
        pos = np.minimum(pos, max(len(classes) - 1, 0))
        colh = np.where(nx, col[pos] if len(col) else np.uint64(0), np.uint64(0))
        tag = np.where(nx, np.uint64(1), np.uint64(2))           # exits differ from any column
        key = mix64_array(colh ^ tag)
        ms = np.flatnonzero(self.multi)
        if not len(ms):
            return True
        lo = np.minimum.reduceat(np.where(multi, key, np.uint64(0)), self.ptr[:-1])[ms]
        hi = np.maximum.reduceat(np.where(multi, key, np.uint64(0)), self.ptr[:-1])[ms]
        return bool((lo == hi).all())

    # ------------------------------------------------------------------ the fixed point
    def _run(self, apply: bool, sweeps: int, tol: float) -> float:
        """One call of :func:`_sweep` on the current state (:meth:`residual` set it)."""
        w = self._work
        self._seen_l[:] = 0
        self._seen_t[:] = 0
        return self._sweep_fn(self.order, self.ptr, self.s_link, self.s_next, self.a, self.bundle, self.a_bundle,
                              self.pool, self.x, self._T, self._L, apply, sweeps, tol, self._target,
                              *w, self._stack_s, self._stack_v, self.cap, self._seen_l, self._seen_t, self._done)

    def residual(self, seg_rates: np.ndarray, link_load: np.ndarray) -> float:
        """How far the current split is from the water-filled split for the segments' rates
        ``seg_rates`` (``F^T r``) with the links' loads ``link_load`` (``V^T F^T r``): the largest
        change of a slot's load, as a fraction of its link's capacity, that re-filling every entry
        (each from the same loads) would make. Keeps the loads for :meth:`settle`."""
        self._prepare()
        arr = self._arrive()
        y = seg_rates[np.asarray(self._mid_seg, dtype=np.int64)][self._pair_m] if len(arr) else np.zeros(0)
        self._T = np.bincount(self._pair_e, weights=arr * y, minlength=len(self._keys)).astype(np.float64)
        self._L = np.array(link_load, dtype=np.float64)
        self._target = self.x.copy()
        return self._run(False, 1, 0.0)

    def settle(self, tolerance: float, sweeps: int = 50):
        """Re-fill the entries one after the other, upstream first, each from the loads the ones
        before it left (Gauss-Seidel: an entry's move is carried down the switches it feeds), until a
        sweep moves no slot's load by more than ``tolerance`` of its capacity (at most ``sweeps``),
        the segments' rates fixed; then write the recorded switch-to-switch segments' coefficients
        into the spread's ``V`` rows."""
        self._run(True, sweeps, tolerance)
        self.moved = True
        self._write(range(len(self._mid_seg)))

    def coefficients(self) -> np.ndarray:
        """The recorded segments' coefficients under the current shares, their ``V`` rows one
        after the other (each over the links of its walk, in order)."""
        arr = self._arrive()
        return np.bincount(self._vpos, weights=arr[self._cp] * self.x[self._cs], minlength=int(self._vptr[-1]))

    def _write(self, which):
        """Write the coefficients of the recorded switch-to-switch segments ``which`` (indices)
        under the current shares into the spread's ``V`` rows."""
        vals = self.coefficients()
        vals[vals < _TINY] = 0.0
        v = self._vptr
        for m in which:
            self.sb.seg_coef[self._mid_seg[m]] = vals[v[m]:v[m + 1]]

def _sweep(order, ptr, s_link, s_next, a, bundle, a_bundle, pool, x, T, L, apply, sweeps, tol, target,
           xb, pl, other, cap_down, other_down, t, bl, bs, stack_s, stack_v, cap, seen_l, seen_t, done):
    """Water-fill the entries ``order`` (upstream first) from the entries' traffic ``T`` and the
    links' loads ``L`` (:class:`AdaptiveBalance`'s slot arrays): with ``apply``, each entry's new
    shares go into ``x`` at once and its moves are carried into ``L`` and down the entries it feeds
    (``T`` and their links, through their shares), sweep after sweep until one moves no slot's load
    by more than ``tol`` of its capacity (at most ``sweeps``); without, one pass from the same loads,
    the shares into ``target``. Returns the last pass's largest move. After the first sweep, an
    entry none of whose inputs (its traffic, its slots' and pools' loads) moved by more than
    ``tol / 16`` of their capacity since it was last filled is not filled again (``seen_l``,
    ``seen_t``: when a link's load, an entry's traffic last moved, in steps of the sweep; ``done``:
    when each entry was last filled). Plain loops: compiled by numba as it is
    (:mod:`fabricsim.engine.balance_compiled`)."""
    inf = np.inf
    moved = 0.0
    quiet = tol / 16.0
    step = 0
    for e in order:
        done[e] = -1
    for _sw in range(sweeps):
        moved = 0.0
        for e in order:
            te = T[e]
            if te <= 0.0:
                continue
            lo = ptr[e]
            hi = ptr[e + 1]
            k = hi - lo
            step += 1
            if done[e] >= 0:
                # filled before: again only if an input moved since
                last = done[e]
                fresh = seen_t[e] > last
                for s in range(lo, hi):
                    if fresh:
                        break
                    if seen_l[s_link[s]] > last:
                        fresh = True
                    n = s_next[s]
                    if n >= 0 and not fresh:
                        for q in range(ptr[n], ptr[n + 1]):
                            if seen_l[s_link[q]] > last:
                                fresh = True
                                break
                if not fresh:
                    continue
            done[e] = step
            # per bundle (slots into one switch): the entry's share into it, and the other load of
            # the switch's pool (its candidate links' loads less what this entry sends into it)
            for s in range(lo, hi):
                xb[bundle[s]] = 0.0
                pl[bundle[s]] = -1.0
            for s in range(lo, hi):
                xb[bundle[s]] += x[s]
            for j in range(k):
                s = lo + j
                other[j] = L[s_link[s]] - te * x[s]
                n = s_next[s]
                if n >= 0:
                    b = bundle[s]
                    if pl[b] < 0.0:
                        p = 0.0
                        for q in range(ptr[n], ptr[n + 1]):
                            p += L[s_link[q]]
                        pl[b] = max(p - te * xb[b], 0.0)
                    part = a[s] / a_bundle[b]
                    cap_down[j] = pool[n] * part
                    other_down[j] = pl[b] * part
                else:
                    cap_down[j] = inf
                    other_down[j] = 0.0
            fill_one(k, te, a[lo:hi], other, cap_down, other_down, t, bl, bs)
            for s in range(lo, hi):
                xb[bundle[s]] = 0.0
            for j in range(k):
                s = lo + j
                new = t[j] / te
                d = te * (new - x[s])
                m = abs(d) / a[s]
                if m > moved:
                    moved = m
                if not apply:
                    target[s] = new
                    continue
                x[s] = new
                L[s_link[s]] += d
                if m > quiet:
                    seen_l[s_link[s]] = step
                xb[bundle[s]] += d
            if not apply:
                continue
            # the moves into each next switch, down the switches it feeds (their shares unchanged)
            top = 0
            for s in range(lo, hi):
                b = bundle[s]
                d = xb[b]
                n = s_next[s]
                if n < 0 or d == 0.0:
                    continue
                xb[b] = 0.0
                T[n] += d
                if abs(d) > quiet * pool[n]:
                    seen_t[n] = step
                for r in range(ptr[n], ptr[n + 1]):
                    w = d * x[r]
                    if w != 0.0:
                        stack_s[top] = r
                        stack_v[top] = w
                        top += 1
                while top > 0:
                    top -= 1
                    q = stack_s[top]
                    v = stack_v[top]
                    L[s_link[q]] += v
                    if abs(v) > quiet * cap[s_link[q]]:
                        seen_l[s_link[q]] = step
                    n = s_next[q]
                    if n >= 0:
                        T[n] += v
                        if abs(v) > quiet * pool[n]:
                            seen_t[n] = step
                        for r in range(ptr[n], ptr[n + 1]):
                            w = v * x[r]
                            if w != 0.0:
                                stack_s[top] = r
                                stack_v[top] = w
                                top += 1
        if not apply or moved <= tol:
            break
    return moved
