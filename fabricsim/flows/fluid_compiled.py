"""The max-min solve of :mod:`fabricsim.flows.fluid` compiled with numba.

The same problem and the same answer as the vectorised solver (progressive filling, Bertsekas &
Gallager 6.5.2), computed the sequential way, which compiled code makes cheap:

* **one step per level**: the links sit in a 4-ary min-heap keyed by a *lower bound* of their
  fill level (levels only rise as flows freeze, so a key is refreshed only when its link reaches
  the top). A step takes the lowest link and every link whose level is within ``_BATCH``
  (relative, 1e-12: ties but for rounding) of it, freezes each one's unfrozen flows at that
  link's level, and then updates the links of the frozen flows once, per segment, for the whole
  step (a spray segment shared by many flows is touched once, not once per flow). A large tie
  (a symmetric fabric: thousands of links at one level) is collected in one pass over the heap.
  A link of the step keeps the level it had before the step's other freezes: where another link
  of the step froze most of its flows its true level can be higher by ``1e-12 c / (w - c)``
  relative (``c`` the coefficient frozen elsewhere, ``w`` its total), negligible but for links
  left with a tiny share;
* **links' sums kept eagerly or lazily**: a step updates the sums of every link its frozen flows'
  segments cross (eager), or, when the used segments are wide (more than ``_LAZY`` = 4 links each
  on average: an adaptive or spray spread over hundreds of links), only the segments' own sums,
  a link's level being summed over its segments when it reaches the heap's top (lazy; the same
  levels within rounding, measured 2.5-3x faster on steps-heavy adaptive solves,
  benchmarks/README.md);
* **or directly on the links**: when every segment the active flows use crosses one link (ECMP
  paths written on the links, a host's ports merged as below), the segments are the links, and
  a frozen flow is taken out of its links' sums as it freezes, with no per-segment sums in
  between (:func:`_direct_rows`; the same levels within rounding, measured 25 % faster on
  8,192-GPU ECMP solves, benchmarks/README.md);
* **only what the active flows use**: each solve renumbers the active rows of ``F`` and the
  segments and links they use (:func:`_localise_rows`, :func:`_localise_links`, maps kept between
  solves; with wide segments reaching most of ``V``, ``V`` as it is), and merges
  *parallel* links: links crossed by a single used segment, with the same coefficient in it and
  the same capacity, always have the same level and flows (a GPU's 18 NVLink ports under a
  spray, a NIC's ports on 4 planes), so one stands for all;
* **kept between solves**: a problem whose solves go direct keeps that view of all its rows
  (:class:`DirectImage`), extended as flows are added, so such a solve no longer renumbers its
  rows; the large working arrays live in buffers kept between solves (:class:`Workspace`:
  fresh ones cost page faults and zeroing on every solve);
* **helpers without reference counting**: the heap and freeze helpers the kernel calls per link
  and per flow take arrays and allocate nothing, so they are compiled without numba's reference
  counting (``_nrt=False``): with it, every call counts each array argument in and out with
  atomic operations, measured at about a third of a setup-bound solve;
* **warm starts** (:func:`solve_rows`): a recomputation after some flows ended and others started
  keeps every continuing flow whose earlier rate lies below the level at which the two fillings
  can first differ, and refills only the rest.

Rates agree with the vectorised solver within rounding (the sums are taken in another order);
``tests/test_fluid_solver.py`` runs every solver test on both, checks them against each other on
engine-like problems, and warm starts against cold solves through engine-like sequences.
``benchmarks/bench_solver_cases.py`` times both on problems captured from engine runs.

Compilation (about 8 s on the benchmark machine) happens on the first solve of a process, cached on disk by
numba (``cache=True``); later processes load it in about half a second. Importing this module
imports numba; :mod:`fabricsim.flows.fluid` does so only when a compiled solve is asked for.
Tolerances are passed to the kernel as arguments (numba freezes a global's value into the
compiled code).
"""
from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["DirectImage", "Workspace", "solve_rows"]

#: links whose levels are within this (relative) of a step's lowest saturate in that step
_BATCH = 1e-12
#: a step's links taken off the heap's top one by one; a larger tie is taken in one pass
_POPS = 32
#: relative margin below the warm start's level t* under which an earlier rate is kept
_TIE = 1e-9
#: links per used segment above which a solve keeps the links' sums lazily (:func:`_kernel`)
_LAZY = 4.0
#: a solve with eager sums works on the flows' links directly (direct mode, :func:`_direct_rows`)
#: when that takes at most this many entries per entry of ``F`` (1: only when no row grows, as
#: when every used segment crosses one link: ECMP paths written on the links, merged host ports)
_DIRECT = 1.0
#: direct solves of a problem after its first keep its rows' view between solves
#: (:class:`DirectImage`; off: each solve renumbers its active rows, :func:`solve_rows`)
_IMAGE = True
#: direct warm solves of an image keep their per-link flow lists and link sums between solves and
#: bring them up to date by the rows that started or ended (:class:`LinkLists`; off: each solve
#: builds them from all its active rows, :func:`_kernel`)
_INCREMENTAL = True
#: ... when the active rows have more than this many entries each on average: what the kept lists
#: save is per entry (the passes over every active row's entries), what they cost is per row
#: and per layout (measured at 8,192 GPUs: the EP-across-racks ECMP layer, 8.5 entries per row,
#: gains; the EP-inside-NVL72 one, 2-8, 4.9 on average, does not; benchmarks/README.md)
_LONG = 6.0
#: a solve from :class:`LinkLists` whose rows to fill have fewer entries than this share of the
#: lists' walks lists of those rows alone, built for it (:func:`_inc_kernel`; most rows kept)
_FEW = 0.25
#: room at the tail of :class:`LinkLists` for lists that outgrow theirs, per active entry
_TAIL = 0.75
#: a direct image lays its rows out in the order the last solve set their rates
#: (:meth:`DirectImage.solve`; off: in the order they were added)
_LAYOUT = True
_NO_SEQ = np.empty(0, np.int64)
#: ... when more than this share of the solve's visits jumped away from the rows just read
#: (:func:`_far_jumps`; right after a layout about 4-10 % do: a level's flows freeze link by link)
_FAR = 0.1
#: with wide segments, the share of V's entries the used segments reach from which V is used as
#: it is rather than renumbered (:func:`solve_rows`): renumbering costs about 2.5x per entry what
#: the lazy sums over the whole V cost (captured 8,192-GPU adaptive solves using 38-73 % of V's
#: 5.8 M entries: 50-76 ms whole, 90-162 ms renumbered; same rates)
_WHOLE = 0.3


class Workspace:
    """Buffers a solve's largest arrays (one entry per entry of the active rows of ``F``) live in,
    kept between solves (in the ``maps`` of :func:`solve_rows`). A fresh array of that size (tens
    of MB at cluster scale) is new memory from the system each time, and its page faults and
    zeroing cost as much as the renumbering that fills it (measured: a solve of 458k flows that
    keeps almost every earlier rate went from 88 to 52 ms, benchmarks/README.md).
    A buffer grows by half again when it is too short; its contents are not kept."""

    __slots__ = ("_buf",)

    def __init__(self):
        self._buf: dict = {}

    def _kept(self, name: str, size: int, dtype, make) -> np.ndarray:
        """Buffer ``name`` of at least ``size`` entries of ``dtype``, made anew by ``make(length,
        dtype)`` (half again as long as the old one, at least) when it is shorter or of another
        dtype."""
        b = self._buf.get(name)
        if b is None or b.size < size or b.dtype != dtype:
            grown = int(1.5 * b.size) if b is not None else 0
            b = self._buf[name] = make(max(int(size), grown, 16), dtype)
        return b

    def iota(self, n: int) -> np.ndarray:
        """``np.arange(n)`` (int64), kept."""
        return self._kept("iota", n, np.int64, lambda m, t: np.arange(m, dtype=t))[:n]

    def ones(self, n: int) -> np.ndarray:
        """``np.ones(n)``, kept."""
        return self._kept("ones", n, np.float64, np.ones)[:n]

    def release(self, *names: str):
        """Let the buffers ``names`` go (a solve that no longer needs them)."""
        for name in names:
            self._buf.pop(name, None)

    def take(self, name: str, size: int, dtype) -> np.ndarray:
        """A buffer of at least ``size`` entries of ``dtype`` (contents undefined)."""
        return self._kept(name, size, np.dtype(dtype), np.empty)


@njit(cache=True, nogil=True, _nrt=False)
def _level(lk, l):
    """Fill level of link ``l``: the common rate of its unfrozen flows at which it saturates
    (``inf`` when their share sum is 0: coefficients at rounding level, 1e-16 beside 1.0, are
    absorbed by the sum and give it back as exactly 0 when the large one freezes; such flows do
    not load the link)."""
    w = lk[l, 2]
    if w <= 0.0:
        return np.inf
    x = lk[l, 0] - lk[l, 1]
    if x < 0.0:
        x = 0.0
    return x / w


@njit(cache=True, nogil=True, _nrt=False)
def _link_level(l, lazy, lk, vt_ptr, vt_ind, vt_dat, ss):
    """(fill level, unfrozen incidences) of link ``l``: from its own sums ``lk[l]`` (eager), or
    (``lazy``) summed over its segments' state ``ss[s]`` = (unfrozen share, frozen load, unfrozen
    flows); a link without unfrozen flows has level ``inf`` and count 0."""
    if not lazy:
        if lk[l, 3] <= 0.0:
            return np.inf, 0.0
        return _level(lk, l), lk[l, 3]
    u = 0.0
    w = 0.0
    c = 0.0
    for e in range(vt_ptr[l], vt_ptr[l + 1]):
        s = vt_ind[e]
        v = vt_dat[e]
        w += v * ss[s, 0]
        u += v * ss[s, 1]
        c += ss[s, 2]
    if c <= 0.0:
        return np.inf, 0.0
    if w <= 0.0:           # (as _level: unfrozen flows whose shares sum to 0 do not load the link)
        return np.inf, c
    x = lk[l, 0] - u
    if x < 0.0:
        x = 0.0
    return x / w, c


@njit(cache=True, nogil=True, _nrt=False)
def _sift_down(hk, hl, pos, i, size):
    """Move entry ``i`` of the 4-ary min-heap (keys ``hk``, links ``hl``) down to its place."""
    k = hk[i]
    l = hl[i]
    while True:
        c = 4 * i + 1
        if c >= size:
            break
        best = c
        bk = hk[c]
        end = c + 4 if c + 4 < size else size
        for j in range(c + 1, end):
            if hk[j] < bk:
                bk = hk[j]
                best = j
        if bk >= k:
            break
        hk[i] = bk
        hl[i] = hl[best]
        pos[hl[i]] = i
        i = best
    hk[i] = k
    hl[i] = l
    pos[l] = i


