"""Built-in traffic patterns -> a :class:`~fabricsim.flows.table.MessageTable`. One generator per pattern name.

Every pattern builds its table from numpy columns (no per-message Python object): an 8,192-GPU
all-to-all (67 M messages) is a few int64 columns, the constant ones stored once. The table is a
``Sequence`` of :class:`Message`, so code written for a list of messages works unchanged.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from ..errors import TrafficError
from ..registry import Registry
from ..units import INT64_MAX  # the largest size (bytes) or time (ps) a message column holds
from ..flows.table import MessageTable
from .message import Message

PATTERNS: Registry = Registry("traffic pattern")



def generate(cfg, topo, streams, source: str = "<scenario>", resolve=None) -> MessageTable:
    """Messages of a traffic section on a topology, as a :class:`MessageTable` (a ``Sequence``
    of :class:`Message`). Raises TrafficError for misfits."""
    table = PATTERNS.get(cfg.pattern)(cfg, topo, streams, source, resolve)
    check_time_range(table, topo, source, "traffic.path" if "path" in type(cfg).model_fields else "traffic.message_size")
    return table


#: the most simulated time the messages may stand for, in ps (about 13 days): an eighth of the
#: int64 picosecond clock, leaving room for headers (at most 4 x mtu), hops and rounding in the
#: engines' and the lower bound's arithmetic
TIME_BUDGET_PS = INT64_MAX // 8


def check_time_range(table, topo, source: str, field: str) -> None:
    """Refuse messages whose times cannot be held by a 64-bit picosecond clock: one message's
    ``start + gap + size x 8 / rate`` on the topology's slowest link, or the whole list's latest
    start plus every gap plus every byte sent one after the other on that link, beyond
    :data:`TIME_BUDGET_PS`. Real workloads are many orders of magnitude below; sizes of 10**18
    bytes would otherwise overflow deep inside a run, after some results were written."""
    n = len(table)
    if not n:
        return
    rates = [d["rate_bps"] for *_, d in topo.graph.edges(keys=True, data=True)]
    if not rates:
        return
    slowest = min(rates)
    per_byte = 8e12 / slowest
    cols = [np.broadcast_to(np.asarray(getattr(table, c)), (n,)) for c in ("id", "size_bytes", "start_ps", "gap_ps")]
    worst_t, worst_row, latest, gaps, sends, total_bytes = -1.0, 0, 0.0, 0.0, 0.0, 0.0
    chunk = 1 << 20                     # bounded memory on tables of 10**8 messages
    for lo in range(0, n, chunk):
        size, start, gap = (c[lo:lo + chunk].astype(np.float64) for c in cols[1:])
        send = size * per_byte
        each = start + gap + send
        k = int(np.argmax(each))
        if each[k] > worst_t:
            worst_t, worst_row = float(each[k]), lo + k
        latest = max(latest, float(start.max()))
        gaps += float(gap.sum())
        sends += float(send.sum())
        total_bytes += float(size.sum())
    from .. import units
    allowed = (f"(allowed: at most {TIME_BUDGET_PS:.3g} ps = {units.format_time(TIME_BUDGET_PS)}, an eighth of a "
               f"64-bit picosecond clock)")
    if worst_t > TIME_BUDGET_PS:
        r = worst_row
        raise TrafficError(
            f"message {int(cols[0][r])} ({int(cols[1][r])} B, start {int(cols[2][r])} ps, gap {int(cols[3][r])} ps) "
            f"takes {worst_t:.3g} ps on the slowest link ({units.format_rate(slowest)}) {allowed}",
            source=source, field=field)
    total = latest + gaps + sends
    if total > TIME_BUDGET_PS:
        raise TrafficError(
            f"{n} messages of {total_bytes:.3g} B in all take {total:.3g} ps one after the other on the slowest "
            f"link ({units.format_rate(slowest)}) {allowed}", source=source, field=field)


@PATTERNS.register("permutation")
def permutation(cfg, topo, streams, source, resolve):
    """Each host sends to one other host, each host receives once (seeded random derangement)."""
    H = topo.num_hosts
    if H < 2:
        raise TrafficError("a permutation needs at least 2 hosts", source=source, field="traffic.pattern")
    rng = streams.py("traffic.permutation")
    group = {h: topo.edge_switch(h) for h in topo.hosts}
    if cfg.locality == "cross_leaf":
        sizes: dict[int, int] = {}
        for h in topo.hosts:
            sizes[group[h]] = sizes.get(group[h], 0) + 1
        if max(sizes.values()) * 2 > H:
            raise TrafficError("cross_leaf needs every leaf to hold at most half of the hosts",
                               source=source, field="traffic.locality")
        bad = lambda i, j: group[i] == group[j]  # noqa: E731
    else:
        bad = lambda i, j: i == j  # noqa: E731
    perm = list(topo.hosts)
    rng.shuffle(perm)
    if not _repair_permutation(perm, bad, rng):  # pragma: no cover - only for degenerate inputs
        raise TrafficError("could not build a permutation with that locality", source=source,
                           field="traffic.locality")
    src = np.asarray(list(topo.hosts), dtype=np.int64)
    return MessageTable.from_arrays(src=src, dst=np.asarray(perm, dtype=np.int64)[src],
                                    size_bytes=cfg.message_size, start_ps=cfg.start, qps=cfg.qps_per_message)


def _repair_permutation(perm: list, bad, rng) -> bool:
    """Repair the forbidden pairs ``bad(i, perm[i])`` of a shuffled permutation in place by random
    swaps that fix both ends (terminates quickly in practice); False if it gave up."""
    H = len(perm)
    for _ in range(100 * H):
        wrong = [i for i in range(H) if bad(i, perm[i])]
        if not wrong:
            return True
        for i in wrong:
            if not bad(i, perm[i]):
                continue
            for _try in range(4 * H):
                j = rng.randrange(H)
                if not bad(i, perm[j]) and not bad(j, perm[i]):
                    perm[i], perm[j] = perm[j], perm[i]
                    break
    return False


@PATTERNS.register("all_to_all")
def all_to_all(cfg, topo, streams, source, resolve):
    """Every ordered pair of distinct hosts exchanges one message."""
    H = topo.num_hosts
    if H < 2:
        raise TrafficError("all_to_all needs at least 2 hosts", source=source, field="traffic.pattern")
    # sender s sends to (s + k) mod H for k = 1..H-1, senders in host order: built in place
    # (src, dst and id are the only per-message columns: 3 x 8 B per message)
    hosts = np.asarray(list(topo.hosts), dtype=np.int64)
    src = np.repeat(hosts, H - 1)
    dst = np.tile(np.arange(1, H, dtype=np.int64), len(hosts))
    dst += src
    dst %= H
    return MessageTable.from_arrays(src=src, dst=dst, size_bytes=cfg.message_size, start_ps=cfg.start,
                                    qps=cfg.qps_per_message)


@PATTERNS.register("incast")
def incast(cfg, topo, streams, source, resolve):
    """``senders`` hosts (seeded random choice among the others) send one message each to ``receiver``."""
    H = topo.num_hosts
    if cfg.receiver >= H:
        raise TrafficError(f"host {cfg.receiver} is not in the topology (allowed: 0..{H - 1})",
                           source=source, field="traffic.receiver")
    if cfg.senders > H - 1:
        raise TrafficError(f"{cfg.senders} senders but only {H - 1} other hosts (allowed: 1..{H - 1})",
                           source=source, field="traffic.senders")
    others = [h for h in topo.hosts if h != cfg.receiver]
    chosen = sorted(streams.py("traffic.incast").sample(others, cfg.senders))
    return MessageTable.from_arrays(src=np.asarray(chosen, dtype=np.int64), dst=cfg.receiver,
                                    size_bytes=cfg.message_size, start_ps=cfg.start, qps=cfg.qps_per_message)


def _time_col(row, names, source, line, units_parse):
    from .. import units
    for n in names:
        v = row.get(n)
        if v not in (None, ""):
            scale = {"start_ps": 1, "start_ns": 10**3, "start_us": 10**6, "gap_ps": 1, "gap_ns": 10**3,
                     "gap_us": 10**6}.get(n)
            try:
                if scale:
                    try:
                        x = int(v.strip()) * scale     # exact for whole numbers of any size
                    except ValueError:
                        x = float(v) * scale
                    if not math.isfinite(x) or x < 0:
                        raise ValueError("must be a finite number >= 0")
                    x = int(round(x))
                else:
                    x = units.parse_time(v)
            except ValueError as exc:
                raise TrafficError(f"bad time {v!r}: {exc}", source=source, field=n, line=line) from None
            if x > INT64_MAX:
                raise TrafficError(f"got {v} = {x} ps (allowed: at most {INT64_MAX} ps, a 64-bit integer)",
                                   source=source, field=n, line=line)
            return x
    return 0


def _input_file(cfg, resolve, source, what: str) -> Path:
    """The file named by ``traffic.path`` (relative to the scenario), or a TrafficError."""
    path = Path(resolve(cfg.path) if resolve else cfg.path)
    if not path.is_file():
        raise TrafficError(f"{what} {cfg.path!r} not found (looked at {path})", source=source,
                           field="traffic.path")
    return path


@PATTERNS.register("csv")
def csv_messages(cfg, topo, streams, source, resolve):
    """Read a CSV message list (see :class:`fabricsim.config.traffic.CsvTraffic`)."""
    from .. import units
    path = _input_file(cfg, resolve, source, "message list")
    src_name = str(path)
    H = topo.num_hosts
    out: list[Message] = []
    ids = set()
    lines: dict[int, int] = {}  # message id -> CSV line
    with open(path, newline="", encoding="utf-8-sig") as fh:
        reader = csv.DictReader(fh)
        try:
            cols = set(reader.fieldnames or [])
        except (csv.Error, UnicodeDecodeError) as exc:
            raise TrafficError(f"not valid CSV: {exc}", source=src_name, line=1) from None
        need = [("src",), ("dst",), ("size_bytes", "size")]
        for alts in need:
            if not cols & set(alts):
                raise TrafficError(f"missing column {' or '.join(alts)} (have: {', '.join(sorted(cols)) or 'none'})",
                                   source=src_name, field=alts[0], line=1)
        for row in _rows(reader, src_name):
            lineno = reader.line_num
            if None in row:
                raise TrafficError(f"{len(row[None])} more values than columns ({len(reader.fieldnames)}) "
                                   f"(allowed: one value per column)", source=src_name, line=lineno)
            def req_int(name, lo=0, hi=INT64_MAX):
                v = row.get(name)
                try:
                    x = int(v)
                except (TypeError, ValueError):
                    raise TrafficError(f"expected an integer, got {v!r}", source=src_name, field=name,
                                       line=lineno) from None
                if x < lo or (hi is not None and x > hi):
                    allowed = f"{lo}..{hi}" if hi is not None else f">= {lo}"
                    raise TrafficError(f"{x} out of range (allowed: {allowed})", source=src_name, field=name,
                                       line=lineno)
                return x
            s = req_int("src", 0, H - 1)
            d = req_int("dst", 0, H - 1)
            if s == d:
                raise TrafficError(f"src and dst are both {s}", source=src_name, field="dst", line=lineno)
            if row.get("size_bytes") not in (None, ""):
                size = req_int("size_bytes", 1)
            else:
                try:
                    size = units.parse_size(row.get("size"))
                except ValueError as exc:
                    raise TrafficError(str(exc), source=src_name, field="size", line=lineno) from None
                if size <= 0:
                    raise TrafficError("size must be > 0", source=src_name, field="size", line=lineno)
                if size > INT64_MAX:
                    raise TrafficError(f"got {row.get('size')} = {size} B (allowed: at most {INT64_MAX} B, a "
                                       f"64-bit integer)", source=src_name, field="size", line=lineno)
            start = _time_col(row, ("start_ps", "start_ns", "start_us", "start"), src_name, lineno, None)
            gap = _time_col(row, ("gap_ps", "gap_ns", "gap_us", "gap"), src_name, lineno, None)
            mid = req_int("id", 0) if row.get("id") not in (None, "") else len(out)
            if mid in ids:
                raise TrafficError(f"duplicate message id {mid}", source=src_name, field="id", line=lineno)
            ids.add(mid)
            lines[mid] = lineno
            qps = req_int("qps", 1, 4096) if row.get("qps") not in (None, "") else cfg.qps_per_message
            deps_raw = (row.get("deps") or "").strip()
            try:
                deps = tuple(int(x) for x in deps_raw.split(";") if x.strip()) if deps_raw else ()
                if any(not 0 <= x <= INT64_MAX for x in deps):
                    raise ValueError
            except ValueError:
                raise TrafficError(f"deps must be message ids separated by ';', got {deps_raw!r}",
                                   source=src_name, field="deps", line=lineno) from None
            conn = req_int("conn", -1) if row.get("conn") not in (None, "") else -1
            out.append(Message(mid, s, d, size, start, cfg.qps_per_connection if conn >= 0 else qps, deps, gap,
                               conn=conn))
    if not out:
        raise TrafficError("the message list is empty", source=src_name, line=1)
    for m in out:
        for dep in m.deps:
            if dep == m.id:
                raise TrafficError(f"message {m.id} depends on itself", source=src_name, field="deps",
                                   line=lines[m.id])
            if dep not in ids:
                raise TrafficError(f"message {m.id} depends on unknown message {dep} (allowed: ids in the id column)",
                                   source=src_name, field="deps", line=lines[m.id])
    _check_acyclic(out, src_name, lines)
    return MessageTable.from_messages(out)


@PATTERNS.register("trace")
def trace_messages(cfg, topo, streams, source, resolve):
    """Replay a v1 trace (see :class:`fabricsim.config.traffic.TraceTraffic`, docs/traces.md)."""
    from ..traces.io import read_trace_table
    path = _input_file(cfg, resolve, source, "trace")
    table = read_trace_table(path, num_hosts=topo.num_hosts, qps=cfg.qps_per_message)
    return _with_connection_qps(table, cfg.qps_per_connection)


def _with_connection_qps(msgs, qps_per_connection: int) -> MessageTable:
    """``msgs`` (a MessageTable or a list of Message) with ``qps = qps_per_connection`` on every
    message sent on a connection (``conn >= 0``); the others keep their own ``qps``."""
    t = MessageTable.from_messages(msgs)
    on_conn = t.conn >= 0
    if not np.any(on_conn & (t.qps != qps_per_connection)):
        return t
    return t.with_columns(qps=np.where(on_conn, np.int64(qps_per_connection), t.qps))


def _rows(reader, source):
    from ..traces.io import csv_rows
    return csv_rows(reader, lambda msg, line: TrafficError(msg, source=source, line=line))


def _check_acyclic(msgs, source, lines=None):
    import networkx as nx
    g = nx.DiGraph()
    g.add_nodes_from(m.id for m in msgs)
    g.add_edges_from((d, m.id) for m in msgs for d in m.deps)
    if not nx.is_directed_acyclic_graph(g):
        cyc = [e[0] for e in nx.find_cycle(g)]
        first = min(cyc, key=lambda i: (lines or {}).get(i, 0))
        raise TrafficError(f"dependency cycle through messages {' -> '.join(map(str, cyc + cyc[:1]))} "
                           "(allowed: deps that form no cycle)", source=source, field="deps",
                           line=(lines or {}).get(first))
