"""Vectorised max-min fair rates of fluid flows whose link usage is given in factorised form.

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
links (a window of a few thousand, rebuilt with one pass over the links when used up; a batch takes
its lowest links up to a work budget, the rest of the window staying candidates), each at its own
level, and every flow whose limit is below all its links' levels. The result is that of
sequential progressive filling (within ``rtol``) in far fewer iterations: 500,000 flows on 131,072
links take about 500 (benchmarks/bench_fluid_solver.py). Per iteration the work is proportional
to the flows on the window's links and the entries of the newly frozen flows, plus the window;
``A`` is never formed.

Two implementations of the same progressive filling are offered (``method`` of
:meth:`FluidProblem.solve`): the default, compiled with numba (:mod:`fabricsim.flows.fluid_compiled`:
one level per step, taken from a heap of lower bounds of the links' levels refreshed only at the
top, so a step costs the flows it freezes; warm starts from the previous solve), and the
vectorised batches described here, in numpy and scipy.sparse only (used when numba is missing, and
as the reference the compiled one is tested against). Their rates agree within rounding.

A vectorised solve works on the active rows of ``F`` only: it takes them out (``F[active]``), builds their
segment -> flow lists (the structure of the transpose, by scipy's counting sort), and when they
use few of the segments renumbers segments and links to the used ones. Sets of segments and flows
are found with marking arrays, not sorting; the loads and fill denominators of the links are
updated by sparse mat-vecs over the frozen flows' rows. benchmarks/bench_solver_cases.py times
this against the previous version on instances captured from engine runs.

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

:func:`check_max_min` states the optimality conditions and reports what an allocation violates:

>>> check_max_min(prob.F, prob.V, prob.cap, np.array([0.5, 0.5, 2.0]))
['flow 2: rate 2 is neither at its limit nor bottlenecked by a saturated link on which it has the largest rate']
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

try:                                      # the C counting sort behind csr.tocsc()
    from scipy.sparse._sparsetools import csr_tocsc as _csr_tocsc
except ImportError:                       # pragma: no cover
    _csr_tocsc = None

__all__ = ["FluidProblem", "FluidRates", "max_min_fair", "check_max_min"]

#: links in the candidate window (the lowest levels, all ties included): at least this many, and
#: one per _LINKS_PER_SLOT constrained links up to 8x this (a rebuild passes over every link, so a
#: large fabric wants a wider window). 4096 measured best of 256..16384 x 2^16..2^22 on the
#: benchmarks/bench_solver_cases.py instances (2,048 GPUs, 106k links); 16,384 and the budget 2^20
#: on instances of the 8,192-GPU layer (426k links: 21 % less time than 4096 and 2^18)
_WINDOW = 4096
_LINKS_PER_SLOT = 26
#: (flow, segment, link) incidences per batch (the lowest-level links of the window up to it)
_BUDGET = 1 << 20
_COMPRESS = 2
#: ... and when the used segments' entries are at most F's, or 1/_COMPRESS_V of V's
_COMPRESS_V = 4


METHODS = ("auto", "compiled", "vectorised")


def _use_compiled(method: str) -> bool:
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, not {method!r}")
    if method == "vectorised":
        return False
    if method == "compiled":
        return True
    return compiled_available()


def compiled_available() -> bool:
    """Whether the compiled solver can run: numba imports (installed, and built for this numpy).
    Asked once per process; ``auto`` falls back to the vectorised solver otherwise."""
    return _compiled_ok()


@functools.lru_cache(maxsize=1)
def _compiled_ok() -> bool:
    try:
        import numba  # noqa: F401
    except Exception:                     # not installed, or not importable with this numpy
        return False
    return True


@dataclass(frozen=True)
class FluidRates:
    """A solved allocation.

    Attributes
    ----------
    rates : numpy.ndarray
        ``float64[n]``, in the capacities' unit per unit of ``F @ V``. ``inf`` for a flow crossing
        no finite-capacity link and without a limit; ``0`` for inactive flows.
    iterations : int
        The vectorised solver: number of batches (each freezes every local bottleneck of the
        window, see the module docstring), at most the number of distinct levels. The compiled
        solver: number of steps (each saturates the links of one level, those within 1e-12
        relative of the lowest, or brings one flow to its limit).
    kept : int
        Flows that kept their earlier rate in a warm start (``0`` for a cold solve).
    """

    rates: np.ndarray
    iterations: int
    kept: int = 0


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
    pos = np.arange(total, dtype=np.int64)
    pos += np.repeat(starts - (np.cumsum(lens) - lens), lens)
    return pos, which


def _transpose_structure(m: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
    """``indptr`` and ``indices`` of the CSR transpose of ``m`` (column -> rows, rows ascending),
    without the values: scipy's counting sort run over one-byte placeholder data."""
    n_row, n_col = m.shape
    if _csr_tocsc is not None:
        try:
            ptr = np.empty(n_col + 1, m.indptr.dtype)
            ind = np.empty(m.nnz, m.indices.dtype)
            _csr_tocsc(n_row, n_col, m.indptr, m.indices, np.ones(m.nnz, np.int8), ptr, ind,
                       np.empty(m.nnz, np.int8))
            return ptr, ind
        except (TypeError, ValueError):                  # a scipy without this kernel signature
            pass
    t = m.tocsc()
    return t.indptr, t.indices


