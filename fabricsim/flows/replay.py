"""Replaying a message pattern: when each message is posted, and in which order a connection runs them.

Engine-neutral (no engine, network element or analysis imports): an engine asks :class:`Replay`
which messages to release and when, and :class:`Connections` which posted messages may start and
which complete, and tells them what happened. Both work on message *rows* (indices into the
:class:`~fabricsim.flows.table.MessageTable`, or the list of messages, they were built from).

:class:`Replay`: dependencies, start times, compute gaps and failure propagation.

- A row without dependencies is released at its ``start_ps`` (:meth:`Replay.initial`).
- A row whose dependencies have all completed at ``t`` is released at ``max(t + gap_ps,
  start_ps)`` (:meth:`Replay.completed`). With ``compute="gpu"`` (``simulation.compute``) the
  gap is a job on the sending GPU: rows with the same ``(src, deps, gap_ps)`` share one job
  (fan-out after one kernel), and a GPU runs one job at a time, so a job waits for the jobs queued
  on its GPU before it (``gpu_busy`` sums each GPU's compute time).
- A row that fails makes every row that (transitively) depends on it fail with
  ``dependency_incomplete`` (:meth:`Replay.failed`); they are never released.

:class:`Connections`: persistent connections (``conn >= 0``, docs/traces.md "Connections"), one
FIFO per ``(conn, src, dst)``. The engine calls

- :meth:`Connections.post` when a row is released: ``"start"`` (start sending it now),
  ``"wait"`` (queued behind the row in progress on its connection) or ``"error"`` (its connection
  is in the error state: fail it now with ``connection_error``);
- :meth:`Connections.sent` when a row's last new byte has left the sender: the rows to start
  now (the next one posted on its connection, if any);
- :meth:`Connections.done` when a row's bytes are all in, or it failed: ``(start, finish,
  flush)``, to be applied in that order: rows to start (as :meth:`sent`: a row that never
  reported ``sent`` hands its connection on when it ends), rows that complete now (in posting
  order; empty if this one must wait for an earlier row still in progress, "deferred"), and, when
  it failed, the later rows of its connection (started, deferred or queued) that fail with
  ``connection_error``.

Rows with ``conn < 0`` always start when posted and complete when done. Every row the engine is
told to start is started once; ``sent`` and ``done`` may both be called for a row, in either
order, and ``sent`` more than once.

>>> from fabricsim.flows.message import Message
>>> msgs = [Message(0, 0, 1, 100), Message(1, 0, 1, 100, deps=(0,), gap_ps=5),
...         Message(2, 2, 1, 100, start_ps=50, deps=(0,)), Message(3, 1, 0, 100, deps=(1, 2))]
>>> r = Replay(msgs)
>>> r.initial()
[(0, 0)]
>>> r.completed(0, 10)          # row 1 after its gap, row 2 not before its start
[(15, 1), (50, 2)]
>>> r.completed(1, 20), r.failed(2)
([], [3])
>>> c = Connections([Message(i, 0, 1, 100, conn=7) for i in range(5)])
>>> c.post(0), c.post(1), c.post(2)
('start', 'wait', 'wait')
>>> c.sent(0)                   # row 0's last byte is out: row 1 starts
[1]
>>> c.done(1), c.deferred(1)    # row 1 is all in (so row 2 starts) before row 0 completed
(([2], [], []), True)
>>> c.done(0)                   # row 0 completes, and row 1 with it
([], [0, 1], [])
>>> c.post(3)
'wait'
>>> c.done(2, failed=True)      # row 2 fails: row 3 starts (its turn), and is flushed
([3], [2], [3])
>>> c.post(4)
'error'
"""
from __future__ import annotations

from collections import deque

import numpy as np

from .table import MessageTable

#: reason of a row that fails because a row it depends on failed
DEPENDENCY_INCOMPLETE = "dependency_incomplete"
#: reason of a row flushed because an earlier row on its connection failed
CONNECTION_ERROR = "connection_error"

_OPEN, _DONE, _FAILED = 0, 1, 2


