"""The message table: a run's traffic as columns, with row views.

An 8,192-GPU all-to-all is 67 million messages; as :class:`~fabricsim.traffic.message.Message`
objects that is about 18 GB. :class:`MessageTable` holds the same traffic as numpy columns (a
column whose value is the same for every row is stored once and broadcast), dependencies in
compressed sparse rows, and tags as per-column arrays. It is a ``Sequence`` of ``Message``: code
written for a list of messages (``len``, iteration, indexing) works unchanged and builds each row
view on demand, while an engine or an analysis that needs speed reads the columns.

>>> from fabricsim.flows.message import Message
>>> t = MessageTable.from_messages([Message(0, 0, 1, 100), Message(1, 1, 0, 50, deps=(0,), gap_ps=7)])
>>> len(t), int(t.size_bytes.sum()), t[1].deps, t[1].gap_ps
(2, 150, (0,), 7)
>>> t.deps_of(1).tolist(), t.dependents_of(0).tolist()
([0], [1])
>>> [m.dst for m in t]
[1, 0]
>>> u = MessageTable.from_columns(src=[0, 1], dst=[1, 0], size_bytes=4096)   # a broadcast column
>>> u.size_bytes.tolist(), u.id.tolist(), u[0]
([4096, 4096], [0, 1], Message(id=0, src=0, dst=1, size_bytes=4096, start_ps=0, qps=1, deps=(), gap_ps=0, tags={}, conn=-1))
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .message import Message

#: integer columns of a message, in :class:`~fabricsim.traffic.message.Message` field order
COLUMNS = ("id", "src", "dst", "size_bytes", "start_ps", "qps", "gap_ps", "conn")
#: default of each column when a table is built without it (``id``: the row number)
DEFAULTS = {"start_ps": 0, "qps": 1, "gap_ps": 0, "conn": -1}


def _column(values, n: int, name: str) -> np.ndarray:
    """``values`` as an int64 column of length ``n``: a scalar is broadcast (stored once)."""
    a = np.asarray(values)
    if a.ndim == 0:
        return np.broadcast_to(a.astype(np.int64), (n,))
    if a.shape != (n,):
        raise ValueError(f"column {name} has {a.shape[0] if a.ndim else 1} values for {n} messages")
    if a.dtype != np.int64:
        if a.size and not np.issubdtype(a.dtype, np.integer):
            raise ValueError(f"column {name} must hold integers, got {a.dtype}")
        a = a.astype(np.int64)
    return a


def _tag_column(v) -> np.ndarray:
    """A tag column as a 1-d object array (Python values, ``None`` = no such tag)."""
    if isinstance(v, np.ndarray) and v.dtype == object:
        return v
    if isinstance(v, np.ndarray):
        return v.astype(object)  # numpy scalars become Python ints / floats / strs
    a = np.empty(len(v), dtype=object)
    a[:] = list(v)
    return a


def reverse_csr(n: int, ptr: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The transpose of the CSR ``(ptr, cols)`` over ``n`` rows: ``(rptr, rows)`` with the rows
    ``i`` whose group ``cols[ptr[i]:ptr[i + 1]]`` lists ``j`` at ``rows[rptr[j]:rptr[j + 1]]``, in
    ascending order and once per listing (what a stable argsort of ``cols`` gives), built by
    scipy's counting sort (``csr_matrix.tocsc``) in time linear in ``len(cols)``.

    >>> [a.tolist() for a in reverse_csr(3, np.array([0, 2, 3, 5]), np.array([2, 0, 2, 0, 0]))]
    [[0, 3, 3, 5], [0, 2, 2, 0, 1]]
    """
    m = len(cols)
    if not m:
        return np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.int64)
    import scipy.sparse as sp
    t = sp.csr_matrix((np.zeros(m, dtype=np.int8), cols, ptr), shape=(n, n)).tocsc()
    return t.indptr.astype(np.int64, copy=False), t.indices.astype(np.int64, copy=False)