class _Unique:
    """``np.unique(x, return_inverse=True)`` for integers in ``[0, size)`` without sorting: a
    marking array (allocated once) for large ``x``, ``np.unique`` itself for small ones. The
    result is the same (sorted unique values, inverse)."""

    __slots__ = ("flag", "slot", "size")

    def __init__(self, size: int):
        self.size = size
        self.flag = np.zeros(size, bool)
        self.slot = np.empty(size, np.int64)

    def __call__(self, x: np.ndarray, inverse: bool = True):
        if x.size * 64 < self.size:
            return np.unique(x, return_inverse=inverse)
        flag = self.flag
        flag[x] = True
        u = np.flatnonzero(flag)
        flag[u] = False
        if not inverse:
            return u
        slot = self.slot
        slot[u] = np.arange(u.size)
        return u, slot[x]


def _row_reduce(indptr: np.ndarray, values: np.ndarray, ufunc, empty: float) -> np.ndarray:
    """``ufunc``-reduce ``values`` (one per CSR entry) per row; ``empty`` for rows without entries."""
    n = indptr.size - 1
    out = np.full(n, empty)
    nonempty = np.flatnonzero(np.diff(indptr) > 0)
    if nonempty.size:
        out[nonempty] = ufunc.reduceat(values, indptr[nonempty])
    return out


def _merge_parallel_links(V, cap):
    """``V`` (CSR, segments x links) with parallel links merged: of the links crossed by one
    segment only (in all of ``V``) with the same coefficient in its row and the same capacity,
    the first stands for all (they always have the same level and the same flows), the others'
    entries are dropped.

    >>> V = sp.csr_matrix(np.array([[0.5, 0.5, 0.25, 1.0], [0.0, 0.0, 0.0, 1.0]]))
    >>> _merge_parallel_links(V, np.ones(4)).toarray().tolist()
    [[0.5, 0.0, 0.25, 1.0], [0.0, 0.0, 0.0, 1.0]]
    """
    V = V.tocsr()
    uses = np.bincount(V.indices, minlength=V.shape[1])
    row = np.repeat(np.arange(V.shape[0]), np.diff(V.indptr))
    private = np.flatnonzero(uses[V.indices] == 1)
    keep = np.ones(V.nnz, dtype=bool)
    if private.size:
        key = np.stack([row[private], V.data[private].view(np.int64),
                        cap[V.indices[private]].view(np.int64)], axis=1)
        order = np.lexsort((private, key[:, 2], key[:, 1], key[:, 0]))
        k = key[order]
        twin = np.r_[False, (k[1:] == k[:-1]).all(axis=1)]      # not the group's first entry
        keep[private[order][twin]] = False
    if keep.all():
        return V
    ptr = np.zeros(V.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(row[keep], minlength=V.shape[0]), out=ptr[1:])
    return sp.csr_matrix((V.data[keep], V.indices[keep], ptr), shape=V.shape)