def _table(messages) -> MessageTable:
    return messages if isinstance(messages, MessageTable) else MessageTable.from_messages(messages)


def _distinct_groups(ptr: np.ndarray, rows: np.ndarray) -> bool:
    """True if no group ``rows[ptr[i]:ptr[i + 1]]`` of a CSR lists a row twice, found without a
    sort when every group is ascending (as :meth:`MessageTable.dependents` builds them); False
    (the caller's row-by-row path) if some group is not ascending or has a repeat."""
    m = len(rows)
    if m < 2:
        return True
    inner = np.ones(m - 1, dtype=bool)       # pairs (j, j + 1) inside one group
    cut = ptr[1:-1]
    cut = cut[(cut > 0) & (cut < m)]
    inner[cut - 1] = False
    return bool((rows[1:] > rows[:-1])[inner].all())


def released(deps: np.ndarray, pending: np.ndarray) -> np.ndarray:
    """Count down ``pending`` (unfinished dependencies per row) by one per entry of ``deps``
    (dependents of completed rows, in completion order), in place; the mask of the entries that
    bring their row to 0 (each released row once, by its last dependency). The numpy reference of
    :func:`fabricsim.flows.replay_compiled.released` (a sequential pass).

    >>> pending = np.array([2, 1, 3])
    >>> released(np.array([0, 1, 0, 2]), pending).tolist(), pending.tolist()
    ([False, True, True, False], [0, 0, 2])
    """
    total = len(deps)
    if not total:
        return np.zeros(0, dtype=bool)
    # the k-th decrement of a dependent (k = 1, 2, ...) in call order: it is released by the
    # one that brings its pending count to 0
    o = np.argsort(deps, kind="stable")
    d = deps[o]
    head = np.r_[True, d[1:] != d[:-1]]
    starts = np.flatnonzero(head)
    k = np.arange(total) - np.repeat(starts, np.diff(np.r_[starts, total])) + 1
    occ = np.empty(total, dtype=np.int64)
    occ[o] = k
    now = occ == pending[deps]
    pending[d[starts]] -= np.diff(np.r_[starts, total])
    return now