class MessageTable(Sequence):
    """A run's messages as columns (see the module doc).

    Attributes
    ----------
    id, src, dst, size_bytes, start_ps, qps, gap_ps, conn : numpy.ndarray
        int64 columns, one value per message (read-only views when broadcast).
    dep_ptr, dep_ids : numpy.ndarray
        Dependencies in CSR form: message ``i`` depends on the messages whose *ids* are
        ``dep_ids[dep_ptr[i]:dep_ptr[i + 1]]``.
    tags : dict[str, numpy.ndarray]
        Per-message labels (``op``, ``phase``, ...): object arrays with ``None`` where a message
        has no such tag.
    """

    __slots__ = COLUMNS + ("dep_ptr", "dep_ids", "tags", "_row_of", "_dependents")

    def __init__(self, columns: dict, dep_ptr=None, dep_ids=None, tags: dict | None = None):
        n = len(np.asarray(columns["src"]))
        for name in COLUMNS:
            if name == "id" and "id" not in columns:
                value = np.arange(n, dtype=np.int64)
            else:
                value = columns.get(name, DEFAULTS.get(name))
                if value is None:
                    raise ValueError(f"column {name} is required")
            setattr(self, name, _column(value, n, name))
        if dep_ptr is None:
            self.dep_ptr = np.zeros(n + 1, dtype=np.int64)
            self.dep_ids = np.zeros(0, dtype=np.int64)
        else:
            self.dep_ptr = np.asarray(dep_ptr, dtype=np.int64)
            self.dep_ids = np.asarray(dep_ids, dtype=np.int64)
            if self.dep_ptr.shape != (n + 1,) or self.dep_ptr[0] != 0 or self.dep_ptr[-1] != len(self.dep_ids):
                raise ValueError("dep_ptr must have one entry per message plus one, from 0 to len(dep_ids)")
        self.tags = {k: _tag_column(v) for k, v in (tags or {}).items()}
        for k, v in self.tags.items():
            if v.shape != (n,):
                raise ValueError(f"tag column {k} has {len(v)} values for {n} messages")
        self._row_of = None
        self._dependents = None

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_columns(cls, deps: Sequence | None = None, tags: dict | None = None, **columns) -> "MessageTable":
        """A table from column values (arrays, or scalars broadcast to every row); ``deps`` an
        optional sequence of per-message id sequences."""
        ptr = ids = None
        if deps is not None:
            lens = np.fromiter((len(d) for d in deps), dtype=np.int64, count=len(deps))
            ptr = np.zeros(len(lens) + 1, dtype=np.int64)
            np.cumsum(lens, out=ptr[1:])
            ids = np.fromiter((x for d in deps for x in d), dtype=np.int64, count=int(ptr[-1]))
        return cls(columns, ptr, ids, tags)

    @classmethod
    def from_arrays(cls, dep_ptr=None, dep_ids=None, tags: dict | None = None, **columns) -> "MessageTable":
        """A table from numpy columns (scalars broadcast, int64 arrays kept without a copy) and
        dependencies already in CSR form (``dep_ptr``, ``dep_ids``); no per-message Python work."""
        return cls(columns, dep_ptr, dep_ids, tags)

    def with_columns(self, **columns) -> "MessageTable":
        """A new table sharing every column but ``columns`` (arrays or scalars), deps and tags."""
        cols = {name: getattr(self, name) for name in COLUMNS}
        cols.update(columns)
        t = type(self)(cols, self.dep_ptr, self.dep_ids, self.tags)
        if "id" not in columns:
            t._row_of, t._dependents = self._row_of, self._dependents
        return t

    @classmethod
    def concat(cls, tables: Sequence) -> "MessageTable":
        """The rows of ``tables`` one after the other (ids kept as they are; tag columns missing
        from a table are ``None`` there)."""
        tables = list(tables)
        if not tables:
            return cls({"src": np.zeros(0, dtype=np.int64), "dst": np.zeros(0, dtype=np.int64),
                        "size_bytes": np.zeros(0, dtype=np.int64)})
        cols = {name: np.concatenate([np.asarray(getattr(t, name)) for t in tables]) for name in COLUMNS}
        lens = np.array([len(t.dep_ids) for t in tables], dtype=np.int64)
        offs = np.concatenate([[0], np.cumsum(lens)[:-1]])
        ptr = np.concatenate([[0]] + [t.dep_ptr[1:] + o for t, o in zip(tables, offs)]).astype(np.int64)
        ids = np.concatenate([t.dep_ids for t in tables]).astype(np.int64)
        keys: dict = {}
        for t in tables:
            for k in t.tags:
                keys.setdefault(k, None)
        tags = {k: np.concatenate([t.tags[k] if k in t.tags else np.full(len(t), None, dtype=object)
                                   for t in tables]) for k in keys}
        return cls(cols, ptr, ids, tags)

    @classmethod
    def from_messages(cls, messages: Sequence) -> "MessageTable":
        """A table holding the same messages as ``messages`` (a list of ``Message``, or a table)."""
        if isinstance(messages, MessageTable):
            return messages
        n = len(messages)
        cols = {name: np.fromiter((getattr(m, name) for m in messages), dtype=np.int64, count=n)
                for name in COLUMNS}
        keys: dict = {}
        for m in messages:
            for k in m.tags:
                keys.setdefault(k, None)
        tags = {k: [m.tags.get(k) for m in messages] for k in keys}
        return cls.from_columns(deps=[m.deps for m in messages], tags=tags, **cols)

    # ------------------------------------------------------------------ sequence of Message
    def __len__(self) -> int:
        return len(self.src)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"message row {i} out of range (0..{n - 1})")
        tags = {k: v[i] for k, v in self.tags.items() if v[i] is not None}
        return Message(int(self.id[i]), int(self.src[i]), int(self.dst[i]), int(self.size_bytes[i]),
                       int(self.start_ps[i]), int(self.qps[i]), tuple(int(x) for x in self.deps_of(i)),
                       int(self.gap_ps[i]), tags, int(self.conn[i]))

    def __iter__(self):
        """The rows as :class:`Message` objects, equal to ``self[i]`` for each ``i``, built from the
        columns read as Python values a chunk at a time (an engine that builds every message's
        state iterates the whole table: per row indexing cost 18 us a message)."""
        n = len(self)
        step = 65536
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            cols = [c[lo:hi].tolist() for c in (self.id, self.src, self.dst, self.size_bytes, self.start_ps,
                                                self.qps, self.gap_ps, self.conn)]
            tags = [(k, v[lo:hi].tolist()) for k, v in self.tags.items()]
            ptr = self.dep_ptr[lo:hi + 1].tolist()
            deps = self.dep_ids[ptr[0]:ptr[-1]].tolist()
            base = ptr[0]
            for j, (mid, src, dst, size, start, qps, gap, conn) in enumerate(zip(*cols)):
                yield Message(mid, src, dst, size, start, qps, tuple(deps[ptr[j] - base:ptr[j + 1] - base]), gap,
                              {k: v[j] for k, v in tags if v[j] is not None}, conn)

    def __repr__(self) -> str:
        return f"<MessageTable {len(self)} messages, {int(self.dep_ptr[-1])} dependency edges>"

    # ------------------------------------------------------------------ columnar questions
    def deps_of(self, i: int) -> np.ndarray:
        """Ids of the messages row ``i`` depends on."""
        return self.dep_ids[self.dep_ptr[i]:self.dep_ptr[i + 1]]

    def row_of(self, ids) -> np.ndarray:
        """Row numbers of message ids (raises ``KeyError`` for an id not in the table)."""
        return self._rows(ids).copy() if self._dense() else self._rows(ids)

    def _dense(self) -> bool:
        """True if the ids are the row numbers ``0..n-1`` (every generated or dense trace): then
        an id's row is the id itself, found without a sort or a search (checked once)."""
        if self._row_of is None:
            ids = self.id
            n = len(ids)
            dense = n == 0 or bool(ids[0] == 0 and ids[-1] == n - 1 and (n == 1 or (ids[1:] > ids[:-1]).all()))
            if dense:
                self._row_of = ()
            else:
                order = np.argsort(ids, kind="stable")
                self._row_of = (ids[order], order)
        return not self._row_of

    def _rows(self, ids) -> np.ndarray:
        """:meth:`row_of` without the copy: ``ids`` itself (as int64) when the ids are dense."""
        ids = np.asarray(ids, dtype=np.int64)
        if self._dense():
            n = len(self)
            if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= n):
                bad = ids[(ids < 0) | (ids >= n)]
                raise KeyError(f"message id {int(np.ravel(bad)[0])} is not in the table")
            return ids
        sorted_ids, order = self._row_of
        pos = np.searchsorted(sorted_ids, ids)
        pos_c = np.minimum(pos, max(len(sorted_ids) - 1, 0))
        if len(sorted_ids) == 0 or np.any(sorted_ids[pos_c] != ids):
            bad = ids[(pos >= len(sorted_ids)) | (sorted_ids[pos_c] != ids)] if len(sorted_ids) else ids
            raise KeyError(f"message id {int(np.ravel(bad)[0])} is not in the table")
        return order[pos_c]

    def dep_rows(self) -> np.ndarray:
        """``dep_ids`` as row numbers (same CSR layout as ``dep_ptr``; read-only: with dense ids
        it is ``dep_ids`` itself)."""
        return self._rows(self.dep_ids) if len(self.dep_ids) else np.zeros(0, dtype=np.int64)

    def dependents_of(self, i: int) -> np.ndarray:
        """Rows that depend on row ``i`` (the reverse CSR, built once: the transpose of the
        dependency CSR by a counting sort, linear in the edges; each group lists its rows in
        ascending order, a row as often as it lists the dependency)."""
        if self._dependents is None:
            self._dependents = reverse_csr(len(self), self.dep_ptr, self.dep_rows())
        ptr, idx = self._dependents
        return idx[ptr[i]:ptr[i + 1]]

    def dependents(self) -> tuple[np.ndarray, np.ndarray]:
        """The reverse dependency CSR ``(ptr, rows)``: rows depending on row ``i`` are
        ``rows[ptr[i]:ptr[i + 1]]``."""
        self.dependents_of(0) if len(self) else None
        return self._dependents if self._dependents is not None else (np.zeros(1, np.int64), np.zeros(0, np.int64))

    def nbytes(self) -> int:
        """Memory held by the columns (broadcast columns count once)."""
        total = 0
        for name in COLUMNS:
            a = getattr(self, name)
            total += a.base.nbytes if (a.base is not None and a.strides == (0,)) else a.nbytes
        return total + self.dep_ptr.nbytes + self.dep_ids.nbytes + sum(v.nbytes for v in self.tags.values())
