"""Generic collectives expanded into point-to-point trace records (docs/traces.md, "Collectives").

Every generator takes the participating ``ranks`` (GPU ids, in ring order), the payload
``size_bytes``, an ``op`` name, the first message id ``start_id``, the dependencies of its first
step ``deps`` and ``layer`` / ``microbatch`` labels, and returns :class:`TraceRecord` objects with
phase ``"other"`` and consecutive ids ``start_id, start_id + 1, ...``, so several collectives can be
concatenated into one trace (:func:`compose`, :func:`sequence`).

``deps`` is either a list of message ids (every first-step message waits for all of them) or a
mapping ``rank -> ids`` (the first-step messages sent by that rank wait for those ids; see
:func:`last_messages`, which gives this mapping for a previous collective).

Channels and connections (keyword-only ``channels``, ``conn_base``), as NCCL runs a collective:
the buffer is split over ``channels`` (NCCL's nChannels; :func:`chunk_sizes` of ``S`` over the
channels, then of each channel's part over the ring's chunks) and every channel runs the whole
schedule on its own, with its own dependency chain. Channel ``c`` sends on the persistent
connection ``conn = conn_base + c`` (the same queue pairs, hence the same ECMP paths, for every
step and every repeat of :func:`sequence`); ``conn_base = -1`` gives every message fresh queue
pairs instead (``conn = -1``). Every record carries ``collective`` (the kind) and
``collective_bytes`` (``S``, the buffer size per rank as nccl-tests counts it).

- :func:`ring_all_reduce`: ``2 (n - 1)`` steps, reduce-scatter then all-gather. The buffer is split
  into ``n`` chunks of ``S // n`` bytes, the first ``S % n`` chunks one byte larger. In reduce-scatter
  step ``k`` rank ``r[i]`` sends chunk ``(i - k) mod n`` to its ring successor ``r[i + 1]``; in
  all-gather step ``k`` chunk ``(i + 1 - k) mod n``. The step-``k`` message from ``r[i]`` depends on
  the step-``k - 1`` message into ``r[i]`` (it forwards what it just received) with ``gap_ps``.
- :func:`ring_reduce_scatter` / :func:`ring_all_gather`: the first / last ``n - 1`` steps alone.
- :func:`tree_all_reduce`: NCCL's double binary tree (:func:`double_btree`), pipelined in chunks:
  reduce up, broadcast down.
- :func:`send_recv`: one message ``ranks[0] -> ranks[1]``.
- :func:`all_to_all`: every rank sends chunk ``j`` of its ``S`` bytes to ``ranks[j]`` (no deps between
  them), rank ``i`` to peers in the order ``(i + 1) mod n, (i + 2) mod n, ...`` (staggered, as NCCL
  schedules peers, so the ranks do not all start on the same destination).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from ..errors import ConfigError
from .schema import INT64_MAX, Trace, TraceRecord, check_trace

#: most pipeline chunks a tree all-reduce cuts one channel's part into (each gives 2 (n - 1) messages)
MAX_TREE_CHUNKS = 65536

KINDS = ("allreduce", "reduce_scatter", "all_gather", "all_to_all", "sendrecv")
#: all-reduce algorithms (``sequence(algorithm=...)``, ``--algorithm``)
ALGORITHMS = ("ring", "tree")
#: the most channels a collective may use (NCCL's MAXCHANNELS is 32 or 64 depending on version)
MAX_CHANNELS = 64

Deps = "Sequence[int] | Mapping[int, Sequence[int]]"


def chunk_sizes(size_bytes: int, n: int) -> list[int]:
    """``n`` chunk sizes summing exactly to ``size_bytes``; the first ``size_bytes % n`` one byte larger
    (the same split as the queue-pair split, :func:`fabricsim.net.packet.split_bytes`)."""
    from ..flows.identity import split_bytes
    return split_bytes(size_bytes, n)


def _check(ranks, size_bytes: int, min_ranks: int = 2, max_ranks: int | None = None) -> list[int]:
    ranks = [int(r) for r in ranks]
    if len(ranks) < min_ranks or (max_ranks is not None and len(ranks) > max_ranks):
        allowed = f"exactly {min_ranks}" if max_ranks == min_ranks else f"at least {min_ranks}"
        raise ConfigError(f"{len(ranks)} ranks (allowed: {allowed})", field="ranks")
    if any(r < 0 for r in ranks):
        raise ConfigError(f"negative rank in {ranks} (allowed: GPU ids >= 0)", field="ranks")
    if len(set(ranks)) != len(ranks):
        raise ConfigError(f"repeated rank in {ranks} (allowed: distinct GPU ids)", field="ranks")
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, int) or size_bytes <= 0:
        raise ConfigError(f"got {size_bytes!r} (allowed: an integer > 0)", field="size")
    return ranks


def _check_channels(channels, conn_base) -> None:
    if isinstance(channels, bool) or not isinstance(channels, int) or not 1 <= channels <= MAX_CHANNELS:
        raise ConfigError(f"got {channels!r} (allowed: an integer 1..{MAX_CHANNELS})", field="channels")
    if isinstance(conn_base, bool) or not isinstance(conn_base, int) or not -1 <= conn_base <= INT64_MAX - channels:
        raise ConfigError(f"got {conn_base!r} (allowed: an integer 0..{INT64_MAX - channels}, or -1 for fresh "
                          "queue pairs)", field="conn-base")


def _conn(conn_base: int, channel: int) -> int:
    """The connection channel ``channel`` sends on (-1: fresh queue pairs)."""
    return -1 if conn_base < 0 else conn_base + channel


def _first_deps(deps, rank: int) -> tuple[int, ...]:
    if isinstance(deps, Mapping):
        return tuple(deps.get(rank, ()))
    return tuple(deps or ())


def _ring(ranks, size_bytes, op, start_id, deps, layer, microbatch, gap_ps, steps, kind, channels,
          conn_base) -> list[TraceRecord]:
    """Ring steps: ``steps`` is a list of chunk offsets ``o``: in that step rank i sends chunk (i + o) mod n
    of its channel's part. Ids are step-major, then channel, then rank."""
    _check_channels(channels, conn_base)
    n = len(ranks)
    if size_bytes < n * channels:
        raise ConfigError(f"{size_bytes} B over {n} ranks x {channels} channels leaves empty chunks "
                          f"(allowed: at least {n * channels} B)", field="size")
    if gap_ps < 0:
        raise ConfigError(f"got {gap_ps} (allowed: >= 0)", field="gap")
    sizes = [chunk_sizes(part, n) for part in chunk_sizes(size_bytes, channels)]   # [channel][chunk]
    recs: list[TraceRecord] = []
    prev: list[list[int]] | None = None  # prev[c][i]: id of the previous step's message from rank i, channel c
    nid = start_id
    for off in steps:
        cur = []
        for c in range(channels):
            row = []
            for i, src in enumerate(ranks):
                if prev is None:
                    d, gap = _first_deps(deps, src), 0
                else:
                    d, gap = (prev[c][(i - 1) % n],), gap_ps  # the message that just arrived at rank i
                recs.append(TraceRecord(nid, src, ranks[(i + 1) % n], sizes[c][(i + off) % n], op, "other",
                                        layer, microbatch, d, gap, conn=_conn(conn_base, c), collective=kind,
                                        collective_bytes=size_bytes))
                row.append(nid)
                nid += 1
            cur.append(row)
        prev = cur
    return recs