class Replay:
    """Release times of a message pattern's rows (see the module doc).

    ``messages``: a :class:`MessageTable` or a sequence of ``Message`` (wrapped);
    ``compute``: ``"gaps"`` (a gap is a delay) or ``"gpu"`` (a gap is a job on the sending GPU).
    """

    def __init__(self, messages, compute: str = "gaps", compiled: bool = False):
        if compute not in ("gaps", "gpu"):
            raise ValueError(f"compute must be 'gaps' or 'gpu', not {compute!r}")
        if compiled:                  # completed_many's count-down in one compiled pass (numba)
            from . import replay_compiled
            self._released = replay_compiled.released
        else:
            self._released = released
        self.table = t = _table(messages)
        self.gpu = compute == "gpu"
        self._pending = np.diff(t.dep_ptr)            # unfinished dependencies per row
        self._status = np.zeros(len(t), dtype=np.int8)
        self._dep_ptr, self._dependents = t.dependents()
        self._distinct = _distinct_groups(self._dep_ptr, self._dependents)
        self._jobs: dict = {}                         # (src, deps, gap) -> end of that compute job
        self.gpu_free: dict[int, int] = {}            # GPU -> when its current compute job ends
        #: GPU -> total compute time of the jobs started so far (``compute="gpu"``)
        self.gpu_busy: dict[int, int] = {}

    def initial(self) -> list[tuple[int, int]]:
        """``(release_ps, row)`` of every row without dependencies, in row order."""
        start = self.table.start_ps
        return [(int(start[i]), int(i)) for i in np.flatnonzero(self._pending == 0)]

    def completed(self, row: int, t: int) -> list[tuple[int, int]]:
        """``row`` completed at ``t``: ``(release_ps, row)`` of each dependent whose last
        dependency this was, in the order the dependents are listed (row order)."""
        self._status[row] = _DONE
        deps = self._dependents[self._dep_ptr[row]:self._dep_ptr[row + 1]]
        if not len(deps):
            return []
        pending = self._pending
        if self._distinct:                # each dependent once: one vectorised decrement
            left = pending[deps] - 1
            pending[deps] = left
            ready = deps[left == 0].tolist()
        else:
            ready = []
            for d in deps.tolist():
                pending[d] -= 1
                if pending[d] == 0:
                    ready.append(d)
        out = []
        start = self.table.start_ps
        for d in ready:
            rel = self._compute(t, d)
            s = int(start[d])
            out.append((rel if rel >= s else s, d))
        return out

    def completed_many(self, rows, t) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`completed` of ``rows``, in this order, at ``t`` (one time, or one per row): the
        released dependents' ``(release_ps, row)`` as two arrays, in the order the calls one by one
        give them (a dependent is released by the row that completes its last dependency).
        Vectorised, but for ``compute="gpu"`` or dependents listed twice (one by one)."""
        rows = np.asarray(rows, dtype=np.int64)
        ts = np.broadcast_to(np.asarray(t, dtype=np.int64), rows.shape)
        if self.gpu or not self._distinct:
            out = [x for r, tr in zip(rows.tolist(), ts.tolist()) for x in self.completed(r, tr)]
            rel = np.fromiter((x[0] for x in out), dtype=np.int64, count=len(out))
            return rel, np.fromiter((x[1] for x in out), dtype=np.int64, count=len(out))
        self._status[rows] = _DONE
        ptr = self._dep_ptr
        lo, hi = ptr[rows], ptr[rows + 1]
        lens = hi - lo
        total = int(lens.sum())
        if not total:
            e = np.zeros(0, dtype=np.int64)
            return e, e
        # the dependents of every row, row after row: one gather from the CSR
        first = np.cumsum(lens) - lens
        deps = self._dependents[np.repeat(lo - first, lens) + np.arange(total)]
        now = self._released(deps, self._pending)
        ready = deps[now]
        by = np.repeat(ts, lens)[now]                  # the time of the row that released each
        rel = by + self.table.gap_ps[ready].astype(np.int64)
        return np.maximum(rel, self.table.start_ps[ready].astype(np.int64)), ready

    def leaves(self) -> np.ndarray:
        """Per row, whether no row depends on it (bool): its completion releases nothing and
        :meth:`completed` returns ``[]`` for it."""
        return self._dep_ptr[1:] == self._dep_ptr[:-1]

    def min_gap(self) -> np.ndarray:
        """Per row, the smallest compute gap among its dependents (int64, ``2**62`` if it has none):
        a row completed at ``t`` releases nothing before ``t + min_gap`` (a GPU job starts at ``t``
        or later)."""
        got = getattr(self, "_min_gap", None)
        if got is None:
            n = len(self.table)
            got = np.full(n, 2**62, dtype=np.int64)
            ptr, deps = self._dep_ptr, self._dependents
            has = np.flatnonzero(ptr[1:] > ptr[:-1])
            if len(has):
                gap = np.asarray(self.table.gap_ps, dtype=np.int64)[deps]
                got[has] = np.minimum.reduceat(gap, ptr[has])
            self._min_gap = got
        return got

    def failed(self, row: int) -> list[int]:
        """``row`` failed: the rows that now fail with ``dependency_incomplete``, every row that
        depends on it directly or transitively and has not ended, depth first in listing order."""
        status = self._status
        status[row] = _FAILED
        ptr, deps = self._dep_ptr, self._dependents
        out = []
        stack = [iter(deps[ptr[row]:ptr[row + 1]].tolist())]
        while stack:
            d = next(stack[-1], None)
            if d is None:
                stack.pop()
                continue
            if status[d] == _OPEN:
                status[d] = _FAILED
                out.append(d)
                stack.append(iter(deps[ptr[d]:ptr[d + 1]].tolist()))
        return out

    def _compute(self, t: int, row: int) -> int:
        """When ``row``, whose dependencies completed at ``t``, may be posted (before its start)."""
        t_ = self.table
        gap = int(t_.gap_ps[row])
        if not self.gpu or not gap:
            return t + gap
        src = int(t_.src[row])
        key = (src, tuple(t_.deps_of(row).tolist()), gap)
        end = self._jobs.get(key)
        if end is None:
            start = max(t, self.gpu_free.get(src, 0))
            end = self._jobs[key] = start + gap
            self.gpu_free[src] = end
            self.gpu_busy[src] = self.gpu_busy.get(src, 0) + gap
        return end


def _connection_numbers(t: MessageTable) -> np.ndarray:
    """Each row's connection ``(conn, src, dst)`` numbered (in order of the sorted triples), -1
    for ``conn < 0``: the rows' keys as integers, found once for the whole table."""
    cid = np.full(len(t), -1, dtype=np.int64)
    on = np.flatnonzero(np.asarray(t.conn) >= 0)
    if len(on):
        c, s, d = (np.asarray(x)[on] for x in (t.conn, t.src, t.dst))
        smin, dmin = int(s.min()), int(d.min())
        smax, dmax, cmax = int(s.max()) + 1, int(d.max()) + 1, int(c.max()) + 1
        if smin >= 0 and dmin >= 0 and cmax * smax * dmax < 2**62:
            # one integer per triple, ordered as the triples are (lexicographically): a 1-d
            # unique instead of np.unique(axis=0), which sorts rows as records (~10x slower)
            _u, inv = np.unique((c * smax + s) * dmax + d, return_inverse=True)
        else:
            _u, inv = np.unique(np.stack([c, s, d], axis=1), axis=0, return_inverse=True)
        cid[on] = inv.ravel()
    return cid


