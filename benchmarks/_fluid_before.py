"""FROZEN COPY (for benchmarks/bench_solver_cases.py) of fabricsim/flows/fluid.py as of commit
677e8d8, before the solver speed-up, less its unchanged checker. Not imported by the package.

Vectorised max-min fair rates of fluid flows whose link usage is given in factorised form.

A flow-level engine recomputes the rates of all live flows every time one starts or ends. This
module is that computation: progressive filling (Bertsekas & Gallager, *Data Networks* 6.5.2)
over sparse matrices, never materialising the flow x link incidence.

The model
---------
``n`` flows, ``L`` directed links with capacities ``cap[L]`` (any consistent unit, e.g. payload
bytes per ps; ``inf`` = unconstrained). A flow's usage of the links is ``A = F @ V``:

* ``F`` (``n x S``, CSR, non-negative): the share of each flow carried by each *segment*, e.g.
  0.25 on each of four NIC-port segments of a flow split over four planes;
* ``V`` (``S x L``, CSR, non-negative): the coefficient of each segment on each link, e.g. a
  explicit path (1 on each of its links) or a spray (1/128 on each of 128 uplinks).

A flow at rate ``r`` puts ``r * A[f, l]`` on link ``l``. Rates are max-min fair: raise all
unfrozen flows together; when links saturate (or flows reach their own rate ``limit``), freeze
the flows crossing them; repeat.

How it is computed
------------------
A link's *fill level* ``t = (cap - load of frozen flows) / (sum of A[f, l] over unfrozen
flows)`` is the common rate at which it would saturate; levels only rise as flows freeze. A
link is a *local bottleneck* when no unfrozen flow crossing it has a lower limit or crosses a
link of lower level: nothing can freeze its flows sooner, so progressive filling saturates it at
exactly its own ``t``. Each iteration freezes every local bottleneck among the lowest-level
links (a window of a few hundred, rebuilt with one pass over the links when used up), each at its
own level, and every flow whose limit is below all its links' levels. The result is that of
sequential progressive filling (within ``rtol``) in far fewer iterations: 500,000 flows on 131,072
links take about 500 (benchmarks/bench_fluid_solver.py). Per iteration the work is proportional
to the flows on the window's links and the entries of the newly frozen flows, plus the window;
``A`` is never formed.

>>> import numpy as np, scipy.sparse as sp
>>> F = sp.identity(3, format="csr")                   # one segment per flow
>>> V = sp.csr_matrix(np.array([[1., 0.], [1., 1.], [0., 1.]]))
>>> sol = max_min_fair(F, V, np.array([1.0, 3.0]))
>>> sol.rates.tolist(), sol.iterations
([0.5, 0.5, 2.5], 2)

A flow split half and half over two links, beside a flow on the first link only: link 0
carries ``0.5 r0 + r1`` and saturates first, at ``r0 = r1 = 2/3``:

>>> V = sp.csr_matrix(np.array([[0.5, 0.5], [1.0, 0.0]]))
>>> r = max_min_fair(sp.identity(2, format="csr"), V, np.array([1.0, 1.0])).rates
>>> np.round(r, 12).tolist()
[0.666666666667, 0.666666666667]

A prepared problem is solved again with fewer flows through the ``active`` mask:

>>> prob = FluidProblem(sp.identity(3, format="csr"),
...                     sp.csr_matrix(np.array([[1., 0.], [1., 1.], [0., 1.]])), np.array([1.0, 3.0]))
>>> prob.solve(active=np.array([True, False, True])).rates.tolist()
[1.0, 0.0, 3.0]

``fabricsim.flows.fluid.check_max_min`` states the optimality conditions and reports what an allocation violates:

>>> from fabricsim.flows.fluid import check_max_min
>>> check_max_min(prob.F, prob.V, prob.cap, np.array([0.5, 0.5, 2.0]))
['flow 2: rate 2 is neither at its limit nor bottlenecked by a saturated link on which it has the largest rate']
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

__all__ = ["FluidProblem", "FluidRates", "max_min_fair"]


@dataclass(frozen=True)
class FluidRates:
    """A solved allocation.

    Attributes
    ----------
    rates : numpy.ndarray
        ``float64[n]``, in the capacities' unit per unit of ``F @ V``. ``inf`` for a flow crossing
        no finite-capacity link and without a limit; ``0`` for inactive flows.
    iterations : int
        Number of batches (each freezes every local bottleneck of the window, see the module
        docstring); at most the number of distinct levels.
    """

    rates: np.ndarray
    iterations: int


def _as_csr(m, name: str) -> sp.csr_matrix:
    m = sp.csr_matrix(m, dtype=np.float64, copy=True)
    m.sum_duplicates()
    if m.data.size and (not np.all(np.isfinite(m.data)) or m.data.min() < 0):
        raise ValueError(f"{name} must have finite, non-negative entries")
    m.eliminate_zeros()
    return m


def _gather(indptr: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions in ``indices``/``data`` of the entries of CSR ``rows``, and the row (as an index
    into ``rows``) each belongs to."""
    starts = indptr[rows]
    lens = indptr[rows + 1] - starts
    total = int(lens.sum())
    if total == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    which = np.repeat(np.arange(rows.size), lens)
    offs = np.cumsum(lens) - lens
    pos = np.arange(total) - np.repeat(offs, lens) + np.repeat(starts, lens)
    return pos, which