def ring_all_reduce(ranks, size_bytes: int, op: str = "allreduce", start_id: int = 0, deps=(),
                    layer: int = -1, microbatch: int = -1, gap_ps: int = 0, *, channels: int = 1,
                    conn_base: int = -1) -> list[TraceRecord]:
    """Ring all-reduce of ``size_bytes``: ``2 (n - 1)`` steps of ``n`` messages per channel (ids
    step-major)."""
    ranks = _check(ranks, size_bytes)
    n = len(ranks)
    steps = [-k for k in range(n - 1)] + [1 - k for k in range(n - 1)]
    return _ring(ranks, size_bytes, op, start_id, deps, layer, microbatch, gap_ps, steps, "allreduce",
                 channels, conn_base)


def ring_reduce_scatter(ranks, size_bytes: int, op: str = "reduce_scatter", start_id: int = 0, deps=(),
                        layer: int = -1, microbatch: int = -1, gap_ps: int = 0, *, channels: int = 1,
                        conn_base: int = -1) -> list[TraceRecord]:
    """Ring reduce-scatter of a ``size_bytes`` buffer: the first ``n - 1`` all-reduce steps."""
    ranks = _check(ranks, size_bytes)
    return _ring(ranks, size_bytes, op, start_id, deps, layer, microbatch, gap_ps,
                 [-k for k in range(len(ranks) - 1)], "reduce_scatter", channels, conn_base)