class FluidProblem:
    """A max-min problem prepared for repeated solves.

    Validation, canonicalisation (duplicates summed, zeros dropped), the transposes of ``V`` and
    the restriction of the links to those with finite capacity that some segment uses are done
    once here; :meth:`solve` then costs the transpose of the active rows of ``F``, a few mat-vecs
    and the filling itself. Between solves,
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

    def __init__(self, F, V, cap, *, _prepared_links=None, _canonical=False, _image=None):
        self.F = F if _canonical else _as_csr(F, "F")
        # the compiled solver's direct image of F (fluid_compiled.DirectImage): None until a solve
        # goes direct, False if its rows are not for the direct mode
        self._image = _image
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
            self._VTr_ones = sp.csr_matrix((np.ones_like(self._VTr.data), self._VTr.indices,
                                            self._VTr.indptr), shape=self._VTr.shape)
            self._cap_r = self.cap[self.links]
            self._Vr_ptr = self._Vr.indptr.astype(np.int64)
            # the compiled solver's segment and link renumbering maps (all -1 between solves),
            # a per-link count of the used segments crossing it (parallel links are merged) and
            # its buffers (fluid_compiled.Workspace, created on the first compiled solve)
            self._maps = [np.full(self._Vr.shape[0], -1, np.int64),
                          np.full(self._Vr.shape[1], -1, np.int64),
                          np.zeros(self._Vr.shape[1], np.int64), None]
            self._maps_full: dict = {}           # (:meth:`_full_v`)
        else:
            (self.V, self.cap, self.links, self._Vr, self._VTr,
             self._VTr_ones, self._cap_r, self._Vr_ptr, self._maps, self._maps_full) = _prepared_links
        if self.F.shape[1] != self.V.shape[0]:
            raise ValueError(f"F has {self.F.shape[1]} segments, V has {self.V.shape[0]}")
        # F's transpose (segment -> flow lists) is built per solve for the active rows only

    def _full_v(self) -> tuple:
        """``V`` (solver links) and its transpose as int64 / float64 CSR arrays, built once per
        link side (shared by :meth:`with_flows` problems): the compiled solver's view of the whole
        ``V`` (:func:`fabricsim.flows.fluid_compiled.solve_rows`). Parallel links are merged
        (:func:`_merge_parallel_links`) and the links left without entries dropped: the arrays
        are over the links ``keep`` (ascending solver-link numbers), returned last."""
        got = self._maps_full.get("v")
        if got is None:
            Vr = _merge_parallel_links(self._Vr, self._cap_r)
            keep = np.unique(Vr.indices)
            renumber = np.zeros(Vr.shape[1], np.int64)
            renumber[keep] = np.arange(keep.size)
            Vr = sp.csr_matrix((Vr.data, renumber[Vr.indices], Vr.indptr), shape=(Vr.shape[0], keep.size))
            VTr = Vr.T.tocsr()
            VTr.sort_indices()
            got = self._maps_full["v"] = (Vr.indptr.astype(np.int64), Vr.indices.astype(np.int64),
                                          np.ascontiguousarray(Vr.data, np.float64),
                                          VTr.indptr.astype(np.int64), VTr.indices.astype(np.int64),
                                          np.ascontiguousarray(VTr.data, np.float64), keep.astype(np.int64))
        return got

    @property
    def n_flows(self) -> int:
        return self.F.shape[0]

    def with_flows(self, F, *, canonical: bool = False, extends: bool = False) -> "FluidProblem":
        """The same links and segments with another flow matrix ``F`` (V-side work reused).

        ``canonical``: ``F`` is a float64 CSR matrix already in canonical form (each row's
        segments ascending, no duplicates or zeros, every entry finite and positive), as the flow
        engine keeps it: it is used as it is, not copied and checked again (at cluster scale that
        copy, per rate recomputation, is tens of MB).

        ``extends``: ``F``'s first rows are this problem's (the same flows, in the same order),
        others appended: the compiled solver's direct image of the rows
        (:class:`~fabricsim.flows.fluid_compiled.DirectImage`) is handed on (this problem no
        longer has it) and extended by the new rows instead of being built again."""
        if canonical and not (sp.issparse(F) and F.format == "csr" and F.dtype == np.float64
                              and F.has_canonical_format):
            raise ValueError("canonical=True needs a float64 CSR matrix in canonical form")
        image = None
        if extends:
            # handed on, not shared: a second problem extending this one would extend the
            # image with other rows (this problem builds a new one if it solves again)
            image, self._image = self._image, None
        return FluidProblem(F, None, None, _prepared_links=(self.V, self.cap, self.links, self._Vr,
                                                           self._VTr, self._VTr_ones, self._cap_r,
                                                           self._Vr_ptr, self._maps, self._maps_full),
                            _canonical=canonical, _image=image)

    def solve(self, *, active=None, limit=None, rtol: float = 1e-9,
              method: str = "auto", warm=None) -> FluidRates:
        """Max-min fair rates of the active flows.

        Parameters
        ----------
        active : array_like of bool, shape (n_flows,), optional
            Flows taking part (default all). Inactive flows get rate 0 and load nothing.
        limit : array_like, shape (n_flows,), optional
            Per-flow rate caps (``inf`` = none), e.g. a sender's own rate.
        rtol : float
            Vectorised solver: a link saturates with its flows when its level is within ``rtol``
            (relative) of the lowest level (or limit) among those flows; they then freeze at that
            lowest value, so near-ties are resolved together and no link is overloaded. The
            compiled solver takes the links of one level together (within a fixed 1e-12,
            :mod:`fabricsim.flows.fluid_compiled`), each at its own level.
        method : {"auto", "compiled", "vectorised"}
            ``compiled``: the same algorithm compiled with numba
            (:mod:`fabricsim.flows.fluid_compiled`, several times faster on large problems);
            ``vectorised``: numpy / scipy.sparse only. ``auto`` (default) is ``compiled`` when
            numba can be imported. Both give the same rates within rounding.
        warm : tuple (rates, r_gone), optional
            Compiled solver, without ``limit``: resume from an earlier solve of the same flows
            (the same rows of ``F`` and the same links; rows may have been added since). ``rates``
            holds each flow's earlier rate, ``nan`` for a flow not active then (rows past its end
            are new flows); ``r_gone`` is the lowest earlier rate of the flows that have ended
            since (``inf`` if none). Flows whose earlier rate lies below the level at which the
            two problems can first differ keep it, and only the rest is filled again
            (:func:`fabricsim.flows.fluid_compiled.solve_rows` gives the argument); the rates are
            those of a cold solve within rounding. Ignored by the vectorised solver.

        Returns
        -------
        FluidRates
        """
        n = self.n_flows
        if active is None:
            act = np.arange(n)
        else:
            active = np.asarray(active, bool)
            if active.shape != (n,):
                raise ValueError(f"active must have shape ({n},)")
            act = np.flatnonzero(active)
        if limit is None:
            lim = None
        else:
            lim = np.asarray(limit, np.float64).ravel()
            if lim.shape != (n,):
                raise ValueError(f"limit must have shape ({n},)")
            if np.isnan(lim).any() or (lim < 0).any():
                raise ValueError("limit must be >= 0 (inf allowed)")
            lim = lim[act]
        rates = np.zeros(n)
        if n == 0:
            return FluidRates(rates, 0)
        # work on the active rows only (local flow numbers, in the same order as the global ones)
        if _use_compiled(method):
            from . import fluid_compiled
            prev, r_gone = None, np.inf
            if warm is not None and lim is None:
                earlier, r_gone = warm
                earlier = np.asarray(earlier, np.float64)
                prev = np.full(act.size, -1.0)
                inside = act < earlier.size
                e = earlier[act[inside]]
                prev[inside] = np.where(np.isfinite(e), e, -1.0)
            if self._maps[3] is None:
                self._maps[3] = fluid_compiled.Workspace()
            image = self._image if lim is None and fluid_compiled._IMAGE else False
            if image and not image.cover(self.F, self._Vr, self._cap_r):
                image = self._image = False
            if image:
                # the rows as the direct mode sees them, kept between solves
                local, it, kept = image.solve(act, n, prev, float(r_gone), self._maps[3])
            else:
                local, it, kept, direct = fluid_compiled.solve_rows(act, self.F, self._Vr, self._cap_r, lim,
                                                                    self._maps, prev, float(r_gone), self._full_v)
                if direct and image is None:
                    # direct: the next solves of these rows (and of rows appended) keep their view
                    self._image = fluid_compiled.DirectImage(*self._Vr.shape)
        else:
            local, it = self._solve_rows(act, lim, rtol)
            kept = 0
        rates[act] = local
        return FluidRates(rates, it, kept)

    def _solve_rows(self, act, lim, rtol):
        F = self.F if act.size == self.n_flows else self.F[act]
        n = F.shape[0]
        S = F.shape[1]
        rates = np.zeros(n)
        free = np.ones(n, bool)
        if n == 0:
            return rates, 0
        Vr, VTr = self._Vr, self._VTr
        VTr_ones = self._VTr_ones
        cap = self._cap_r
        Vr_ptr = self._Vr_ptr
        # When the active flows use few of the segments (and those carry few of V's entries),
        # renumber segments and links to the used ones: the passes over all segments and links
        # (per solve and per window rebuild) shrink. The renumbering keeps the order, so every sum
        # is the same.
        # segment -> flow lists (F's transpose), trimmed of frozen flows as the solve goes
        ft_ptr, ft_ind = _transpose_structure(F)
        if F.nnz and S:
            used = np.flatnonzero(ft_ptr[1:] > ft_ptr[:-1])
            if used.size * _COMPRESS < S:
                sub = Vr[used]
                if sub.nnz <= max(F.nnz, Vr.nnz // _COMPRESS_V):
                    lk = np.zeros(cap.size, bool)
                    lk[sub.indices] = True
                    lk = np.flatnonzero(lk)
                    lmap = np.empty(cap.size, sub.indices.dtype)
                    lmap[lk] = np.arange(lk.size)
                    Vr = sp.csr_matrix((sub.data, lmap[sub.indices], sub.indptr),
                                       shape=(used.size, lk.size))
                    VTr = Vr.T.tocsr()
                    VTr_ones = sp.csr_matrix((np.ones_like(VTr.data), VTr.indices, VTr.indptr),
                                             shape=VTr.shape)
                    cap = cap[lk]
                    smap = np.empty(S, F.indices.dtype)
                    smap[used] = np.arange(used.size)
                    S = used.size
                    F = sp.csr_matrix((F.data, smap[F.indices], F.indptr), shape=(n, S))
                    ft_ptr = np.append(ft_ptr[used], ft_ptr[-1])
                    Vr_ptr = Vr.indptr.astype(np.int64)
        f_ind, f_dat, f_ptr = F.indices, F.data, F.indptr
        ones_nnz = np.ones(F.nnz)
        ft_row = None
        seg_sum = F.T @ np.ones(n)                # per segment, summed in flow order
        d = VTr @ seg_sum                         # sum of A[f, l] over unfrozen flows
        # number of (unfrozen flow, segment, link) incidences: exact zero <=> no unfrozen flow left
        cnt = np.rint(VTr_ones @ np.diff(ft_ptr).astype(np.float64)).astype(np.int64)
        load = np.zeros(cap.size)                 # load of frozen flows
        alive = cnt > 0
        d[~alive] = 0.0

        limited = lim is not None
        if limited:
            fin = np.flatnonzero(np.isfinite(lim))
            lim_order = fin[np.argsort(lim[fin], kind="stable")]
            lim_sorted = lim[lim_order]
        else:
            lim_order = np.empty(0, np.int64)
        lp = 0                                    # next candidate in lim_order

        def fill(idx):
            return np.maximum(cap[idx] - load[idx], 0.0) / d[idx]

        # candidate window: every alive link whose fill level is <= theta is in cand; levels only
        # rise, so links outside stay out of reach until the window is rebuilt
        window = max(_WINDOW, min(8 * _WINDOW, cap.size // _LINKS_PER_SLOT))
        budget = _BUDGET
        cand = np.empty(0, np.int64)
        theta = -np.inf

        def rebuild():
            idx = np.flatnonzero(alive)
            if idx.size <= window:
                return idx, np.inf
            t = fill(idx)
            th = np.partition(t, window)[window]
            return idx[t <= th], th

        uniq_seg = _Unique(S)
        uniq_flow = _Unique(n)
        uniq_link = _Unique(cap.size)
        iterations = 0
        win = cand
        while True:
            cand = win[alive[win]]
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
            # (the window itself is kept: its links left out of this batch stay candidates)
            tau = theta
            win = cand
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
            segs, ws = uniq_seg(VTr.indices[pos])
            seg_t = np.full(segs.size, np.inf)
            np.minimum.at(seg_t, ws, tc[wl])
            pos, ps = _gather(ft_ptr, segs)              # (segment, flow) pairs
            pf = ft_ind[pos]
            ok = free[pf]
            n_ok = int(np.count_nonzero(ok))
            if pf.size > max(4 * n_ok, 1 << 16):
                # mostly frozen flows met again: drop frozen flows from the segment -> flow lists
                if ft_row is None:
                    ft_row = np.repeat(np.arange(S), np.diff(ft_ptr))
                keep_e = free[ft_ind]
                ft_ind, ft_row = ft_ind[keep_e], ft_row[keep_e]
                ft_ptr = np.concatenate([[0], np.cumsum(np.bincount(ft_row, minlength=S))])
            if n_ok < pf.size:
                ps, pf = ps[ok], pf[ok]
            if limited:
                hi = np.searchsorted(lim_sorted, tau, side="right")
                extra = lim_order[lp:hi]
                extra = extra[free[extra]]               # limited flows that may bind below theta
                flows, pfi = uniq_flow(np.concatenate([pf, extra]) if extra.size else pf)
                pfi = pfi[:pf.size]
            else:
                flows, pfi = uniq_flow(pf)
            fmin = np.full(flows.size, np.inf)           # lowest level among the flow's window links
            np.minimum.at(fmin, pfi, seg_t[ps])
            if limited:
                lim_f = lim[flows]
                key = np.minimum(fmin, lim_f)            # the flow freezes at most here
            else:
                key = fmin
            seg_key = np.full(segs.size, np.inf)
            np.minimum.at(seg_key, ps, key[pfi])
            link_key = np.full(cand.size, np.inf)
            np.minimum.at(link_key, wl, seg_key[ws])
            sat = tc <= link_key * (1.0 + rtol)
            seg_sat = np.zeros(segs.size, bool)
            seg_sat[ws[sat[wl]]] = True
            frz = np.zeros(flows.size, bool)
            frz[pfi[seg_sat[ps]]] = True
            if limited:
                frz |= (lim_f <= fmin) & (lim_f <= tau)
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
            pos, which = _gather(f_ptr, new)             # the new flows' entries (rows sorted)
            fs = f_ind[pos]
            if fs.size * 8 < S:
                # few entries: everything on the touched segments and links only (sums in the
                # same order as the mat-vecs below: segments, and per link its segments, ascending)
                segs, inv = uniq_seg(fs)
                k = segs.size
                w = f_dat[pos]
                sd = np.bincount(inv, weights=w, minlength=k)
                sl = np.bincount(inv, weights=w * r[which], minlength=k)
                sc = np.bincount(inv, minlength=k).astype(np.float64)
                sub = Vr[segs]
                touched, linv = uniq_link(sub.indices)
                m = touched.size
                sw = np.repeat(np.arange(k), np.diff(sub.indptr))
                c = sub.data
                d[touched] -= np.bincount(linv, weights=c * sd[sw], minlength=m)
                load[touched] += np.bincount(linv, weights=c * sl[sw], minlength=m)
                cnt[touched] -= np.rint(np.bincount(linv, weights=sc[sw], minlength=m)
                                        ).astype(np.int64)
            else:
                Fn = F[new]
                ones_new = np.ones(new.size)
                seg = Fn.T @ np.column_stack([ones_new, r])      # per segment: d, load
                seg_cnt = sp.csr_matrix((ones_nnz[:fs.size], fs, Fn.indptr),
                                        shape=Fn.shape).T @ ones_new
                # per link: d removed, load added, incidences gone (each a sum over the link's
                # segments in segment order, whichever of the two forms is taken)
                if Vr.nnz <= 4 * fs.size:
                    full = True
                else:
                    segs = np.flatnonzero(seg_cnt > 0)
                    full = 3 * int((Vr_ptr[segs + 1] - Vr_ptr[segs]).sum()) > Vr.nnz
                if full:
                    delta = VTr @ seg
                    gone = VTr_ones @ seg_cnt
                else:
                    sub = Vr[segs]
                    delta = sub.T @ seg[segs]
                    gone = sp.csr_matrix((np.ones(sub.nnz), sub.indices, sub.indptr),
                                         shape=sub.shape).T @ seg_cnt[segs]
                d -= delta[:, 0]
                load += delta[:, 1]
                touched = np.flatnonzero(gone > 0)
                cnt[touched] -= np.rint(gone[touched]).astype(np.int64)
            dead = touched[cnt[touched] <= 0]
            alive[dead] = False
            d[dead] = 0.0
        # flows never frozen cross no finite link that binds them: their limit, or unbounded
        rest = np.flatnonzero(free)
        rates[rest] = lim[rest] if limited else np.inf
        return rates, iterations


def max_min_fair(F, V, cap, *, limit=None, active=None, rtol: float = 1e-9,
                 method: str = "auto") -> FluidRates:
    """Max-min fair rates for usage ``A = F @ V`` and link capacities ``cap``.

    One-shot form of ``FluidProblem(F, V, cap).solve(active=active, limit=limit, rtol=rtol,
    method=method)``; see :class:`FluidProblem` for the parameters and :class:`FluidRates` for
    the result.
    """
    return FluidProblem(F, V, cap).solve(active=active, limit=limit, rtol=rtol, method=method)


def check_max_min(F, V, cap, rates, limit=None, rtol: float = 1e-6) -> list[str]:
    """Violations of the max-min fairness conditions by ``rates`` (empty list when optimal).

    The conditions, with ``A = F @ V`` and tolerance ``rtol`` (relative):

    * feasibility: ``A.T @ rates <= cap * (1 + rtol)`` and ``rates <= limit * (1 + rtol)``;
    * ``rates >= 0``, and ``inf`` only for a flow crossing no finite-capacity link and without
      a finite limit;
    * bottleneck: every flow with a finite rate is at its limit, or crosses (``A[f, l] > 0``) a
      saturated link (load ``>= cap * (1 - rtol)``) on which no flow with a positive coefficient
      has a rate above ``rates[f] * (1 + rtol)``.

    Parameters are as for :class:`FluidProblem`; ``rates`` is ``float[n_flows]``. Inactive flows
    must be left out of ``F`` (or given ``limit`` 0). ``A`` is never formed.

    Returns
    -------
    list of str
        One line per violation, naming the flow or link.
    """
    F = _as_csr(F, "F")
    V = _as_csr(V, "V")
    cap = np.asarray(cap, np.float64).ravel()
    r = np.asarray(rates, np.float64).ravel()
    n = F.shape[0]
    lim = np.full(n, np.inf) if limit is None else np.asarray(limit, np.float64).ravel()
    out: list[str] = []
    if r.shape != (n,):
        return [f"rates has shape {r.shape}, expected ({n},)"]
    finite_link = np.isfinite(cap).astype(np.float64)
    crosses_finite = (F @ (V @ finite_link)) > 0
    for f in np.flatnonzero(np.isnan(r) | (r < 0)):
        out.append(f"flow {f}: rate {r[f]:g} is negative or NaN")
    for f in np.flatnonzero(np.isinf(r) & (crosses_finite | np.isfinite(lim))):
        out.append(f"flow {f}: infinite rate on a finite link or with a finite limit")
    rr = np.where(np.isfinite(r) & (r >= 0), r, 0.0)
    load = V.T @ (F.T @ rr)
    for l in np.flatnonzero(np.isfinite(cap) & (load > cap * (1 + rtol))):
        out.append(f"link {l}: load {load[l]:g} exceeds capacity {cap[l]:g}")
    for f in np.flatnonzero(rr > lim * (1 + rtol)):
        out.append(f"flow {f}: rate {rr[f]:g} exceeds its limit {lim[f]:g}")
    # largest rate on each segment, then on each link (over entries with positive coefficient)
    FT = F.T.tocsr()
    seg_max = _row_reduce(FT.indptr, rr[FT.indices], np.maximum, -np.inf)
    VT = V.T.tocsr()
    link_max = _row_reduce(VT.indptr, seg_max[VT.indices], np.maximum, -np.inf)
    saturated = np.isfinite(cap) & (load >= cap * (1 - rtol))
    bott = np.where(saturated, link_max, np.inf)
    seg_best = _row_reduce(V.indptr, bott[V.indices], np.minimum, np.inf)
    flow_best = _row_reduce(F.indptr, seg_best[F.indices], np.minimum, np.inf)
    at_limit = rr >= lim * (1 - rtol)
    bad = np.isfinite(r) & (r >= 0) & ~at_limit & ~(flow_best <= rr * (1 + rtol))
    for f in np.flatnonzero(bad):
        out.append(f"flow {f}: rate {rr[f]:g} is neither at its limit nor bottlenecked by a "
                   "saturated link on which it has the largest rate")
    return out