class Connections:
    """Posting-order FIFO of every persistent connection ``(conn, src, dst)`` (see the module doc).

    State per connection number, as arrays (a million connections at cluster scale; the batch
    calls of the flow engine read and write them at once where every row is in the simple
    case): ``_open1`` (``-1``: no started row in progress, a row: the only one, ``-2``: several,
    in the deque ``_open_q``), ``_wait`` (0: free, 1: busy with nobody behind, 2: busy with rows
    queued in the deque ``_wait_q``), ``_err`` (the error state)."""

    def __init__(self, messages):
        t = _table(messages)
        self._conn, self._src, self._dst = t.conn, t.src, t.dst
        cid = _connection_numbers(t)
        self._cid = cid.tolist()                        # (read row by row: a list is faster)
        self._cid_a = cid                               # (read in batches)
        n_conn = int(cid.max()) + 1 if len(cid) else 0
        self._open1 = np.full(n_conn, -1, dtype=np.int64)
        self._open_q: dict = {}    # connection -> started rows not yet completed (several), in posting order
        self._wait = np.zeros(n_conn, dtype=np.int8)
        self._wait_q: dict = {}    # connection -> rows posted behind the one sending
        self._err = np.zeros(n_conn, dtype=bool)
        self._handed_a = np.zeros(len(t), dtype=np.uint8)    # rows that have handed their connection on
        self._handed = memoryview(self._handed_a)            # (the same bytes, read row by row)
        self._deferred: set = set()

    def key(self, row: int):
        """The connection ``(conn, src, dst)`` of ``row``, or None (``conn < 0``: fresh queue pairs)."""
        c = int(self._conn[row])
        return None if c < 0 else (c, int(self._src[row]), int(self._dst[row]))

    def _number(self, row: int):
        """The number of ``row``'s connection (one per distinct :meth:`key`), or None."""
        k = self._cid[row]
        return None if k < 0 else k

    def post(self, row: int) -> str:
        """``row`` is released: ``"start"`` it now, it must ``"wait"`` (the engine will be told to
        start it by :meth:`sent` or :meth:`done`), or its connection is in ``"error"``."""
        key = self._number(row)
        if key is None:
            return "start"
        if self._err[key]:
            return "error"
        w = self._wait[key]
        if w:
            if w == 2:
                self._wait_q[key].append(row)
            else:
                self._wait_q[key] = deque((row,))
                self._wait[key] = 2
            return "wait"
        self._wait[key] = 1
        self._started(key, row)
        return "start"

    def post_many(self, rows) -> np.ndarray:
        """:meth:`post` of ``rows`` in this order: True where a row starts now. At once when no two
        rows share a connection and none of theirs is busy, open or in error (rows with fresh
        queue pairs always start); else row by row."""
        rows = np.asarray(rows, dtype=np.int64)
        start = np.ones(len(rows), dtype=bool)
        cid = self._cid_a[rows]
        keyed = np.flatnonzero(cid >= 0)
        if not len(keyed):
            return start
        keys = cid[keyed]
        if not (self._wait[keys].any() or (self._open1[keys] != -1).any() or self._err[keys].any()) \
                and len(np.unique(keys)) == len(keys):
            self._wait[keys] = 1
            self._open1[keys] = rows[keyed]
            return start
        start[keyed] = [self.post(r) == "start" for r in rows[keyed].tolist()]
        return start

    def _started(self, key, row: int):
        q = self._open1[key]
        if q == -1:
            self._open1[key] = row
        elif q == -2:
            self._open_q[key].append(row)
        else:
            self._open_q[key] = deque((int(q), row))
            self._open1[key] = -2

    def _open_rows(self, key) -> deque:
        """The started rows of connection ``key`` as a deque (stored so from now on)."""
        q = self._open1[key]
        if q != -2:
            self._open_q[key] = deque(() if q == -1 else (int(q),))
            self._open1[key] = -2
        return self._open_q[key]

    def _close(self, key):
        """Connection ``key`` has no started row in progress."""
        self._open1[key] = -1
        self._open_q.pop(key, None)

    def sent(self, row: int) -> list[int]:
        """``row`` has sent its last new byte: the rows to start now (the next one on its
        connection). Only the first call for a row (of :meth:`sent` and :meth:`done`) hands on."""
        key = self._number(row)
        if key is None or self._handed[row]:
            return []
        self._handed[row] = 1
        w = self._wait[key]             # busy since row was posted; free once flushed
        if not w:
            return []
        if w == 2:
            q = self._wait_q[key]
            nxt = q.popleft()
            if not q:
                del self._wait_q[key]
                self._wait[key] = 1
            self._started(key, nxt)
            return [nxt]
        self._wait[key] = 0
        return []

    def sent_many(self, rows) -> list[tuple[int, int]]:
        """:meth:`sent` of ``rows`` in this order: ``(row, started)`` for each row to start now, in
        order, with the row that handed its connection on. At once when no two of the rows that
        hand on share a connection and nobody waits behind them; else row by row."""
        rows = np.asarray(rows, dtype=np.int64)
        if not len(rows):
            return []
        keys = self._cid_a[rows]
        on = (keys >= 0) & (self._handed_a[rows] == 0)
        r, k = rows[on], keys[on]
        if len(r) and ((self._wait[k] == 2).any() or len(np.unique(k)) != len(k)):
            out = []
            for x in rows.tolist():
                out += [(x, y) for y in self.sent(x)]
            return out
        self._handed_a[r] = 1
        self._wait[k] = 0
        return []

    def done_many(self, rows) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """:meth:`done` of ``rows`` (not failed) in this order: ``(start, finish)``, the calls'
        lists one after the other as ``(k, row)`` pairs, ``k`` the position in ``rows`` of the
        call that gave the row."""
        sk, sr, fk, fr = self.done_many_arrays(rows)
        return list(zip(sk.tolist(), sr.tolist())), list(zip(fk.tolist(), fr.tolist()))

    def done_many_arrays(self, rows) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`done_many` as arrays ``(start k, start rows, finish k, finish rows)``; at once when
        every row finishes alone (:meth:`finishes_alone`), else row by row."""
        rows = np.asarray(rows, dtype=np.int64)
        alone = self.finish_alone(rows)
        if alone.all():
            keys = self._cid_a[rows]
            self._open1[keys[keys >= 0]] = -1
            e = np.zeros(0, dtype=np.int64)
            return e, e, np.arange(len(rows), dtype=np.int64), rows
        start, finish = [], []
        for k, r in enumerate(rows.tolist()):
            if self.finishes_alone(r):      # (now: an earlier row of the batch may have changed it)
                key = self._cid[r]
                if key >= 0:
                    self._open1[key] = -1
                finish.append((k, r))
                continue
            s, f, _ = self.done(r)
            start += [(k, x) for x in s]
            finish += [(k, x) for x in f]
        sk, sr = np.array(start, dtype=np.int64).reshape(-1, 2).T
        fk, fr = np.array(finish, dtype=np.int64).reshape(-1, 2).T
        return sk, sr, fk, fr

    def separable(self, posted, finishing) -> bool:
        """True if posting the rows ``posted`` and completing the started rows ``finishing``
        (:meth:`done`, not failed) give the same answers and state in any interleaving as all the
        posts and then all the completions: no connection is both posted to and completing, and
        every completion finishes alone (:meth:`finishes_alone`)."""
        posted = np.asarray(posted, dtype=np.int64)
        finishing = np.asarray(finishing, dtype=np.int64)
        fk = self._cid_a[finishing]
        pk = self._cid_a[posted]
        if len(fk) and len(pk) and np.isin(fk[fk >= 0], pk[pk >= 0]).any():
            return False
        return bool(self.finish_alone(finishing).all())

    def finish_alone(self, rows: np.ndarray) -> np.ndarray:
        """:meth:`finishes_alone` of each of ``rows`` (started), as booleans."""
        rows = np.asarray(rows, dtype=np.int64)
        keys = self._cid_a[rows]
        out = keys < 0
        k = np.flatnonzero(~out)
        if len(k):
            r = rows[k]
            out[k] = (self._handed_a[r] != 0) & (self._open1[keys[k]] == r)
        return out

    def finishes_alone(self, row: int) -> bool:
        """True if :meth:`done` of ``row`` (started) would now give ``([], [row], [])``: it starts
        nothing and completes no row deferred behind it."""
        key = self._cid[row]
        if key < 0:
            return True
        return bool(self._handed[row]) and bool(self._open1[key] == row)

    def done(self, row: int, failed: bool = False) -> tuple[list[int], list[int], list[int]]:
        """``row`` (started) has all its bytes in, or ``failed``: ``(start, finish, flush)``.

        ``start``: rows to start first (as :meth:`sent`); ``finish``: rows that end now, in order
        (``row`` itself with the engine's outcome, then the deferred rows behind it, which
        complete); empty if ``row`` is deferred (it completes with its predecessor). ``flush``
        (only when ``failed``): the later rows of the connection, started (including any row in
        ``start``) or queued, which fail with ``connection_error``; the connection then rejects
        every later post (``"error"``).
        """
        key = self._number(row)
        if key is None:
            return [], [row], []
        start = self.sent(row)
        if not failed and self._open1[key] >= 0:    # the connection's only open row: row itself
            self._open1[key] = -1
            return start, [row], []
        q = self._open_rows(key)
        if failed:
            later = []
            while True:             # this row and every row started after it
                x = q.pop()
                if x == row:
                    break
                later.append(x)
            later.reverse()
            self._err[key] = True
            flush = later + list(self._wait_q.pop(key, ()))
            self._wait[key] = 0
            for x in flush:
                self._handed[x] = 1
                self._deferred.discard(x)
            self._deferred.discard(row)
            if not q:
                self._close(key)
            return start, [row], flush
        if q[0] != row:
            self._deferred.add(row)
            return start, [], []
        q.popleft()
        finish = [row]
        while q and q[0] in self._deferred:
            x = q.popleft()
            self._deferred.discard(x)
            finish.append(x)
        if not q:
            self._close(key)
        return start, finish, []

    def deferred(self, row: int) -> bool:
        """True while ``row`` has all its bytes in but waits for an earlier row to complete."""
        return row in self._deferred