def ring_all_gather(ranks, size_bytes: int, op: str = "all_gather", start_id: int = 0, deps=(),
                    layer: int = -1, microbatch: int = -1, gap_ps: int = 0, *, channels: int = 1,
                    conn_base: int = -1) -> list[TraceRecord]:
    """Ring all-gather into a ``size_bytes`` buffer (``n`` chunks; rank i starts with chunk i + 1):
    the last ``n - 1`` all-reduce steps."""
    ranks = _check(ranks, size_bytes)
    return _ring(ranks, size_bytes, op, start_id, deps, layer, microbatch, gap_ps,
                 [1 - k for k in range(len(ranks) - 1)], "all_gather", channels, conn_base)


def btree(nranks: int, rank: int) -> tuple[int, list[int]]:
    """NCCL's binary tree (``ncclGetBtree``, src/graph/trees.cc): ``(parent, children)`` of tree
    position ``rank`` among ``0 .. nranks - 1``; the root (0) has parent -1 and one child.

    >>> [btree(8, r) for r in range(8)]       # doctest: +NORMALIZE_WHITESPACE
    [(-1, [4]), (2, []), (4, [1, 3]), (2, []), (0, [2, 6]), (6, []), (4, [5, 7]), (6, [])]
    """
    bit = 1
    while bit < nranks and not bit & rank:
        bit <<= 1
    if rank == 0:
        return -1, ([bit >> 1] if nranks > 1 else [])
    up = (rank ^ bit) | (bit << 1)
    if up >= nranks:
        up = rank ^ bit
    low = bit >> 1
    if low == 0:
        return up, []
    down1 = rank + low
    while down1 >= nranks and low:
        low >>= 1
        down1 = rank + low
    return up, [rank - (bit >> 1)] + ([down1] if low else [])


def double_btree(nranks: int, tree: int) -> dict[int, tuple[int, list[int]]]:
    """NCCL's double binary tree (``ncclGetDtree``): position -> (parent, children) of tree 0
    (:func:`btree`) or tree 1 (tree 0 mirrored, ``n - 1 - r``, for an even count; shifted by one for
    an odd count), so that a leaf of one tree is an inner node of the other."""
    out = {}
    for r in range(nranks):
        if tree == 0:
            out[r] = btree(nranks, r)
        elif nranks % 2:
            u, ch = btree(nranks, (r - 1) % nranks)
            out[r] = (-1 if u == -1 else (u + 1) % nranks, [(c + 1) % nranks for c in ch])
        else:
            u, ch = btree(nranks, nranks - 1 - r)
            out[r] = (-1 if u == -1 else nranks - 1 - u, [nranks - 1 - c for c in ch])
    return out