@njit(cache=True, nogil=True, _nrt=False)
def _sift_up(hk, hl, pos, i):
    k = hk[i]
    l = hl[i]
    while i > 0:
        p = (i - 1) // 4
        if hk[p] <= k:
            break
        hk[i] = hk[p]
        hl[i] = hl[p]
        pos[hl[i]] = i
        i = p
    hk[i] = k
    hl[i] = l
    pos[l] = i


@njit(cache=True, nogil=True, _nrt=False)
def _remove(hk, hl, pos, l, size):
    """Take link ``l`` out of the heap of ``size`` entries; returns the new size."""
    i = pos[l]
    pos[l] = -1
    size -= 1
    if i == size:
        return size
    hk[i] = hk[size]
    hl[i] = hl[size]
    pos[hl[i]] = i
    if i > 0 and hk[i] < hk[(i - 1) // 4]:
        _sift_up(hk, hl, pos, i)
    else:
        _sift_down(hk, hl, pos, i, size)
    return size


@njit(cache=True, nogil=True, _nrt=False)
def _twin(start, end, ind, dat, glob, uses, cap, l, c):
    """Position among ``start .. end - 1`` of the row being built (local links ``ind``, global
    ``glob[ind]``, coefficients ``dat``) of a link private to its segment (``uses`` 1) with
    coefficient ``c`` and link ``l``'s capacity, which would stand for ``l`` (parallel links,
    :func:`_localise_links`); -1 if none."""
    for q in range(start, end):
        g = glob[ind[q]]
        if dat[q] == c and uses[g] == 1 and cap[g] == cap[l]:
            return q
    return -1


@njit(cache=True, nogil=True, _nrt=False)
def _row_add(w, lo, hi, ind, dat, mark, row, a_ind, a_dat, j):
    """Add ``w`` times entries ``lo .. hi - 1`` of a CSR row (``ind``, ``dat``) to the row being
    built from position ``row`` (``a_ind``, ``a_dat``, ``j`` entries so far; ``mark[x]``: where
    column ``x`` is, if at least ``row``); returns the new ``j``. (F times V, row by row:
    :func:`_direct_rows`, :func:`_image_place`.)"""
    for q in range(lo, hi):
        x = ind[q]
        if mark[x] >= row:
            a_dat[mark[x]] += w * dat[q]
        else:
            mark[x] = j
            a_ind[j] = x
            a_dat[j] = w * dat[q]
            j += 1
    return j


@njit(cache=True, nogil=True)
def _localise_rows(act, f_ptr, f_ind, f_dat, v_ptr, seg_map, ind_buf, dat_buf):
    """The active rows of ``F`` renumbered to the segments they use (in order of first use):
    local CSR ``F`` (flows x used segments; its indices and data are views of ``ind_buf`` and
    ``dat_buf``, kept between solves, at least as long as the rows' entries), the global numbers
    of the used segments, and how many entries of ``V`` they have. ``seg_map`` is all ``-1`` on
    entry, and is left so."""
    n = act.size
    nnz = 0
    for k in range(n):
        nnz += f_ptr[act[k] + 1] - f_ptr[act[k]]
    lf_ptr = np.empty(n + 1, np.int64)
    lf_ind = ind_buf[:nnz]
    lf_dat = dat_buf[:nnz]
    used_segs = np.empty(min(nnz, seg_map.size), np.int64)
    ns = 0
    j = 0
    lf_ptr[0] = 0
    for k in range(n):
        g = act[k]
        for e in range(f_ptr[g], f_ptr[g + 1]):
            s = f_ind[e]
            m = seg_map[s]
            if m < 0:
                m = ns
                seg_map[s] = m
                used_segs[ns] = s
                ns += 1
            lf_ind[j] = m
            lf_dat[j] = f_dat[e]
            j += 1
        lf_ptr[k + 1] = j
    vnnz = 0
    for i in range(ns):
        s = used_segs[i]
        seg_map[s] = -1
        vnnz += v_ptr[s + 1] - v_ptr[s]
    return lf_ptr, lf_ind, lf_dat, used_segs[:ns].copy(), vnnz


@njit(cache=True, nogil=True)
def _localise_links(used_segs, v_ptr, v_ind, v_dat, cap, uses, link_map):
    """The rows of ``V`` of the used segments (:func:`_localise_rows`), renumbered to the links
    they cross (in order of first use): local CSR ``V`` (used segments x links), its transpose
    (links x segments), and the global numbers of the used links.

    Parallel links are merged: links *private* to one used segment (no other used segment crosses
    them) with the same coefficient in its row and the same capacity always have the same level
    and the same flows (a spray over a GPU's 18 NVLink ports, a NIC's ports on 4 planes), so one of
    them stands for all. ``link_map`` is all ``-1`` and ``uses`` all ``0`` on entry, and are left
    so."""
    ns = used_segs.size
    vnnz = 0
    for i in range(ns):
        s = used_segs[i]
        vnnz += v_ptr[s + 1] - v_ptr[s]
        for e in range(v_ptr[s], v_ptr[s + 1]):
            uses[v_ind[e]] += 1
    lv_ptr = np.empty(ns + 1, np.int64)
    lv_ind = np.empty(vnnz, np.int64)
    lv_dat = np.empty(vnnz)
    used_links = np.empty(min(vnnz, link_map.size), np.int64)
    nl = 0
    j = 0
    lv_ptr[0] = 0
    for i in range(ns):
        s = used_segs[i]
        row = j
        for e in range(v_ptr[s], v_ptr[s + 1]):
            l = v_ind[e]
            c = v_dat[e]
            if uses[l] == 1 and _twin(row, j, lv_ind, lv_dat, used_links, uses, cap, l, c) >= 0:
                continue
            m = link_map[l]
            if m < 0:
                m = nl
                link_map[l] = m
                used_links[nl] = l
                nl += 1
            lv_ind[j] = m
            lv_dat[j] = c
            j += 1
        lv_ptr[i + 1] = j
    vnnz = j
    used_links = used_links[:nl].copy()
    for i in range(nl):
        link_map[used_links[i]] = -1
    for i in range(ns):
        s = used_segs[i]
        for e in range(v_ptr[s], v_ptr[s + 1]):
            uses[v_ind[e]] = 0
    # link -> segments (counting sort, segments ascending)
    lvt_ptr = np.zeros(nl + 1, np.int64)
    for e in range(vnnz):
        lvt_ptr[lv_ind[e] + 1] += 1
    for i in range(nl):
        lvt_ptr[i + 1] += lvt_ptr[i]
    fill = lvt_ptr[:-1].copy()
    lvt_ind = np.empty(vnnz, np.int64)
    lvt_dat = np.empty(vnnz)
    for i in range(ns):
        for e in range(lv_ptr[i], lv_ptr[i + 1]):
            l = lv_ind[e]
            lvt_ind[fill[l]] = i
            lvt_dat[fill[l]] = lv_dat[e]
            fill[l] += 1
    return lv_ptr, lv_ind, lv_dat, lvt_ptr, lvt_ind, lvt_dat, used_links


@njit(cache=True, nogil=True)
def _merged_entries(used_segs, v_ptr, v_ind, v_dat, cap, uses, row_ind, row_dat, iota, most):
    """The entries of ``V``'s rows of the used segments once parallel links are merged as
    :func:`_localise_links` merges them (without renumbering anything): what decides whether a
    solve's segments are wide (:func:`_lazy`). ``uses`` is all ``0`` on entry, and is left so;
    ``row_ind`` and ``row_dat`` hold at least the longest row. Counting stops once it passes
    ``most`` (a number above ``most`` is returned then): merging only removes entries, so the
    count so far is a lower bound of the whole, and whether it is above ``most`` is settled. The
    entries on links shared by segments are never merged: when they alone pass ``most``, the
    rows are not walked at all."""
    ns = used_segs.size
    for i in range(ns):
        s = used_segs[i]
        for e in range(v_ptr[s], v_ptr[s + 1]):
            uses[v_ind[e]] += 1
    shared = 0
    for i in range(ns):
        s = used_segs[i]
        for e in range(v_ptr[s], v_ptr[s + 1]):
            if uses[v_ind[e]] > 1:
                shared += 1
    total = shared
    if shared <= most:
        total = 0
        for i in range(ns):
            s = used_segs[i]
            j = 0
            for e in range(v_ptr[s], v_ptr[s + 1]):
                l = v_ind[e]
                c = v_dat[e]
                if uses[l] == 1 and _twin(0, j, row_ind, row_dat, iota, uses, cap, l, c) >= 0:
                    continue
                row_ind[j] = l
                row_dat[j] = c
                j += 1
            total += j
            if total > most:
                break
    for i in range(ns):
        s = used_segs[i]
        for e in range(v_ptr[s], v_ptr[s + 1]):
            uses[v_ind[e]] = 0
    return total


@njit(cache=True, nogil=True)
def _direct_rows(f_ptr, f_ind, f_dat, v_ptr, v_ind, v_dat, n_links, most, ind_buf, dat_buf):
    """Local ``F`` times local ``V``: each flow's coefficient on each link (CSR rows over the links,
    a link's coefficients summed over the flow's segments crossing it), for the direct mode of
    :func:`_kernel`, as views of ``ind_buf`` and ``dat_buf`` (kept between solves); the last
    value returned is the number of entries the rows can take at most. Nothing is built
    (``False, ...``) if that is more than ``most``, or than the buffers hold (the caller then
    calls again with buffers that long). When every segment is one link, numbered as the segment
    (the renumbering of :func:`_localise_links` does so when no two segments share a link), the
    rows are ``F``'s with each weight times its link's coefficient."""
    n = f_ptr.size - 1
    n_seg = v_ptr.size - 1
    same = v_ptr[n_seg] == n_seg and n_links == n_seg
    if same:
        for s in range(n_seg):
            if v_ptr[s + 1] != s + 1 or v_ind[s] != s:
                same = False
                break
    if same:
        if dat_buf.size < f_dat.size:
            return False, f_ptr, f_ind, f_dat, f_dat.size
        a_dat = dat_buf[:f_dat.size]
        for e in range(f_dat.size):
            a_dat[e] = f_dat[e] * v_dat[f_ind[e]]
        return True, f_ptr, f_ind, a_dat, f_dat.size
    bound = 0
    for e in range(f_ind.size):
        s = f_ind[e]
        bound += v_ptr[s + 1] - v_ptr[s]
    if bound > most or bound > ind_buf.size or bound > dat_buf.size:
        return False, f_ptr, f_ind, f_dat, bound
    a_ptr = np.empty(n + 1, np.int64)
    a_ind = ind_buf[:bound]
    a_dat = dat_buf[:bound]
    at = np.full(n_links, -1, np.int64)            # a link's entry in the row being built
    j = 0
    a_ptr[0] = 0
    for k in range(n):
        row = j
        for e in range(f_ptr[k], f_ptr[k + 1]):
            s = f_ind[e]
            j = _row_add(f_dat[e], v_ptr[s], v_ptr[s + 1], v_ind, v_dat, at, row, a_ind, a_dat, j)
        a_ptr[k + 1] = j
    return True, a_ptr, a_ind[:j], a_dat[:j], bound


@njit(cache=True, nogil=True, _nrt=False)
def _freeze(f, r, rates, free, f_ptr, f_ind, f_dat, sg, tsegs, nt):
    """Freeze flow ``f`` at rate ``r``: its share, load and count added to its segments' removal
    sums ``sg`` (segments met for the first time in this step appended to ``tsegs``, of which
    ``nt`` are used); returns the new ``nt``."""
    rates[f] = r
    free[f] = False
    for e in range(f_ptr[f], f_ptr[f + 1]):
        s = f_ind[e]
        if sg[s, 2] == 0.0:
            tsegs[nt] = s
            nt += 1
        sg[s, 0] += f_dat[e]
        sg[s, 1] += f_dat[e] * r
        sg[s, 2] += 1.0
    return nt


@njit(cache=True, nogil=True, _nrt=False)
def _freeze_direct(f, r, rates, free, f_ptr, f_ind, f_dat, lk, gone, ng):
    """:func:`_freeze` when the segments are the links (direct mode, :func:`_kernel`): flow ``f``'s
    load, coefficient and count taken out of its links' sums at once; a link left without
    unfrozen flows is appended to ``gone`` (of which ``ng`` are used: they leave the heap after
    the step); returns the new ``ng``. (No heap call in here: a call with arrays inside a
    per-flow function costs their reference counts on every call.)"""
    rates[f] = r
    free[f] = False
    for e in range(f_ptr[f], f_ptr[f + 1]):
        l = f_ind[e]
        a = f_dat[e]
        lk[l, 1] += a * r
        lk[l, 2] -= a
        lk[l, 3] -= 1.0
        if lk[l, 3] <= 0.0:
            lk[l, 2] = 0.0
            gone[ng] = l
            ng += 1
    return ng


def _lazy(v_entries: int, n_segments: int) -> bool:
    """Links' sums kept lazily: the segments are wide (more than ``_LAZY`` links each on average)."""
    return v_entries > _LAZY * n_segments


def _work_sizes(n: int, n_seg: int, n_links: int) -> tuple[int, int, int]:
    """Entries of the float64, int64 and bool working buffers :func:`_kernel` needs for ``n``
    flows, ``n_seg`` segments and ``n_links`` links (at most: every mode)."""
    return n + 6 * n_seg + 10 * n_links, 3 * n_seg + 5 * n_links + 1, n


@njit(cache=True, nogil=True)
def _fill(lim, lim_order, free, rates, f_ptr, f_ind, f_dat, sg, tsegs, gone, bl, bt, hk, hl, pos, size, lk, lazy,
          direct, v_ptr, v_ind, v_dat, vt_ptr, vt_ind, vt_dat, ss, seg_ptr, seg_end, seg_fl, batch, pops, seq, nq):
    """The filling of :func:`_kernel` once its set-up is done: step by step, the lowest link of the
    heap (``hk``, ``hl``, ``pos``, ``size`` entries) saturates with the links tied with it, or a
    flow reaches its limit (``lim_order``: the limited flows by limit); ``seg_ptr .. seg_end`` of
    each segment (each link in the direct mode) lists the flows ``seg_fl`` that may cross it, the
    frozen ones skipped. Flows still ``free`` at the end cross no link that binds them. Rows
    whose rates it sets are appended to ``seq`` (if not empty) from position ``nq``. Returns
    ``(steps, nq)``. (Shared by :func:`_kernel` and :func:`_inc_kernel`.)"""
    record = seq.size > 0
    lp = 0
    nlim = lim_order.size
    steps = 0
    while True:
        while lp < nlim and not free[lim_order[lp]]:
            lp += 1
        # the lowest link whose key is its current level
        t = np.inf
        l = -1
        while size > 0:
            l = hl[0]
            t, c0 = _link_level(l, lazy, lk, vt_ptr, vt_ind, vt_dat, ss)
            if c0 <= 0.0:
                size = _remove(hk, hl, pos, l, size)
                l = -1
                continue
            if t > hk[0]:
                hk[0] = t
                _sift_down(hk, hl, pos, 0, size)
                l = -1
                continue
            break
        if l < 0 and lp >= nlim:
            break
        steps += 1
        nt = 0
        ng = 0
        if lp < nlim and (l < 0 or lim[lim_order[lp]] < t):
            # a flow's own limit binds first
            f = lim_order[lp]
            if direct:
                ng = _freeze_direct(f, lim[f], rates, free, f_ptr, f_ind, f_dat, lk, gone, ng)
            else:
                nt = _freeze(f, lim[f], rates, free, f_ptr, f_ind, f_dat, sg, tsegs, nt)
            if record:
                seq[nq] = f
                nq += 1
        else:
            # l saturates at level t, and with it every link whose current level is within
            # `batch` of t (levels tied but for rounding; freezing flows at about t keeps them
            # there): each link's unfrozen flows freeze at its own level, and the links' sums
            # are updated once for the whole batch
            nb = 0
            bl[nb] = l
            bt[nb] = t
            nb += 1
            size = _remove(hk, hl, pos, l, size)
            t_hi = t * (1.0 + batch)
            while size > 0:
                l2 = hl[0]
                t2, c2 = _link_level(l2, lazy, lk, vt_ptr, vt_ind, vt_dat, ss)
                if c2 <= 0.0:
                    size = _remove(hk, hl, pos, l2, size)
                    continue
                if t2 > hk[0]:
                    hk[0] = t2
                    _sift_down(hk, hl, pos, 0, size)
                    continue
                if t2 > t_hi:
                    break
                if nb >= pops:
                    # a large tie (a symmetric fabric): take the rest of it in one pass over the
                    # heap (keys are lower bounds, so every candidate has key <= t_hi), refresh
                    # the keys met, and rebuild the heap
                    j = 0
                    for i in range(size):
                        x = hl[i]
                        k = hk[i]
                        if k <= t_hi:
                            tx, cx = _link_level(x, lazy, lk, vt_ptr, vt_ind, vt_dat, ss)
                            if cx <= 0.0:
                                pos[x] = -1
                                continue
                            if tx <= t_hi:
                                bl[nb] = x
                                bt[nb] = tx
                                nb += 1
                                pos[x] = -1
                                continue
                            k = tx
                        hk[j] = k
                        hl[j] = x
                        pos[x] = j
                        j += 1
                    size = j
                    for i in range((size - 2) // 4, -1, -1):
                        _sift_down(hk, hl, pos, i, size)
                    break
                bl[nb] = l2
                bt[nb] = t2
                nb += 1
                size = _remove(hk, hl, pos, l2, size)
            for b in range(nb):
                lb = bl[b]
                tb = bt[b]
                for e in range(vt_ptr[lb], vt_ptr[lb + 1]):
                    s0 = vt_ind[e]
                    for q in range(seg_ptr[s0], seg_end[s0]):
                        f = seg_fl[q]
                        if not free[f]:
                            continue
                        if direct:
                            ng = _freeze_direct(f, tb, rates, free, f_ptr, f_ind, f_dat, lk, gone, ng)
                        else:
                            nt = _freeze(f, tb, rates, free, f_ptr, f_ind, f_dat, sg, tsegs, nt)
                        if record:
                            seq[nq] = f
                            nq += 1
                    seg_end[s0] = seg_ptr[s0]
        # direct: the links left without unfrozen flows leave the heap
        for i in range(ng):
            if pos[gone[i]] >= 0:
                size = _remove(hk, hl, pos, gone[i], size)
        # take the frozen flows out of their links
        for i in range(nt):
            s = tsegs[i]
            dd = sg[s, 0]
            dl = sg[s, 1]
            dc = sg[s, 2]
            sg[s, 0] = 0.0
            sg[s, 1] = 0.0
            sg[s, 2] = 0.0
            if lazy:
                ss[s, 0] -= dd
                ss[s, 1] += dl
                ss[s, 2] -= dc                # (a count: exact, so an emptied segment counts 0)
                continue
            for e in range(v_ptr[s], v_ptr[s + 1]):
                l2 = v_ind[e]
                c = v_dat[e]
                lk[l2, 1] += c * dl
                lk[l2, 2] -= c * dd
                lk[l2, 3] -= dc
                if lk[l2, 3] <= 0.0 and pos[l2] >= 0:
                    lk[l2, 2] = 0.0
                    size = _remove(hk, hl, pos, l2, size)
    return steps, nq


@njit(cache=True, nogil=True)
def _kernel(f_ptr, f_ind, f_dat, act, v_ptr, v_ind, v_dat, vt_ptr, vt_ind, vt_dat, cap, lim, limited, prev,
            r_gone, tie, batch, pops, lazy, direct, fl_buf, fws, iws, bws, seq):
    """Progressive filling of the flows ``act`` (rows of CSR ``F``, ascending) over local ``V``
    (:func:`solve_rows`; with a :class:`DirectImage`, rows of all of ``F``, else the active rows
    renumbered, ``act`` all of them),
    every link finite (in the whole-``V`` mode also links no active flow uses: they have no
    unfrozen flows and never enter the heap). ``prev`` (empty, or one per flow): each flow's rate in an earlier
    solve of the same problem, ``-1`` for a flow new since; ``r_gone``: the lowest earlier rate of
    the flows gone since (``inf`` if none). See :func:`solve_rows` for the warm start.

    ``lazy``: the links' sums are not kept up to date; a link's level is summed over its
    segments when it reaches the heap's top (:func:`_link_level`), so a step costs the segments
    its frozen flows cross, not their links (wide segments: an adaptive spread over hundreds of
    links). Otherwise (eager) each step updates the links of those segments.

    ``direct``: ``F``'s columns are the links themselves (``V`` the identity, :func:`_direct_rows`):
    a frozen flow is taken out of its links' sums as it freezes (:func:`_freeze_direct`), with no
    per-segment sums in between.

    ``lim`` (with ``limited``): one limit per row, for ``act`` every row (:func:`solve_rows`;
    a :class:`DirectImage` solves without limits).

    ``fl_buf`` (at least as long as ``f_ind``) holds the segments' lists of unfrozen flows,
    ``fws``, ``iws`` and ``bws`` (float64, int64 and bool, at least :func:`_work_sizes`) the other
    working arrays: buffers kept between solves (:class:`Workspace`). The rates returned (one per
    row of ``F``, those of ``act`` set) are a view of ``fws``, valid until the next solve.

    ``seq`` (empty, or at least as long as ``act``): filled with the rows of ``act`` in the order
    their rates were set: kept ones (warm start) in ``act`` order, then the frozen ones as they
    froze, then any left unfrozen (the order a next solve of similar rates visits them in:
    :meth:`DirectImage.solve` lays its rows out so)."""
    n = f_ptr.size - 1
    na = act.size
    n_seg = v_ptr.size - 1
    L = cap.size
    fo = 0                                    # next free entries of fws, iws
    io = 0
    rates = fws[fo:fo + n]
    fo += n
    rates[:] = 0.0
    free = bws[:n]
    free[:] = False
    for i in range(na):
        free[act[i]] = True
    # per segment: removed share, removed load, removed flows (of the flows frozen in one step);
    # first used for the warm start's sums, then for the unfrozen flows' share and kept load
    sg = fws[fo:fo + 3 * n_seg].reshape((n_seg, 3))
    fo += 3 * n_seg
    sg[:] = 0.0
    kept = 0
    record = seq.size > 0
    if prev.size == na and na > 0:
        # warm start: the level t_star below which nothing differs from the earlier solve
        for i in range(na):
            k = act[i]
            r = prev[i]
            for e in range(f_ptr[k], f_ptr[k + 1]):
                s = f_ind[e]
                if r >= 0.0:
                    sg[s, 0] += f_dat[e]
                    sg[s, 1] += f_dat[e] * r
                else:
                    sg[s, 2] += f_dat[e]
        lw = fws[fo:fo + 3 * L].reshape((L, 3))
        lw[:] = 0.0
        for s in range(n_seg):
            for e in range(v_ptr[s], v_ptr[s + 1]):
                l = v_ind[e]
                c = v_dat[e]
                lw[l, 0] += c * sg[s, 0]
                lw[l, 1] += c * sg[s, 1]
                lw[l, 2] += c * sg[s, 2]
            sg[s, 0] = 0.0
            sg[s, 1] = 0.0
            sg[s, 2] = 0.0
        t_star = r_gone
        for l in range(L):
            a_new = lw[l, 2]
            if a_new > 0.0:
                tb = cap[l] / (lw[l, 0] + a_new)
                tb2 = (cap[l] - lw[l, 1]) / a_new
                if tb2 > tb:
                    tb = tb2
                if tb < t_star:
                    t_star = tb
        # (rates of one level differ by rounding: a flow within `tie` of t_star may share the
        # level of an ended flow, so it is filled again)
        t_keep = t_star * (1.0 - tie)
        for i in range(na):
            if prev[i] >= 0.0 and prev[i] < t_keep:
                k = act[i]
                rates[k] = prev[i]
                free[k] = False
                if record:
                    seq[kept] = k
                kept += 1
    # segment -> unfrozen flow lists (counting sort), emptied as links saturate
    seg_ptr = iws[io:io + n_seg + 1]
    io += n_seg + 1
    seg_ptr[:] = 0
    for i in range(na):
        k = act[i]
        if free[k]:
            for e in range(f_ptr[k], f_ptr[k + 1]):
                s = f_ind[e]
                seg_ptr[s + 1] += 1
                sg[s, 0] += f_dat[e]
        else:
            for e in range(f_ptr[k], f_ptr[k + 1]):
                sg[f_ind[e], 1] += f_dat[e] * rates[k]
    for s in range(n_seg):
        seg_ptr[s + 1] += seg_ptr[s]
    seg_end = iws[io:io + n_seg]
    io += n_seg
    seg_end[:] = seg_ptr[:-1]
    seg_fl = fl_buf[:seg_ptr[n_seg]]
    for i in range(na):
        k = act[i]
        if free[k]:
            for e in range(f_ptr[k], f_ptr[k + 1]):
                s = f_ind[e]
                seg_fl[seg_end[s]] = k
                seg_end[s] += 1
    # per link, in one row: capacity, load of frozen flows, sum of A[f, l] over unfrozen flows,
    # (unfrozen flow, segment) incidences
    # (lazy: per segment, in ss: unfrozen share, frozen load, unfrozen flows)
    fo += 3 * L                               # (lw, done with)
    lk = fws[fo:fo + 4 * L].reshape((L, 4))
    fo += 4 * L
    lk[:] = 0.0
    n_ss = n_seg if lazy else 0
    ss = fws[fo:fo + 3 * n_ss].reshape((n_ss, 3))
    fo += 3 * n_ss
    ss[:] = 0.0
    for l in range(L):
        lk[l, 0] = cap[l]
    for s in range(n_seg):
        c = seg_end[s] - seg_ptr[s]
        w = sg[s, 0]
        ld = sg[s, 1]
        sg[s, 0] = 0.0
        sg[s, 1] = 0.0
        if lazy:
            ss[s, 0] = w
            ss[s, 1] = ld
            ss[s, 2] = c
            continue
        for e in range(v_ptr[s], v_ptr[s + 1]):
            l = v_ind[e]
            lk[l, 1] += ld * v_dat[e]
            lk[l, 2] += w * v_dat[e]
            lk[l, 3] += c
    # 4-ary heap of the links by a lower bound of their fill level: levels only rise, so a key is
    # refreshed only when its link reaches the top; a link leaves when its last flow freezes
    # (lazy: when it is met without unfrozen flows)
    hk = fws[fo:fo + L]
    fo += L
    hl = iws[io:io + L]
    io += L
    pos = iws[io:io + L]
    io += L
    pos[:] = -1
    size = 0
    for l in range(L):
        t0, c0 = _link_level(l, lazy, lk, vt_ptr, vt_ind, vt_dat, ss)
        if c0 > 0:
            hk[size] = t0
            hl[size] = l
            pos[l] = size
            size += 1
    for i in range((size - 2) // 4, -1, -1):
        _sift_down(hk, hl, pos, i, size)

    if limited:
        fin = np.flatnonzero(np.isfinite(lim))
        lim_order = fin[np.argsort(lim[fin], kind="mergesort")]
    else:
        lim_order = np.empty(0, np.int64)
    tsegs = iws[io:io + n_seg]
    io += n_seg
    gone = iws[io:io + L]                 # (direct) links emptied in a step
    io += L
    bl = iws[io:io + L]                   # a step's links and their levels
    io += L
    bt = fws[fo:fo + L]
    fo += L
    steps, nq = _fill(lim, lim_order, free, rates, f_ptr, f_ind, f_dat, sg, tsegs, gone, bl, bt, hk, hl, pos, size,
                      lk, lazy, direct, v_ptr, v_ind, v_dat, vt_ptr, vt_ind, vt_dat, ss, seg_ptr, seg_end, seg_fl,
                      batch, pops, seq, kept)
    for i in range(na):
        k = act[i]
        if free[k]:
            rates[k] = lim[k] if limited else np.inf
            if record:
                seq[nq] = k
                nq += 1
    return rates, steps, kept


def solve_rows(act, F, Vr, cap_r, lim, maps, prev=None, r_gone=np.inf, full=None):
    """Max-min rates of the flows ``act`` (row numbers of CSR ``F``) over the solver links.

    ``Vr`` (segments x solver links, CSR) is the prepared link side of
    :class:`fabricsim.flows.fluid.FluidProblem`, ``cap_r`` its links' capacities, ``lim`` the
    limits of the flows ``act`` or ``None``; ``maps``: two int64 arrays of ``-1`` (one per
    segment, one per link), one of zeros (per link) and a :class:`Workspace`, kept between solves
    so that a solve costs what its flows use.

    Warm start (``prev``, without limits): each flow's rate in an earlier solve of the same flows
    (same rows of ``F``, same links), ``-1`` for a flow that has started since; ``r_gone`` the
    lowest earlier rate of the flows that have ended since. Progressive filling of the new
    problem is the earlier one's up to the level ``t* = min(r_gone, t_l)`` over the links ``l`` of
    the new flows, ``t_l = max((cap_l - u_l) / a_l, cap_l / (D_l + a_l))`` (``u_l``, ``D_l``: the
    load and the total coefficient of the continuing flows at their earlier rates, ``a_l`` the new
    flows' total coefficient): an ended flow's links saturated at or above its rate, and below
    ``t_l`` link ``l`` cannot saturate with the new flows on it (its use at level ``t`` is at most
    ``min(u_l, t D_l) + t a_l``). So every continuing flow whose earlier rate is below ``t*``
    keeps it, and the filling resumes from there.

    ``full``: a function returning ``Vr`` and its transpose as int64 / float64 CSR arrays
    ``(v_ptr, v_ind, v_dat, vt_ptr, vt_ind, vt_dat, keep)`` over the solver links ``keep`` (kept by
    the caller, :meth:`FluidProblem._full_v`): with wide segments
    (more than ``_LAZY`` links each) whose rows are at least ``_WHOLE`` of ``Vr``'s entries, the
    solve uses them as they are instead of renumbering them (parallel links merged once over the whole ``V``).

    Returns ``(rates of act, steps, kept)``: a step saturates the links of one level (within
    ``_BATCH``) or brings one flow to its limit; ``kept`` flows took their earlier rate.
    """
    limited = lim is not None
    lim_a = np.ascontiguousarray(lim, np.float64) if limited else np.empty(0)
    seg_map, link_map, uses, work = maps
    cap = np.ascontiguousarray(cap_r, np.float64)
    act = np.ascontiguousarray(act, np.int64)
    most_e = int((F.indptr[act + 1] - F.indptr[act]).sum())       # the active rows' entries
    f_ptr, f_ind, f_dat, used_segs, vnnz = _localise_rows(
        act, F.indptr, F.indices, F.data, Vr.indptr, seg_map,
        work.take("f_ind", most_e, np.int64), work.take("f_dat", most_e, np.float64))
    wide = _lazy(vnnz, used_segs.size)
    if wide and not _lazy(vnnz - cap.size, used_segs.size):
        # wide only before parallel links are merged (a GPU's 18 NVLink ports in one segment)?
        # then renumber and merge (direct, if it comes to that), not the whole V. (Only links
        # private to one segment merge, at most one entry per link: with more than all the links
        # fewer entries still wide, merging cannot change the answer.)
        longest = int(np.diff(Vr.indptr)[used_segs].max()) if used_segs.size else 0
        merged = _merged_entries(used_segs, Vr.indptr, Vr.indices, Vr.data, cap, uses,
                                 work.take("m_ind", longest, np.int64), work.take("m_dat", longest, np.float64),
                                 work.iota(cap.size), int(_LAZY * used_segs.size))
        wide = _lazy(merged, used_segs.size)
    direct = False
    if wide and full is not None and vnnz >= _WHOLE * Vr.nnz:
        # wide segments using most of V: V as it is (lazy sums read a link's segments, unused
        # ones holding nothing), not renumbered again
        v_ptr, v_ind, v_dat, vt_ptr, vt_ind, vt_dat, keep = full()
        g_ind = work.take("a_ind", f_ind.size, np.int64)[:f_ind.size]
        np.take(used_segs, f_ind, out=g_ind)
        f_ind = g_ind
        cap = cap[keep]
        lazy = True
    else:
        v_ptr, v_ind, v_dat, vt_ptr, vt_ind, vt_dat, used = _localise_links(
            used_segs, Vr.indptr, Vr.indices, Vr.data, cap, uses, link_map)
        cap = cap[used]
        lazy = _lazy(v_ptr[-1], v_ptr.size - 1)
        if not lazy and _DIRECT > 0:
            most = int(min(_DIRECT * f_ind.size, 2 ** 62)) if f_ind.size else 0
            size = min(most, f_ind.size)
            for _ in range(2):                # (again with longer buffers if the rows need them)
                ok, a_ptr, a_ind, a_dat, size = _direct_rows(
                    f_ptr, f_ind, f_dat, v_ptr, v_ind, v_dat, cap.size, most,
                    work.take("a_ind", size, np.int64), work.take("a_dat", size, np.float64))
                if ok or size > most:
                    break
            if ok:
                # the flows' rows over the links, V the identity
                f_ptr, f_ind, f_dat, direct = a_ptr, a_ind, a_dat, True
                v_ptr = vt_ptr = np.arange(cap.size + 1, dtype=np.int64)
                v_ind = vt_ind = np.arange(cap.size, dtype=np.int64)
                v_dat = vt_dat = np.ones(cap.size)
    if prev is None or limited:
        prev = np.empty(0)
    nf, ni, nb = _work_sizes(f_ptr.size - 1, v_ptr.size - 1, cap.size)
    rates, steps, kept = _kernel(
        f_ptr, f_ind, f_dat, work.iota(f_ptr.size - 1), v_ptr, v_ind, v_dat, vt_ptr, vt_ind, vt_dat, cap, lim_a,
        limited, np.ascontiguousarray(prev, np.float64), float(r_gone), _TIE, _BATCH, _POPS, bool(lazy), direct,
        work.take("seg_fl", f_ind.size, np.int64), work.take("fws", nf, np.float64),
        work.take("iws", ni, np.int64), work.take("bws", nb, np.bool_), _NO_SEQ)
    return rates, steps, kept, direct


# ---------------------------------------------------------------------------- direct image
class DirectImage:
    """Every row of ``F`` as the direct mode of :func:`_kernel` sees it (each flow's coefficient
    on each link, parallel links merged), kept between solves and extended as rows are appended,
    so that a direct solve costs the filling, not a renumbering of its flows (at 8,192 GPUs that
    renumbering was a third of an ECMP solve).

    It differs from :func:`solve_rows`'s per-solve view in two ways that change no rate beyond
    rounding: links are numbered in order of first use over all rows covered (finished flows'
    rows too), not over the active ones, and parallel links (:func:`_localise_links`'s rule) are
    merged when private to one segment among all those rows' segments. A row appended later
    whose new segment crosses a link merged that way (no longer private) makes the image be
    built again from its first row. Built by :class:`fabricsim.flows.fluid.FluidProblem` for a
    problem whose solves go direct, and handed on by ``with_flows(..., extends=True)``."""

    def __init__(self, n_seg: int, n_links: int):
        self.n_seg, self.n_links = n_seg, n_links
        self.rebuilds = 0
        self._reset()

    def _reset(self):
        self.seg_loc = np.full(self.n_seg, -1, np.int64)      # segment -> its local row (-1 none)
        self.link_loc = np.full(self.n_links, -1, np.int64)   # link -> local link (-2 merged away)
        self.uses = np.zeros(self.n_links, np.int64)          # segments covered crossing a link
        self.twinned = np.zeros(self.n_links, np.bool_)       # a link standing for merged ones
        self.sv_ptr = np.zeros(17, np.int64)                  # local segments' rows (local links)
        self.sv_ind = np.zeros(16, np.int64)
        self.sv_dat = np.zeros(16)
        self.cap = np.zeros(16)                               # per local link
        self.glink = np.zeros(16, np.int64)
        self.mark = np.full(16, -1, np.int64)
        self.a_ptr = np.zeros(17, np.int64)                   # the rows over the local links
        self.a_ind = np.zeros(16, np.int64)
        self.a_dat = np.zeros(16)
        self.pend = np.zeros(16, np.int64)
        self.ns = self.snnz = self.nl = self.rows = self.annz = self.f_nnz = 0
        # the rows' layout: the image's rows (a_ptr, a_ind, a_dat) are slots, slot_row[k] the row
        # of F in slot k and row_slot its inverse; identity (None) until the first layout
        self.slot_row = self.row_slot = None
        self._spare = None                                    # the other layout's arrays
        self.layouts = 0
        self.lists = None                                     # LinkLists of the last warm solve
        self.last_far = 0                                      # the last solve's far jumps (_far_jumps)

    @staticmethod
    def _room(a: np.ndarray, need: int, fill=0) -> np.ndarray:
        if a.size >= need:
            return a
        b = np.full(max(need, a.size + a.size // 2), fill, a.dtype)
        b[:a.size] = a
        return b

    def cover(self, F, Vr, cap_r) -> bool:
        """Extend the image to every row of ``F`` (CSR, its first rows those covered so far) over
        the solver links ``Vr`` (segments x links) of capacities ``cap_r``. False if the rows are
        not for the direct mode (more links per used segment than ``_LAZY``, or more entries
        than ``_DIRECT`` x ``F``'s): the image is then of no use."""
        R = F.shape[0]
        if R > self.rows:
            if not self._extend(F, Vr, cap_r):
                self.rebuilds += 1
                self._reset()
                if not self._extend(F, Vr, cap_r):
                    raise AssertionError("a direct image built from scratch cannot break a merge")
        return not _lazy(self.snnz, self.ns) and self.annz <= _DIRECT * self.f_nnz

    def _extend(self, F, Vr, cap_r) -> bool:
        R = F.shape[0]
        e0, e1 = int(F.indptr[self.rows]), int(F.indptr[R])
        seg_len = np.diff(Vr.indptr)
        bound = int(seg_len[F.indices[e0:e1]].sum())          # V entries the new rows reach
        self.pend = self._room(self.pend, e1 - e0)
        ok, npend, vnew = _image_scan(F.indptr, F.indices, self.rows, R, Vr.indptr, Vr.indices,
                                      self.seg_loc, self.link_loc, self.uses, self.twinned, self.pend)
        if not ok:
            return False
        new_links = min(vnew, self.n_links - self.nl)
        self.sv_ptr = self._room(self.sv_ptr, self.ns + npend + 1)
        self.sv_ind = self._room(self.sv_ind, self.snnz + vnew)
        self.sv_dat = self._room(self.sv_dat, self.snnz + vnew)
        self.cap = self._room(self.cap, self.nl + new_links)
        self.glink = self._room(self.glink, self.nl + new_links)
        self.mark = self._room(self.mark, self.nl + new_links, -1)
        self.a_ptr = self._room(self.a_ptr, R + 1)
        self.a_ind = self._room(self.a_ind, self.annz + bound)
        self.a_dat = self._room(self.a_dat, self.annz + bound)
        ns, snnz, nl, annz = _image_place(
            F.indptr, F.indices, F.data, self.rows, R, Vr.indptr, Vr.indices, Vr.data,
            np.ascontiguousarray(cap_r, np.float64), self.seg_loc, self.link_loc, self.uses, self.twinned,
            self.sv_ptr, self.sv_ind, self.sv_dat, self.ns, self.snnz, self.cap, self.glink, self.mark,
            self.nl, self.a_ptr, self.a_ind, self.a_dat, self.annz)
        if self.slot_row is not None:
            # appended rows take the slots after the last (slot = row)
            new = np.arange(self.rows, R, dtype=np.int64)
            self.slot_row = self._room(self.slot_row, R)
            self.row_slot = self._room(self.row_slot, R)
            self.slot_row[self.rows:R] = new
            self.row_slot[self.rows:R] = new
        self.ns, self.snnz, self.nl, self.annz, self.rows = ns, snnz, nl, annz, R
        self.f_nnz = e1
        return True

    def solve(self, act, n_rows: int, prev, r_gone: float, work: "Workspace"):
        """Max-min rates of the rows ``act`` (ascending, all below ``n_rows`` <= the rows
        covered) as :func:`solve_rows`: ``(rates of act, steps, kept)``.

        The image's rows are then laid out again in the order this solve set their rates
        (``_LAYOUT``; the rows it did not solve after them, in their order): a solve visits the
        flows in the order of their levels, the next solve's levels are close to this one's, so
        its walk over the rows' entries goes on in memory order instead of jumping across all
        of them (a captured 8,192-GPU ECMP solve of 455k flows: 197 -> 106 ms, same rates).
        The kernel meets the active rows in slot order: within a level, flows freeze (and their
        links' sums add up) in another order than by row number, so rates may differ in the last
        bits from a solve in row order."""
        nl = self.nl
        rows = self.rows
        act = np.ascontiguousarray(act, np.int64)
        if n_rows > rows:
            raise ValueError(f"the image covers {rows} rows, not {n_rows}")
        f_ptr = self.a_ptr[:rows + 1]
        end = int(f_ptr[rows])
        # (the renumbering's buffers are not needed; the flow lists hold the active rows' entries)
        work.release("f_ind", "f_dat", "a_ind", "a_dat")
        if prev is None:
            prev = np.empty(0)
        prev = np.ascontiguousarray(prev, np.float64)
        permuted = self.slot_row is not None
        if permuted:
            # the active rows' slots, ascending, and their earlier rates in that order
            on = work.take("on", rows, np.bool_)[:rows]
            on[:] = False
            ps = work.take("prev_s", rows, np.float64)[:rows]
            sl_b = work.take("sl", act.size, np.int64)
            pv_b = work.take("prev_sl", act.size if prev.size else 0, np.float64)
            m, n_act = _to_slots(act, prev, self.row_slot, on, ps, sl_b, pv_b, f_ptr)
            sl = sl_b[:m]
            if prev.size:
                prev = pv_b[:m]
        else:
            sl = act
            n_act = _entries(f_ptr, sl)
        ident_ptr = work.iota(nl + 1)
        ident = ident_ptr[:nl]
        ones = work.ones(nl)
        nf, ni, nb = _work_sizes(rows, nl, nl)
        seq = work.take("seq", sl.size, np.int64)[:sl.size] if _LAYOUT else _NO_SEQ
        if _INCREMENTAL and sl.size and prev.size == sl.size and n_act > _LONG * sl.size:
            rates, steps, kept = self._solve_kept(sl, prev, float(r_gone), n_act, work, seq)
        else:
            self.lists = None            # (a cold solve: the lists are built again by the next warm one)
            rates, steps, kept = _kernel(
                f_ptr, self.a_ind[:end], self.a_dat[:end], sl, ident_ptr, ident,
                ones, ident_ptr, ident, ones, self.cap[:nl], np.empty(0), False,
                prev, float(r_gone), _TIE, _BATCH, _POPS, False, True,
                work.take("seg_fl", n_act, np.int64), work.take("fws", nf, np.float64),
                work.take("iws", ni, np.int64), work.take("bws", nb, np.bool_), seq)
        out = _from_slots(rates, act, self.row_slot) if permuted else rates[act]
        if _LAYOUT and sl.size:
            self.last_far = _far_jumps(seq, sl.size)
            if self.last_far > _FAR * sl.size:
                self._layout(seq, sl.size, work)
        return out, steps, kept

    def _solve_kept(self, sl, prev, r_gone: float, n_act: int, work: "Workspace", seq):
        """:meth:`solve`'s warm solve of the slots ``sl`` (``prev`` their earlier rates, ``n_act``
        their entries) from the :class:`LinkLists` of the last solve, brought up to date
        (:func:`_inc_update`), or built for these rows (:func:`_inc_build`) when there are none
        for this layout and these links, they do not fit, half their entries are dead, or
        ``prev`` is not what they expect. Returns :func:`_inc_kernel`'s ``(rates, steps, kept)``."""
        nl, rows = self.nl, self.rows
        f_ptr = self.a_ptr[:rows + 1]
        end = int(f_ptr[rows])
        a_ind, a_dat = self.a_ind[:end], self.a_dat[:end]
        k = self.lists
        ok = k is not None and k.layouts == self.layouts
        if ok and k.nl < nl:
            k.grow(nl)
        if ok:
            if k.last_on.size < rows:
                k.last_on = self._room(k.last_on, rows, False)
                k.last_rate = self._room(k.last_rate, rows, 0.0)
            # room at the tail for the new rows' entries (the rows added since; their lists may
            # move there): else the lists are packed again without the rows that ended
            new = int(f_ptr[rows] - f_ptr[min(k.rows, rows)])
            used = int(k.ll_len[:nl].sum())
            if k.ll_slot.size - k.tail < 2 * new + 4 * (nl - k.nl_packed) + 1024 or used > 2 * (n_act + 1024):
                k.repack(used, nl, 2 * new + int(_TAIL * n_act))
            on = work.take("on", rows, np.bool_)[:rows]
            on[:] = False
            why, tail, live = _inc_update(sl, prev, f_ptr, a_ind, a_dat, nl, k.ll_start, k.ll_len, k.ll_room,
                                         k.ll_slot, k.tail, k.D, k.U, k.C, k.Dn, k.Cn, k.last_rate,
                                         k.last_on, k.last_sl, on)
            k.tail = tail
            ok = why == 0
        if not ok:
            k = self._build_lists(sl, prev, n_act, f_ptr, a_ind, a_dat, k)
        nf, ni = _inc_sizes(nl)
        rates, steps, kept = _inc_kernel(
            f_ptr, a_ind, a_dat, sl, self.cap[:nl], prev, r_gone, _TIE, _BATCH, _POPS, k.ll_start, k.ll_len,
            k.ll_slot, k.D, k.U, k.C, k.Dn, k.Cn, k.last_rate, k.last_on, k.last_sl,
            work.take("seg_fl", n_act, np.int64), work.take("fws", rows + nf, np.float64), work.take("iws", ni, np.int64),
            work.take("bws", rows, np.bool_), seq, _FEW)
        if k.sl_buf.size < sl.size:
            k.sl_buf = np.empty(max(sl.size, int(1.25 * k.sl_buf.size)), np.int64)
        k.sl_buf[:sl.size] = sl
        k.last_sl = k.sl_buf[:sl.size]
        k.rows = rows
        return rates, steps, kept

    def _build_lists(self, sl, prev, n_act, f_ptr, a_ind, a_dat, old):
        """:class:`LinkLists` of the slots ``sl`` (:func:`_inc_build`), in the arrays of ``old``
        where they are long enough."""
        nl, rows = self.nl, self.rows
        k = old if old is not None else LinkLists()
        room = _inc_room(n_act, nl, int(_TAIL * n_act))

        def arr(name, size, dtype, fill=None):
            a = getattr(k, name, None) if old is not None else None
            if a is None or a.size < size or a.dtype != dtype:
                a = np.empty(max(size, int(1.25 * a.size) if a is not None else 0), dtype)
            if fill is not None:
                a[:size] = fill
            return a

        k.ll_slot = arr("ll_slot", room, np.int64)
        k.links(nl)
        k.last_rate = np.zeros(rows)
        k.last_on = np.zeros(rows, np.bool_)
        k.last_sl = np.zeros(0, np.int64)
        k.tail = _inc_build(sl, prev, f_ptr, a_ind, a_dat, nl, k.ll_start, k.ll_len, k.ll_room, k.ll_slot,
                            k.D, k.U, k.C, k.Dn, k.Cn)
        k.nl = k.nl_packed = nl
        k.layouts = self.layouts
        k.builds += 1
        self.lists = k
        return k

    def _layout(self, seq, n_seq: int, work: "Workspace"):
        """Lay the rows out again: the slots ``seq`` first, in that order, then the others in
        theirs (:meth:`solve`)."""
        rows, end = self.rows, int(self.a_ptr[self.rows])
        if self.slot_row is None:
            self.slot_row = np.arange(rows, dtype=np.int64)
            self.row_slot = np.arange(rows, dtype=np.int64)
        sp = self._spare
        if sp is None or sp[0].size < rows + 1 or sp[1].size < end or sp[2].size < end \
                or sp[3].size < rows:
            sp = (np.empty(max(rows + 1, self.a_ptr.size), np.int64), np.empty(max(end, self.a_ind.size), np.int64),
                  np.empty(max(end, self.a_dat.size)), np.empty(max(rows, self.slot_row.size), np.int64))
        seen = work.take("seen", rows, np.bool_)[:rows]
        _image_layout(seq, n_seq, rows, self.a_ptr, self.a_ind, self.a_dat, self.slot_row,
                      sp[0], sp[1], sp[2], sp[3], seen)
        self._spare = (self.a_ptr, self.a_ind, self.a_dat, self.slot_row)
        self.a_ptr, self.a_ind, self.a_dat, self.slot_row = sp
        self.row_slot = self._room(self.row_slot, rows)
        self.row_slot[self.slot_row[:rows]] = np.arange(rows, dtype=np.int64)
        self.layouts += 1
        k = self.lists
        if k is not None and k.layouts == self.layouts - 1 and k.nl == self.nl and k.last_sl.size == n_seq:
            self._relist(k, seq[:n_seq], work)

    def _relist(self, k: "LinkLists", seq, work: "Workspace"):
        """The :class:`LinkLists` of the last solve renumbered to the slots of a layout that put
        its active rows (``seq``, the old slots in their new order) first: the lists are written
        again from those rows, in their new order (ascending new slots), each as long as its
        link's count; the sums stay. If the counts do not match the rows, the lists are dropped
        (built by the next solve)."""
        nl, n_seq = self.nl, seq.size
        need = _inc_room(int(k.C.sum()), nl, int(_TAIL * int(self.a_ptr[n_seq])))
        if k.ll_slot.size < need:
            k.ll_slot = np.empty(need, np.int64)
        tail = _inc_relist(n_seq, self.a_ptr, self.a_ind, nl, k.ll_start, k.ll_len, k.ll_room,
                           k.ll_slot, k.C)
        if tail < 0:
            self.lists = None
            return
        rows = self.rows
        lr = np.zeros(max(rows, k.last_rate.size))
        lr[:n_seq] = k.last_rate[seq]
        on = np.zeros(max(rows, k.last_on.size), np.bool_)
        on[:n_seq] = True
        k.last_rate, k.last_on, k.tail = lr, on, tail
        k.sl_buf[:n_seq] = np.arange(n_seq, dtype=np.int64)
        k.last_sl = k.sl_buf[:n_seq]
        k.nl_packed = nl
        k.layouts = self.layouts
        k.relists += 1


@njit(cache=True, nogil=True)
def _to_slots(act, prev, row_slot, on, ps, sl, prev_sl, f_ptr):
    """The slots of the rows ``act`` in ascending order into ``sl``, and (if ``prev`` is not
    empty: one per row of ``act``) their earlier rates in that order into ``prev_sl``; ``on`` and
    ``ps`` (one per slot) are working space, ``on`` all False on entry and left so. Returns (the
    number of slots, their rows' entries in ``f_ptr``). (:meth:`DirectImage.solve`.)"""
    warm = prev.size > 0
    lo = on.size
    hi = -1
    for i in range(act.size):
        x = row_slot[act[i]]
        on[x] = True
        if warm:
            ps[x] = prev[i]
        if x < lo:
            lo = x
        if x > hi:
            hi = x
    m = 0
    n_act = 0
    for x in range(lo, hi + 1):
        if on[x]:
            on[x] = False
            sl[m] = x
            if warm:
                prev_sl[m] = ps[x]
            n_act += f_ptr[x + 1] - f_ptr[x]
            m += 1
    return m, n_act


@njit(cache=True, nogil=True)
def _entries(f_ptr, rows):
    """Entries of the CSR rows ``rows``."""
    n = 0
    for i in range(rows.size):
        n += f_ptr[rows[i] + 1] - f_ptr[rows[i]]
    return n


@njit(cache=True, nogil=True)
def _from_slots(rates, act, row_slot):
    """The rates of the rows ``act`` from ``rates`` by slot."""
    out = np.empty(act.size)
    for i in range(act.size):
        out[i] = rates[row_slot[act[i]]]
    return out


@njit(cache=True, nogil=True)
def _far_jumps(seq, n):
    """Steps of the walk ``seq[:n]`` (slots) that go back, or forward by more than 8 slots:
    visits that leave the memory just read (:meth:`DirectImage.solve`)."""
    far = 0
    for i in range(1, n):
        d = seq[i] - seq[i - 1]
        if d <= 0 or d > 8:
            far += 1
    return far


@njit(cache=True, nogil=True, _nrt=False)
def _copy_slot(s, k, j, a_ptr, a_ind, a_dat, slot_row, b_ptr, b_ind, b_dat, b_slot_row):
    """Slot ``s``'s row copied to slot ``k`` of the ``b_`` arrays, its entries from ``j``;
    returns the next free entry."""
    for e in range(a_ptr[s], a_ptr[s + 1]):
        b_ind[j] = a_ind[e]
        b_dat[j] = a_dat[e]
        j += 1
    b_slot_row[k] = slot_row[s]
    b_ptr[k + 1] = j
    return j


@njit(cache=True, nogil=True)
def _image_layout(seq, n_seq, rows, a_ptr, a_ind, a_dat, slot_row, b_ptr, b_ind, b_dat, b_slot_row, seen):
    """The rows of slots ``seq[:n_seq]`` copied first, in that order, then the other slots' rows
    in theirs, from (``a_ptr``, ``a_ind``, ``a_dat``, ``slot_row``) into the ``b_`` arrays
    (:meth:`DirectImage._layout`); ``seen`` (``rows`` booleans) is working space."""
    seen[:] = False
    j = 0
    k = 0
    b_ptr[0] = 0
    for i in range(n_seq):
        s = seq[i]
        seen[s] = True
        j = _copy_slot(s, k, j, a_ptr, a_ind, a_dat, slot_row, b_ptr, b_ind, b_dat, b_slot_row)
        k += 1
    for s in range(rows):
        if not seen[s]:
            j = _copy_slot(s, k, j, a_ptr, a_ind, a_dat, slot_row, b_ptr, b_ind, b_dat, b_slot_row)
            k += 1


@njit(cache=True, nogil=True)
def _image_scan(f_ptr, f_ind, r0, r1, v_ptr, v_ind, seg_loc, link_loc, uses, twinned, pend):
    """First half of :meth:`DirectImage._extend` of rows ``r0 .. r1 - 1``: their new segments
    (marked ``-3`` in ``seg_loc``, listed in ``pend``) and their links counted in ``uses``.
    Returns ``(ok, new segments, their entries of V)``; not ``ok`` if a link merged while private
    is now crossed by a new segment too (the image must be built again)."""
    npend = 0
    vnew = 0
    broken = False
    for e in range(f_ptr[r0], f_ptr[r1]):
        s = f_ind[e]
        if seg_loc[s] == -1:
            seg_loc[s] = -3                   # new, placed in the second pass
            pend[npend] = s
            npend += 1
            vnew += v_ptr[s + 1] - v_ptr[s]
            for q in range(v_ptr[s], v_ptr[s + 1]):
                l = v_ind[q]
                uses[l] += 1
                if uses[l] == 2 and (link_loc[l] == -2 or twinned[l]):
                    broken = True
    return not broken, npend, vnew


@njit(cache=True, nogil=True)
def _image_place(f_ptr, f_ind, f_dat, r0, r1, v_ptr, v_ind, v_dat, cap, seg_loc, link_loc, uses, twinned,
                 sv_ptr, sv_ind, sv_dat, ns, snnz, lcap, glink, mark, nl, a_ptr, a_ind, a_dat, annz):
    """Second half of :meth:`DirectImage._extend` (after :func:`_image_scan`): row by row, each
    new segment placed at its first use (its private links merged as :func:`_localise_links`
    does) and the row's entries over the local links summed (as :func:`_direct_rows`). Returns
    ``(ns, snnz, nl, annz)``."""
    for r in range(r0, r1):
        row = annz
        for e in range(f_ptr[r], f_ptr[r + 1]):
            s = f_ind[e]
            w = f_dat[e]
            ls = seg_loc[s]
            if ls == -3:
                ls = ns
                seg_loc[s] = ls
                start = snnz
                for q in range(v_ptr[s], v_ptr[s + 1]):
                    l = v_ind[q]
                    c = v_dat[q]
                    if uses[l] == 1:
                        t = _twin(start, snnz, sv_ind, sv_dat, glink, uses, cap, l, c)
                        if t >= 0:
                            twinned[glink[sv_ind[t]]] = True
                            link_loc[l] = -2
                            continue
                    m = link_loc[l]
                    if m < 0:
                        m = nl
                        link_loc[l] = m
                        glink[m] = l
                        lcap[m] = cap[l]
                        mark[m] = -1
                        nl += 1
                    sv_ind[snnz] = m
                    sv_dat[snnz] = c
                    snnz += 1
                ns += 1
                sv_ptr[ns] = snnz
            annz = _row_add(w, sv_ptr[ls], sv_ptr[ls + 1], sv_ind, sv_dat, mark, row, a_ind, a_dat, annz)
        a_ptr[r + 1] = annz
    return ns, snnz, nl, annz


# ---------------------------------------------------------------------------- kept link lists
class LinkLists:
    """What a direct solve of a :class:`DirectImage` builds from all its active rows, kept to the
    next solve and brought up to date by the rows that started or ended since, instead of being
    built again (:meth:`DirectImage.solve`, ``_INCREMENTAL``):

    * per link, the list of the image slots whose rows cross it, ascending (the flows
      :func:`_fill` walks when the link saturates), with room to append: a list that runs out
      of room moves to the free tail of the array. Rows that ended stay in their lists until
      the lists are packed or built again (the walk skips them as it skips frozen
      flows), so a list meets its live flows in the same order as one built afresh;
    * per link, the sums over the active rows of the last solve: coefficient ``D``, load at their
      rates ``U``, count ``C`` (the warm start's sums, :func:`solve_rows`, and the filling's initial
      sums follow from them and from the rows that changed, :func:`_inc_kernel`);
    * per slot, the last solve's rate and whether it was active, and that solve's active slots.

    Valid for one layout of the image (a layout renumbers the slots) and one number of links; it
    is built again then, when the dead entries reach half of the lists, and when the rows handed
    to a solve are not what these records expect (``prev`` not the last solve's rates)."""

    __slots__ = ("ll_start", "ll_len", "ll_room", "ll_slot", "tail", "D", "U", "C", "Dn", "Cn", "S", "I",
                 "last_rate", "last_on", "last_sl", "sl_buf", "nl", "nl_packed", "layouts", "builds", "repacks",
                 "rows", "relists")

    def __init__(self):
        self.nl = -1
        self.layouts = -1
        self.builds = self.repacks = self.relists = self.rows = self.nl_packed = 0
        self.sl_buf = np.zeros(0, np.int64)
        self.S = self.I = None

    def links(self, nl: int, keep: int = 0):
        """The per-link records for ``nl`` links (the first ``keep`` of them kept, the others
        zero): ``ll_start``, ``ll_len``, ``ll_room`` and ``D``, ``U``, ``C``, ``Dn``, ``Cn`` are
        columns of two arrays of one row per link, so that a link's records share a cache line."""
        S, I = getattr(self, "S", None), getattr(self, "I", None)
        if S is None or S.shape[0] < nl:
            S2, I2 = np.zeros((max(nl, int(1.25 * (S.shape[0] if S is not None else 0))), 8)), None
            I2 = np.zeros((S2.shape[0], 4), np.int64)
            if keep:
                S2[:keep], I2[:keep] = S[:keep], I[:keep]
            S, I = self.S, self.I = S2, I2
        S[keep:nl] = 0.0
        I[keep:nl] = 0
        self.D, self.U, self.C, self.Dn, self.Cn = (S[:nl, j] for j in range(5))
        self.ll_start, self.ll_len, self.ll_room = (I[:nl, j] for j in range(3))

    def grow(self, nl: int):
        """Links ``self.nl .. nl - 1`` added (the image covered new links): empty lists without
        room (their first entry moves them to the tail) and zero sums."""
        self.links(nl, self.nl)
        self.ll_start[self.nl:nl] = self.tail
        self.nl = nl

    def repack(self, used: int, nl: int, extra: int):
        """The lists (``used`` entries) packed again (:func:`_inc_repack`) without the slots the
        last solve did not have active, into arrays with ``extra`` entries free at the tail."""
        size = _inc_room(used, nl, extra)
        to_slot = np.empty(size, np.int64)
        self.tail = _inc_repack(nl, self.ll_start, self.ll_len, self.ll_room, self.ll_slot,
                                self.last_on, to_slot)
        self.ll_slot = to_slot
        self.nl_packed = nl
        self.repacks += 1


@njit(cache=True, nogil=True)
def _inc_build(sl, prev, f_ptr, a_ind, a_dat, nl, ll_start, ll_len, ll_room, ll_slot,
               Dc, Uc, Cc, Dn, Cn):
    """:class:`LinkLists` built from the active slots ``sl`` (ascending; ``prev[i]``: slot
    ``sl[i]``'s earlier rate, ``-1`` if new): each link's list of slots with room (a quarter
    again, and 4), and the sums the warm start needs, over the continuing rows (``Dc``, ``Uc``,
    ``Cc``: coefficient, load at the earlier rates, count) and the new ones (``Dn``, ``Cn``), each
    summed in slot order (as :func:`_kernel` sums them). ``ll_slot`` must hold
    :func:`_inc_room` entries (``extra`` 0 will do). Returns the first free entry (the tail)."""
    na = sl.size
    ll_len[:nl] = 0
    for i in range(na):
        f = sl[i]
        for e in range(f_ptr[f], f_ptr[f + 1]):
            ll_len[a_ind[e]] += 1
    at = 0
    for l in range(nl):
        ll_start[l] = at
        ll_room[l] = ll_len[l] + ll_len[l] // 4 + 4
        at += ll_room[l]
        ll_len[l] = 0
        Dc[l] = 0.0
        Uc[l] = 0.0
        Cc[l] = 0.0
        Dn[l] = 0.0
        Cn[l] = 0.0
    for i in range(na):
        f = sl[i]
        r = prev[i]
        for e in range(f_ptr[f], f_ptr[f + 1]):
            l = a_ind[e]
            a = a_dat[e]
            if r >= 0.0:
                Dc[l] += a
                Uc[l] += a * r
                Cc[l] += 1.0
            else:
                Dn[l] += a
                Cn[l] += 1.0
            p = ll_start[l] + ll_len[l]
            ll_slot[p] = f
            ll_len[l] += 1
    return at


@njit(cache=True, nogil=True)
def _inc_repack(nl, ll_start, ll_len, ll_room, ll_slot, keep, to_slot):
    """The lists of :class:`LinkLists` copied into ``to_slot`` one after the other with
    room again (a quarter, and 4), keeping only the slots ``keep`` (the last solve's active ones:
    the others have ended); returns the first free entry."""
    at = 0
    for l in range(nl):
        s0 = ll_start[l]
        n = 0
        for q in range(s0, s0 + ll_len[l]):
            f = ll_slot[q]
            if keep[f]:
                to_slot[at + n] = f
                n += 1
        ll_start[l] = at
        ll_len[l] = n
        ll_room[l] = n + n // 4 + 4
        at += ll_room[l]
    return at


@njit(cache=True, nogil=True)
def _inc_relist(n_seq, a_ptr, a_ind, nl, ll_start, ll_len, ll_room, ll_slot, C):
    """The lists of :class:`LinkLists` written from the rows of slots ``0 .. n_seq - 1`` (a
    layout's active rows, :meth:`DirectImage._relist`), each list with room for its link's
    count ``C`` (a quarter again, and 4); returns the first free entry, or -1 if a link has more
    of these rows than its count."""
    at = 0
    for l in range(nl):
        c = int(C[l])
        ll_start[l] = at
        ll_len[l] = 0
        ll_room[l] = c + c // 4 + 4
        at += ll_room[l]
    for i in range(n_seq):
        for e in range(a_ptr[i], a_ptr[i + 1]):
            l = a_ind[e]
            n = ll_len[l]
            if n == ll_room[l]:
                return -1
            ll_slot[ll_start[l] + n] = i
            ll_len[l] = n + 1
    return at


def _inc_room(entries: int, nl: int, extra: int) -> int:
    """Entries the lists of :func:`_inc_build` (or :func:`_inc_repack`) take at most for
    ``entries`` entries over ``nl`` links, each list with its room, and ``extra`` at the tail (for
    lists that move there)."""
    return entries + entries // 4 + 4 * nl + extra + 1024


@njit(cache=True, nogil=True)
def _inc_update(sl, prev, f_ptr, a_ind, a_dat, nl, ll_start, ll_len, ll_room, ll_slot, tail,
                D, U, C, Dn, Cn, last_rate, last_on, last_sl, on):
    """:class:`LinkLists` of the last solve brought to the active slots ``sl`` (ascending,
    ``prev`` as :func:`_inc_build`): the rows that ended since (active then, not now) leave the
    sums ``D``, ``U``, ``C`` (which then hold the continuing rows'), the rows new since (all of them
    slots above every slot listed) are summed into ``Dn``, ``Cn`` and appended to their links'
    lists. ``on`` (one bool per slot, all False) is working space, left so. Returns
    ``(why, tail, live entries)``: ``why`` is 0, or (the records are then half updated, and must be
    built again) 1 if a continuing row's ``prev`` is not its last rate, 2 if a new one has an
    earlier rate, 3 if a new slot is not above its links' last, 4 if the tail is full."""
    na = sl.size
    for i in range(na):
        on[sl[i]] = True
    why = 0
    for j in range(last_sl.size):
        f = last_sl[j]
        if not on[f]:
            r = last_rate[f]
            for e in range(f_ptr[f], f_ptr[f + 1]):
                l = a_ind[e]
                a = a_dat[e]
                D[l] -= a
                U[l] -= a * r
                C[l] -= 1.0
    for l in range(nl):
        Dn[l] = 0.0
        Cn[l] = 0.0
    live = 0
    for i in range(na):
        f = sl[i]
        live += f_ptr[f + 1] - f_ptr[f]
        if last_on[f]:
            r = last_rate[f]
            if (prev[i] != r) if r < np.inf else (prev[i] >= 0.0):
                why = 1
                break
            continue
        if prev[i] >= 0.0:
            why = 2
            break
        for e in range(f_ptr[f], f_ptr[f + 1]):
            l = a_ind[e]
            a = a_dat[e]
            Dn[l] += a
            Cn[l] += 1.0
            n = ll_len[l]
            p = ll_start[l] + n
            if n > 0 and ll_slot[p - 1] >= f:
                why = 3
                break
            if n == ll_room[l]:
                # out of room: the list moves to the tail, with room for as many again
                room = 2 * n + 4
                if tail + room > ll_slot.size:
                    why = 4
                    break
                for q in range(n):
                    ll_slot[tail + q] = ll_slot[ll_start[l] + q]
                ll_start[l] = tail
                ll_room[l] = room
                tail += room
                p = ll_start[l] + n
            ll_slot[p] = f
            ll_len[l] = n + 1
        if why:
            break
    for i in range(na):
        on[sl[i]] = False
    return why, tail, live


@njit(cache=True, nogil=True)
def _inc_kernel(f_ptr, f_ind, f_dat, sl, cap, prev, r_gone, tie, batch, pops, ll_start, ll_len, ll_slot,
                D, U, C, Dn, Cn, last_rate, last_on, last_sl, fl_buf, fws, iws, bws, seq, few):
    """:func:`_kernel`'s direct, warm, unlimited solve of the image slots ``sl`` (rows ``f_ptr``,
    ``f_ind``, ``f_dat`` over the links) from kept :class:`LinkLists` (updated for this solve by
    :func:`_inc_update` or built by :func:`_inc_build`: ``D``, ``U``, ``C`` the continuing rows'
    sums, ``Dn``, ``Cn`` the new rows'), touching only the rows it keeps or fills rather than every
    active row four times:

    * the warm start's level ``t*`` is :func:`_kernel`'s, from those sums;
    * the filling's initial sums (frozen load, unfrozen coefficient and count per link) are summed
      over the smaller of the kept rows and the refilled ones, the other part following from the
      totals (``D + Dn`` less the kept rows'; or ``U`` less the refilled rows' earlier loads);
    * the walk (:func:`_fill`) reads the kept lists, skipping the rows not free; or, when the
      rows to fill have fewer than ``few`` times the lists' entries (most rows kept), lists of
      those rows alone built for this solve (in ``fl_buf``, at least their entries long): the
      same rows in the same order.

    The rates are those of :func:`_kernel` within rounding (the sums are taken in another order;
    the flows freeze in the same order). Then the records are those of this solve: ``D``, ``C``
    over the active rows, ``U`` their loads (the filling's final frozen load), ``last_*``.
    Returns ``(rates, steps, kept)`` (rates one per slot, those of ``sl`` set; a view of
    ``fws``)."""
    n = f_ptr.size - 1
    na = sl.size
    L = cap.size
    fo = 0
    io = 0
    rates = fws[fo:fo + n]
    fo += n
    free = bws[:n]
    free[:] = False
    for i in range(na):
        f = sl[i]
        rates[f] = 0.0
        free[f] = True
    record = seq.size > 0
    # the warm start (as _kernel)
    t_star = r_gone
    for l in range(L):
        a_new = Dn[l]
        if a_new > 0.0:
            tb = cap[l] / (D[l] + a_new)
            tb2 = (cap[l] - U[l]) / a_new
            if tb2 > tb:
                tb = tb2
            if tb < t_star:
                t_star = tb
    t_keep = t_star * (1.0 - tie)
    kept = 0
    k_ent = 0
    f_ent = 0
    for i in range(na):
        f = sl[i]
        w = f_ptr[f + 1] - f_ptr[f]
        if prev[i] >= 0.0 and prev[i] < t_keep:
            rates[f] = prev[i]
            free[f] = False
            if record:
                seq[kept] = f
            kept += 1
            k_ent += w
        else:
            f_ent += w
    lk = fws[fo:fo + 4 * L].reshape((L, 4))
    fo += 4 * L
    for l in range(L):
        lk[l, 0] = cap[l]
        lk[l, 1] = 0.0
        lk[l, 2] = 0.0
        lk[l, 3] = 0.0
    if k_ent <= f_ent:
        # the kept rows' load and share, the unfrozen ones' the rest of the totals
        for i in range(na):
            f = sl[i]
            if not free[f]:
                r = rates[f]
                for e in range(f_ptr[f], f_ptr[f + 1]):
                    l = f_ind[e]
                    lk[l, 1] += f_dat[e] * r
                    lk[l, 2] += f_dat[e]
                    lk[l, 3] += 1.0
        for l in range(L):
            c = (C[l] + Cn[l]) - lk[l, 3]
            w = (D[l] + Dn[l]) - lk[l, 2]
            lk[l, 3] = c
            lk[l, 2] = w if c > 0.0 else 0.0
    else:
        # the unfrozen rows' share and count, the kept ones' load the rest of U
        for i in range(na):
            f = sl[i]
            if free[f]:
                r = prev[i]
                for e in range(f_ptr[f], f_ptr[f + 1]):
                    l = f_ind[e]
                    lk[l, 2] += f_dat[e]
                    lk[l, 3] += 1.0
                    if r >= 0.0:
                        lk[l, 1] += f_dat[e] * r
        for l in range(L):
            u = U[l] - lk[l, 1]
            lk[l, 1] = u if u > 0.0 else 0.0
    # the heap of the links with unfrozen flows (as _kernel)
    hk = fws[fo:fo + L]
    fo += L
    hl = iws[io:io + L]
    io += L
    pos = iws[io:io + L]
    io += L
    pos[:] = -1
    size = 0
    for l in range(L):
        if lk[l, 3] > 0.0:
            hk[size] = _level(lk, l)
            hl[size] = l
            pos[l] = size
            size += 1
    for i in range((size - 2) // 4, -1, -1):
        _sift_down(hk, hl, pos, i, size)
    gone = iws[io:io + L]
    io += L
    bl = iws[io:io + L]
    io += L
    lend = iws[io:io + L]                 # the lists' ends, emptied as links saturate
    io += L
    listed = 0
    for l in range(L):
        lend[l] = ll_start[l] + ll_len[l]
        listed += ll_len[l]
    w_ptr = ll_start
    w_fl = ll_slot
    if f_ent < few * listed:
        # few rows to fill among many listed (most kept): lists of those rows only, as _kernel
        # builds them (the same rows in the same order: the kept lists without the rows not free)
        w_ptr = iws[io:io + L + 1]
        io += L + 1
        w_ptr[:] = 0
        for i in range(na):
            f = sl[i]
            if free[f]:
                for e in range(f_ptr[f], f_ptr[f + 1]):
                    w_ptr[f_ind[e] + 1] += 1
        for l in range(L):
            w_ptr[l + 1] += w_ptr[l]
            lend[l] = w_ptr[l]
        w_fl = fl_buf
        for i in range(na):
            f = sl[i]
            if free[f]:
                for e in range(f_ptr[f], f_ptr[f + 1]):
                    l = f_ind[e]
                    w_fl[lend[l]] = f
                    lend[l] += 1
    bt = fws[fo:fo + L]
    fo += L
    ident = iws[io:io + L + 1]
    io += L + 1
    for l in range(L + 1):
        ident[l] = l
    no_f = fws[fo:fo]
    no_i = iws[io:io]
    ss = fws[fo:fo].reshape((0, 3))
    steps, nq = _fill(no_f, no_i, free, rates, f_ptr, f_ind, f_dat, ss, no_i, gone, bl, bt, hk, hl, pos, size,
                      lk, False, True, ident, ident, no_f, ident, ident, no_f, ss, w_ptr, lend, w_fl,
                      batch, pops, seq, kept)
    for i in range(na):
        f = sl[i]
        if free[f]:
            rates[f] = np.inf
            if record:
                seq[nq] = f
                nq += 1
    # the records of this solve
    for l in range(L):
        D[l] += Dn[l]
        C[l] += Cn[l]
        U[l] = lk[l, 1]
    for j in range(last_sl.size):
        last_on[last_sl[j]] = False
    for i in range(na):
        f = sl[i]
        last_on[f] = True
        last_rate[f] = rates[f]
    return rates, steps, kept


def _inc_sizes(n_links: int) -> tuple[int, int]:
    """Entries of the float64 and int64 working buffers :func:`_inc_kernel` needs beyond one per
    row (float64) over ``n_links`` links."""
    return 6 * n_links, 7 * n_links + 2