class FluidProblem:
    """A max-min problem prepared for repeated solves.

    Validation, canonicalisation (duplicates summed, zeros dropped), the transposes and the
    restriction of the links to those with finite capacity that some segment uses are done once
    here; :meth:`solve` then costs a few mat-vecs plus the filling itself. Between solves,
    finished or not-yet-started flows are switched off with ``active`` instead of rebuilding
    ``F``; :meth:`with_flows` swaps ``F`` while reusing the link-side work on ``V``.

    Parameters
    ----------
    F : sparse matrix, shape (n_flows, n_segments)
        Non-negative share of each flow on each segment.
    V : sparse matrix, shape (n_segments, n_links)
        Non-negative coefficient of each segment on each link.
    cap : array_like, shape (n_links,)
        Link capacities, ``>= 0``; ``inf`` for an unconstrained link.
    """

    def __init__(self, F, V, cap, *, _prepared_links=None):
        self.F = _as_csr(F, "F")
        if _prepared_links is None:
            self.V = _as_csr(V, "V")
            self.cap = np.asarray(cap, dtype=np.float64).ravel()
            if self.cap.size != self.V.shape[1]:
                raise ValueError(f"cap has {self.cap.size} entries, V has {self.V.shape[1]} links")
            if np.isnan(self.cap).any() or (self.cap < 0).any():
                raise ValueError("cap must be >= 0 (inf allowed)")
            used = np.zeros(self.cap.size, bool)
            used[self.V.indices] = True
            #: indices of the links the solver works on (finite capacity, used by some segment)
            self.links = np.flatnonzero(used & np.isfinite(self.cap))
            self._Vr = self.V[:, self.links].tocsr()
            self._Vr.sort_indices()
            self._VTr = self._Vr.T.tocsr()
            self._Vr_ones = sp.csr_matrix((np.ones_like(self._Vr.data), self._Vr.indices,
                                           self._Vr.indptr), shape=self._Vr.shape)
        else:
            (self.V, self.cap, self.links, self._Vr, self._VTr, self._Vr_ones) = _prepared_links
        if self.F.shape[1] != self.V.shape[0]:
            raise ValueError(f"F has {self.F.shape[1]} segments, V has {self.V.shape[0]}")
        self._FT = self.F.T.tocsr()
        self._F_ones = sp.csr_matrix((np.ones_like(self.F.data), self.F.indices, self.F.indptr),
                                     shape=self.F.shape)

    @property
    def n_flows(self) -> int:
        return self.F.shape[0]

    def with_flows(self, F) -> "FluidProblem":
        """The same links and segments with another flow matrix ``F`` (V-side work reused)."""
        return FluidProblem(F, None, None, _prepared_links=(self.V, self.cap, self.links, self._Vr,
                                                           self._VTr, self._Vr_ones))

    def solve(self, *, active=None, limit=None, rtol: float = 1e-9) -> FluidRates:
        """Max-min fair rates of the active flows.

        Parameters
        ----------
        active : array_like of bool, shape (n_flows,), optional
            Flows taking part (default all). Inactive flows get rate 0 and load nothing.
        limit : array_like, shape (n_flows,), optional
            Per-flow rate caps (``inf`` = none), e.g. a sender's own rate.
        rtol : float
            A link saturates with its flows when its level is within ``rtol`` (relative) of the
            lowest level (or limit) among those flows; they then freeze at that lowest value, so
            near-ties are resolved together and no link is overloaded.

        Returns
        -------
        FluidRates
        """
        n = self.n_flows
        free = np.ones(n, bool) if active is None else np.asarray(active, bool).copy()
        if free.shape != (n,):
            raise ValueError(f"active must have shape ({n},)")
        lim = np.full(n, np.inf) if limit is None else np.asarray(limit, np.float64).ravel()
        if lim.shape != (n,):
            raise ValueError(f"limit must have shape ({n},)")
        if np.isnan(lim).any() or (lim < 0).any():
            raise ValueError("limit must be >= 0 (inf allowed)")
        rates = np.zeros(n)
        if n == 0:
            return FluidRates(rates, 0)
        u = free.astype(np.float64)
        F, FT, Vr, VTr = self.F, self._FT, self._Vr, self._VTr
        cap = self.cap[self.links]
        d = VTr @ (FT @ u)                        # sum of A[f, l] over unfrozen flows
        # number of (unfrozen flow, segment, link) incidences: exact zero <=> no unfrozen flow left
        cnt = np.rint(self._Vr_ones.T @ (self._F_ones.T @ u)).astype(np.int64)
        load = np.zeros(cap.size)                 # load of frozen flows
        alive = cnt > 0
        d[~alive] = 0.0

        fin = np.flatnonzero(free & np.isfinite(lim))
        lim_order = fin[np.argsort(lim[fin], kind="stable")]
        lim_sorted = lim[lim_order]
        lp = 0                                    # next candidate in lim_order

        def fill(idx):
            return np.maximum(cap[idx] - load[idx], 0.0) / d[idx]

        # candidate window: every alive link whose fill level is <= theta is in cand; levels only
        # rise, so links outside stay out of reach until the window is rebuilt
        window = 256                              # measured best of 256..16384 at 131k links
        budget = 1 << 16                          # (flow, segment, link) incidences per batch
        cand = np.empty(0, np.int64)
        theta = -np.inf

        def rebuild():
            idx = np.flatnonzero(alive)
            if idx.size <= window:
                return idx, np.inf
            t = fill(idx)
            th = np.partition(t, window)[window]
            return idx[t <= th], th

        # segment -> flow lists, trimmed of frozen flows as the solve goes
        ft_ptr, ft_ind = FT.indptr, FT.indices
        ft_row = np.repeat(np.arange(FT.shape[0]), np.diff(FT.indptr))
        iterations = 0
        while True:
            cand = cand[alive[cand]]
            tc = fill(cand)
            keep = tc <= theta
            cand, tc = cand[keep], tc[keep]
            if cand.size == 0:
                cand, theta = rebuild()
                tc = fill(cand)
            while lp < lim_order.size and not free[lim_order[lp]]:
                lp += 1
            if cand.size == 0 and lp >= lim_order.size:
                break
            iterations += 1
            # bound the work: the lowest links of the window up to a budget of incidences; links
            # left out (and those outside the window) all fill at tau or above
            tau = theta
            if cand.size > 1 and cnt[cand].sum() > budget:
                order = np.argsort(tc, kind="stable")
                k = max(1, int(np.searchsorted(np.cumsum(cnt[cand[order]]), budget, side="right")))
                if k < cand.size:
                    tau = tc[order[k]]
                    cand, tc = cand[order[:k]], tc[order[:k]]
            # Every alive link outside cand fills at a level > theta (levels only rise). A link of
            # cand saturates now, at its own level t, if no flow crossing it has a lower limit or
            # crosses a link of lower level (a local bottleneck): nothing can freeze its flows
            # earlier, so progressive filling would saturate it at exactly t. All local
            # bottlenecks of the window are taken in one batch, each at its own level.
            pos, wl = _gather(VTr.indptr, cand)          # (link of cand, segment) pairs
            segs, ws = np.unique(VTr.indices[pos], return_inverse=True)
            seg_t = np.full(segs.size, np.inf)
            np.minimum.at(seg_t, ws, tc[wl])
            pos, ps = _gather(ft_ptr, segs)              # (segment, flow) pairs
            pf = ft_ind[pos]
            ok = free[pf]
            if pf.size > max(4 * int(ok.sum()), 1 << 16):
                # mostly frozen flows met again: drop frozen flows from the segment -> flow lists
                keep_e = free[ft_ind]
                ft_ind, ft_row = ft_ind[keep_e], ft_row[keep_e]
                ft_ptr = np.concatenate([[0], np.cumsum(np.bincount(ft_row, minlength=FT.shape[0]))])
            ps, pf = ps[ok], pf[ok]
            hi = np.searchsorted(lim_sorted, tau, side="right")
            extra = lim_order[lp:hi]
            extra = extra[free[extra]]                   # limited flows that may bind below theta
            flows, fi = np.unique(np.concatenate([pf, extra]), return_inverse=True)
            pfi = fi[:pf.size]
            fmin = np.full(flows.size, np.inf)           # lowest level among the flow's window links
            np.minimum.at(fmin, pfi, seg_t[ps])
            key = np.minimum(fmin, lim[flows])           # the flow freezes at most here
            seg_key = np.full(segs.size, np.inf)
            np.minimum.at(seg_key, ps, key[pfi])
            link_key = np.full(cand.size, np.inf)
            np.minimum.at(link_key, wl, seg_key[ws])
            sat = tc <= link_key * (1.0 + rtol)
            seg_sat = np.zeros(segs.size, bool)
            seg_sat[ws[sat[wl]]] = True
            frz = np.zeros(flows.size, bool)
            frz[pfi[seg_sat[ps]]] = True
            frz |= (lim[flows] <= fmin) & (lim[flows] <= tau)
            new = flows[frz]
            if new.size == 0:                            # only by rounding: take the lowest link
                sat = tc <= tc.min() * (1.0 + rtol)
                seg_sat[ws[sat[wl]]] = True
                frz[pfi[seg_sat[ps]]] = True
                new = flows[frz]
                if new.size == 0:
                    break
            r = key[frz]
            rates[new] = r
            free[new] = False
            # remove the new flows from d and cnt, add their load
            pos, which = _gather(F.indptr, new)
            segs, inv = np.unique(F.indices[pos], return_inverse=True)
            w = F.data[pos]
            seg_d = np.bincount(inv, weights=w, minlength=segs.size)
            seg_load = np.bincount(inv, weights=w * r[which], minlength=segs.size)
            seg_cnt = np.bincount(inv, minlength=segs.size)
            pos, which = _gather(Vr.indptr, segs)
            if pos.size:
                lk = Vr.indices[pos]
                c = Vr.data[pos]
                np.subtract.at(d, lk, c * seg_d[which])
                np.add.at(load, lk, c * seg_load[which])
                np.subtract.at(cnt, lk, seg_cnt[which])
                dead = lk[cnt[lk] <= 0]
                alive[dead] = False
                d[dead] = 0.0
        # flows never frozen cross no finite link that binds them: their limit, or unbounded
        rest = np.flatnonzero(free)
        rates[rest] = lim[rest]
        return FluidRates(rates, iterations)


def max_min_fair(F, V, cap, *, limit=None, active=None, rtol: float = 1e-9) -> FluidRates:
    """Max-min fair rates for usage ``A = F @ V`` and link capacities ``cap``.

    One-shot form of ``FluidProblem(F, V, cap).solve(active=active, limit=limit, rtol=rtol)``;
    see :class:`FluidProblem` for the parameters and :class:`FluidRates` for the result.
    """
    return FluidProblem(F, V, cap).solve(active=active, limit=limit, rtol=rtol)


# check_max_min is unchanged since this version: fabricsim.flows.fluid.check_max_min