def tree_all_reduce(ranks, size_bytes: int, op: str = "allreduce", start_id: int = 0, deps=(),
                    layer: int = -1, microbatch: int = -1, gap_ps: int = 0, *, channels: int = 1,
                    conn_base: int = -1, chunk_bytes: int = 512 * 1024) -> list[TraceRecord]:
    """Pipelined tree all-reduce (NCCL's double binary tree): channel ``c`` runs on tree ``c % 2``
    of :func:`double_btree` over the positions of ``ranks`` (use an even ``channels`` for both
    trees). Each channel's part of the buffer is cut into pipeline chunks of at most
    ``chunk_bytes`` (:func:`chunk_sizes`); chunk j goes up (child -> parent, once the child has chunk
    j from all its children: reduce) and then down (parent -> child, once the parent has the reduced
    chunk j: the root when its children's chunk j is in, any other node when its parent's is).
    Leaves' first chunks carry ``deps``; every other message waits for those it forwards, plus
    ``gap_ps``. Ids: channel, then chunk, then up before down."""
    ranks = _check(ranks, size_bytes)
    _check_channels(channels, conn_base)
    if isinstance(chunk_bytes, bool) or not isinstance(chunk_bytes, int) or chunk_bytes <= 0:
        raise ConfigError(f"got {chunk_bytes!r} (allowed: an integer > 0)", field="chunk")
    if gap_ps < 0:
        raise ConfigError(f"got {gap_ps} (allowed: >= 0)", field="gap")
    n = len(ranks)
    if size_bytes < channels:
        raise ConfigError(f"{size_bytes} B over {channels} channels leaves empty channels "
                          f"(allowed: at least {channels} B)", field="size")
    pieces = -(-size_bytes // channels // chunk_bytes)
    if pieces > MAX_TREE_CHUNKS:
        raise ConfigError(f"{chunk_bytes} B chunks cut each channel's {size_bytes // channels} B into {pieces} "
                          f"pipeline chunks (allowed: at most {MAX_TREE_CHUNKS}; a larger chunk)", field="chunk")
    recs: list[TraceRecord] = []
    nid = start_id

    def emit(src, dst, size, d, gap, conn):
        nonlocal nid
        recs.append(TraceRecord(nid, ranks[src], ranks[dst], size, op, "other", layer, microbatch, tuple(d),
                                gap, conn=conn, collective="allreduce", collective_bytes=size_bytes))
        nid += 1
        return nid - 1

    for c, part in enumerate(chunk_sizes(size_bytes, channels)):
        tree = double_btree(n, c % 2)
        root = next(r for r, (u, _ch) in tree.items() if u == -1)
        conn = _conn(conn_base, c)
        order = []                           # positions, children before parents
        stack = [(root, False)]
        while stack:
            r, seen = stack.pop()
            if seen:
                order.append(r)
                continue
            stack.append((r, True))
            stack.extend((ch, False) for ch in tree[r][1])
        for size in chunk_sizes(part, -(-part // chunk_bytes)):
            up: dict[int, int] = {}          # position -> id of its chunk going up
            for r in order:
                parent, children = tree[r]
                if parent == -1:
                    continue
                if children:                 # reduce: forward once every child's chunk is in
                    up[r] = emit(r, parent, size, [up[ch] for ch in children], gap_ps, conn)
                else:                        # a leaf starts the chunk
                    d = _first_deps(deps, ranks[r])
                    up[r] = emit(r, parent, size, d, gap_ps if d else 0, conn)
            down: dict[int, int] = {}        # position -> id of the reduced chunk coming down into it
            for r in reversed(order):
                parent, children = tree[r]
                d = [up[ch] for ch in children] if parent == -1 else [down[r]]
                for ch in children:
                    down[ch] = emit(r, ch, size, d, gap_ps, conn)
    return recs


def send_recv(ranks, size_bytes: int, op: str = "sendrecv", start_id: int = 0, deps=(),
              layer: int = -1, microbatch: int = -1, gap_ps: int = 0, *, channels: int = 1,
              conn_base: int = -1) -> list[TraceRecord]:
    """``ranks[0] -> ranks[1]``: ``size_bytes`` in one message per channel (``gap_ps`` after its deps)."""
    src, dst = _check(ranks, size_bytes, 2, 2)
    _check_channels(channels, conn_base)
    d = _first_deps(deps, src)
    out = []
    for c, part in enumerate(chunk_sizes(size_bytes, channels)):
        if part:
            out.append(TraceRecord(start_id + len(out), src, dst, part, op, "other", layer, microbatch, d,
                                   gap_ps if d else 0, conn=_conn(conn_base, c), collective="sendrecv",
                                   collective_bytes=size_bytes))
    return out


def all_to_all(ranks, size_bytes: int, op: str = "all_to_all", start_id: int = 0, deps=(),
               layer: int = -1, microbatch: int = -1, gap_ps: int = 0, *, channels: int = 1,
               conn_base: int = -1) -> list[TraceRecord]:
    """Every rank sends chunk j of its ``size_bytes`` buffer to ``ranks[j]`` (``n (n - 1)`` messages per
    channel, each chunk split over the channels); rank i visits its peers in the staggered order
    ``(i + k) mod n``, k = 1 .. n - 1."""
    ranks = _check(ranks, size_bytes)
    _check_channels(channels, conn_base)
    n = len(ranks)
    sizes = chunk_sizes(size_bytes, n)
    recs, nid = [], start_id
    for i, src in enumerate(ranks):
        d = _first_deps(deps, src)
        for k in range(1, n):
            j = (i + k) % n
            for c, part in enumerate(chunk_sizes(sizes[j], channels)):
                if part == 0:
                    continue
                recs.append(TraceRecord(nid, src, ranks[j], part, op, "other", layer, microbatch, d,
                                        gap_ps if d else 0, conn=_conn(conn_base, c), collective="all_to_all",
                                        collective_bytes=size_bytes))
                nid += 1
    if not recs:
        raise ConfigError(f"{size_bytes} B over {n} ranks gives no messages (allowed: at least {n} B)", field="size")
    return recs


GENERATORS = {"allreduce": ring_all_reduce, "reduce_scatter": ring_reduce_scatter,
              "all_gather": ring_all_gather, "all_to_all": all_to_all, "sendrecv": send_recv}


def last_messages(records: Sequence[TraceRecord]) -> dict[int, tuple[int, ...]]:
    """rank -> ids a follow-up collective on that rank waits for: the messages into the rank that
    no record of ``records`` depends on (the ends of the chains through it: the last ring step of
    every channel, every all-to-all message into it), in record order; for a rank that only sends,
    the last message it sends."""
    needed = {d for r in records for d in r.deps}
    ends: dict[int, list[int]] = {}
    last_out: dict[int, int] = {}
    for r in records:
        if r.id not in needed:
            ends.setdefault(r.dst, []).append(r.id)
        last_out[r.src] = r.id
    return {rank: (tuple(ends[rank]) if rank in ends else (last_out[rank],)) for rank in set(ends) | set(last_out)}


def sequence(kind: str, ranks, size_bytes: int, repeat: int = 1, op: str | None = None, start_id: int = 0,
             deps=(), layer: int = -1, microbatch: int = -1, gap_ps: int = 0, *, channels: int = 1,
             conn_base: int = 0, algorithm: str = "ring", chunk_bytes: int = 512 * 1024) -> list[TraceRecord]:
    """``repeat`` back-to-back collectives of ``kind``; op names ``OP.0, OP.1, ...`` (just ``OP`` if
    ``repeat == 1``); each one's first messages from a rank wait for :func:`last_messages` of the
    previous one on that rank. Channel ``c`` of every repeat sends on connection ``conn_base + c``
    (default ``conn_base = 0``: persistent connections, as NCCL keeps them; -1: fresh queue pairs).
    ``algorithm: tree`` (all-reduce only) uses :func:`tree_all_reduce` with ``chunk_bytes``."""
    if kind not in GENERATORS:
        raise ConfigError(f"unknown collective {kind!r} (allowed: {', '.join(KINDS)})", field="kind")
    if algorithm not in ALGORITHMS or (algorithm == "tree" and kind != "allreduce"):
        raise ConfigError(f"got {algorithm!r} for {kind} (allowed: ring; tree for allreduce)", field="algorithm")
    gen = GENERATORS[kind]
    if algorithm == "tree":
        def gen(*a, **kw):
            return tree_all_reduce(*a, chunk_bytes=chunk_bytes, **kw)
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise ConfigError(f"got {repeat!r} (allowed: an integer >= 1)", field="repeat")
    check_size(kind, len(ranks), size_bytes, repeat, channels, algorithm, chunk_bytes, field="ranks")
    op = op or kind
    recs: list[TraceRecord] = []
    nid = start_id
    for j in range(repeat):
        part = gen(ranks, size_bytes, op if repeat == 1 else f"{op}.{j}", nid, deps, layer, microbatch, gap_ps,
                   channels=channels, conn_base=conn_base)
        recs.extend(part)
        nid += len(part)
        deps = last_messages(part)
    return recs


def compose(parts: Sequence[Sequence[TraceRecord]], source: str = "<collectives>",
            connections: str = "separate") -> Trace:
    """One checked :class:`Trace` of several record lists, in order.

    If the ids are already unique across ``parts`` they are kept (deps may then point into other
    parts). Otherwise every part is renumbered to consecutive ids after the previous part; a dep on
    an id of the same part follows the renumbering, a dep on an id not in the part refers to the
    latest earlier part that has that id.

    ``connections``: ``"separate"`` (default) gives each part connections of its own, as separate
    communicators (an EP all-to-all and a DP all-reduce) have their own queue pairs: the ``conn``
    values >= 0 of a part are shifted past every earlier part's; ``"shared"`` keeps them as they
    are, for parts that are steps of one communicator (per-layer gradient all-reduces of one DP
    group: with "separate" each would open new queue pairs, new ECMP paths and a cold RTT
    estimate).
    """
    if connections not in ("separate", "shared"):
        raise ConfigError(f"got {connections!r} (allowed: separate, shared)", field="connections")
    parts = [list(p) for p in parts]
    if connections == "separate":
        shifted, base = [], 0
        for p in parts:
            conns = [r.conn for r in p if r.conn >= 0]
            shifted.append([replace(r, conn=r.conn + base) if r.conn >= 0 and base else r for r in p])
            if conns:
                if base + max(conns) > INT64_MAX:
                    raise ConfigError(f"shifting a part's connections past the earlier parts' gives conn "
                                      f"{base + max(conns)} (allowed: at most {INT64_MAX}; smaller conn ids, "
                                      "or connections='shared')", field="connections")
                base += max(conns) + 1
        parts = shifted
    ids = [r.id for p in parts for r in p]
    if len(set(ids)) == len(ids):
        records = [r for p in parts for r in p]
    else:
        records, maps, nid = [], [], 0
        for p in parts:
            m = {}
            for r in p:
                if r.id in m:
                    raise ConfigError(f"message id {r.id} appears twice in one part", source=source)
                m[r.id] = nid
                nid += 1
            for r in p:
                new_deps = []
                for d in r.deps:
                    if d in m:
                        new_deps.append(m[d])
                        continue
                    for earlier in reversed(maps):
                        if d in earlier:
                            new_deps.append(earlier[d])
                            break
                    else:
                        raise ConfigError(f"message {r.id} depends on unknown message {d}", source=source)
                records.append(replace(r, id=m[r.id], deps=tuple(new_deps)))   # every other field kept
            maps.append(m)
    return check_trace(Trace(records, source, [("row", i) for i in range(len(records))]))


#: the most GPUs a generated collective may span (``--ranks``), checked before the list is built
MAX_RANKS = 1 << 20
#: the most messages one generated collective sequence may have (about 300 B each in memory)
MAX_MESSAGES = 20_000_000


def message_bound(kind: str, nranks: int, size_bytes: int, repeat: int = 1, channels: int = 1,
                  algorithm: str = "ring", chunk_bytes: int = 512 * 1024) -> int:
    """An upper bound on the messages :func:`sequence` generates (cheap: nothing is built).

    >>> message_bound("allreduce", 8, 1 << 20), message_bound("all_to_all", 4, 1 << 20, channels=2)
    (112, 24)
    """
    n = max(int(nranks), 0)
    ch = max(int(channels), 1)
    if kind == "sendrecv":
        per = ch
    elif kind == "all_to_all":
        per = n * max(n - 1, 0) * ch
    elif algorithm == "tree":
        per = 2 * max(n - 1, 0) * ch * max(-(-int(size_bytes) // ch // max(int(chunk_bytes), 1)), 1)
    else:
        steps = 2 * (n - 1) if kind == "allreduce" else n - 1
        per = max(steps, 0) * n * ch
    return per * max(int(repeat), 1)


def check_size(kind: str, nranks: int, size_bytes: int, repeat: int = 1, channels: int = 1,
               algorithm: str = "ring", chunk_bytes: int = 512 * 1024, field: str = "--ranks") -> None:
    """Refuse (ConfigError, exit 2) a collective of more than :data:`MAX_MESSAGES` messages."""
    try:
        bound = message_bound(kind, nranks, size_bytes, repeat, channels, algorithm, chunk_bytes)
    except (TypeError, ValueError):
        return                     # (bad values are named by the generators' own checks)
    if bound > MAX_MESSAGES:
        raise ConfigError(f"{kind} over {nranks} ranks x {channels} channel(s) x {repeat} repeat(s) gives up to "
                          f"{bound:,} messages (allowed: at most {MAX_MESSAGES:,} in one trace; use fewer ranks, "
                          "channels or repeats)", field=field)


def parse_ranks(text: str) -> list[int]:
    """``"0-7"``, ``"0,2,4-6"`` -> list of GPU ids (in the order given; ranges inclusive; at most
    :data:`MAX_RANKS`, counted before the list is built)."""
    out: list[int] = []
    s = str(text).strip()
    if not s:
        raise ConfigError("empty (allowed: ranges and comma lists such as 0-7 or 0,2,4-6)", field="--ranks")
    for part in s.split(","):
        p = part.strip()
        try:
            if "-" in p[1:]:
                a, b = p.split("-", 1) if not p.startswith("-") else (None, None)
                lo, hi = int(a), int(b)
                if lo < 0 or hi < lo:
                    raise ValueError
                if len(out) + hi - lo + 1 > MAX_RANKS:
                    raise ConfigError(f"{s!r} names more than {MAX_RANKS:,} GPUs (allowed: at most {MAX_RANKS:,})",
                                      field="--ranks")
                out.extend(range(lo, hi + 1))
            else:
                v = int(p)
                if v < 0:
                    raise ValueError
                out.append(v)
        except (ValueError, TypeError):
            raise ConfigError(f"cannot read {p!r} in {s!r} (allowed: GPU ids >= 0, ranges a-b with a <= b, "
                              "separated by commas, e.g. 0-7 or 0,2,4-6)", field="--ranks") from None
    if len(set(out)) != len(out):
        raise ConfigError(f"{s!r} repeats a GPU (allowed: distinct GPU ids)", field="--ranks")
    return out
