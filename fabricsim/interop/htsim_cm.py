"""htsim connection matrices (``.cm``) to and from fabricsim traces.

The format is the one ``ConnectionMatrix::load(istream&)`` parses in Broadcom/csg-htsim
(``sim/datacenter/connection_matrix.cpp``) and its generators write
(``sim/datacenter/connection_matrices/gen_*.py``)::

    Nodes 16
    Connections 3
    Triggers 1
    0->5 id 1 start 0 size 2000000 send_done_trigger 1
    3->5 id 2 start 0 size 2000000 send_done_trigger 1
    5->9 id 3 trigger 1 size 4000000
    trigger id 1 barrier count 2

- Header lines ``Nodes N``, ``Connections C``, ``Triggers T``, ``Failures F`` come first; the
  counts must match the lines that follow (htsim exits otherwise). ``#`` starts a comment line.
- A connection ``SRC->DST`` takes ``size B`` (bytes, a C ``int``), either ``start T`` or
  ``trigger ID``, and optionally ``id F`` (flow id, >= 1; required for a triggered connection),
  ``send_done_trigger ID``, ``recv_done_trigger ID``, ``prio P`` and the flag ``addon``.
- **``start`` is in picoseconds**: the loader stores the number as is (``c->start = start; //
  start is in picoseconds already``) and ``main_roce``, ``main_eqds``, ``main_ndp``, ``main_hpcc``
  pass it to ``connect()`` as a ``simtime_picosec``; ``gen_serialn_alltoall.py`` writes
  ``int(us * 1000000)``. (Two legacy paths disagree: ``ConnectionMatrix::save`` writes
  microseconds with ``%f`` and ``main_swift`` applies ``timeFromUs``; neither is used here.)
  htsim parses the number with ``stof``, a 32-bit float: a start time above 2**24 ps (16.8 us)
  that is not a multiple of a power of two is rounded by htsim (:attr:`CmExport.inexact_starts`
  counts them). This module reads the decimal exactly and truncates it to whole picoseconds, as
  htsim's conversion to the integer ``simtime_picosec`` does.
- ``trigger id ID oneshot | multishot | barrier count K``: a connection listing
  ``send_done_trigger ID`` activates the trigger when its sender has every byte acknowledged,
  ``recv_done_trigger ID`` when its receiver has every byte (only ``main_eqds`` and ``main_ndp``
  bind it). A oneshot trigger starts all its connections on its (single) activation; a barrier
  starts them after K activations; a multishot trigger starts its next connection (file order) at
  each activation.

Mapping to a trace (docs/traces.md): one message per connection, ``id`` = htsim flow id - 1
(htsim forbids 0; a connection without an id counts as id = its 1-based position among the
connections), ``start_ps`` = ``start``, ``deps`` = the connections that activate its trigger
(oneshot: the one activator; barrier: all K), ``op`` = the file's stem, ``phase`` ``other``.
``prio``, ``addon`` and ``failure`` lines have no trace column: they are counted in
:attr:`CmImport.ignored`. A fabricsim dependency ends when the last byte reaches the destination
(``end_ps``), which is htsim's ``recv_done``; ``send_done`` adds the ACK's return trip. Both map
to ``deps``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path

import numpy as np

from ..errors import TraceError
from ..units import INT64_MAX
from ..traces.schema import Trace, TraceRecord, check_trace

#: the largest ``size`` / ``id`` htsim reads (``stoi`` into an ``int``)
HTSIM_INT_MAX = 2**31 - 1
HEADER_KEYS = ("Nodes", "Connections", "Triggers", "Failures")
CONNECTION_KEYS = ("start", "size", "id", "trigger", "send_done_trigger", "recv_done_trigger", "prio")
TRIGGER_TYPES = ("oneshot", "multishot", "barrier")
#: how a multishot trigger with several connections is imported: refused, or the i-th connection
#: waits for the i-th activating connection in file order (htsim: in the order they finish)
MULTISHOT_MODES = ("strict", "in-order")
#: which htsim trigger a dependency's connection activates on export
DONE_KINDS = ("send", "recv")


@dataclass(frozen=True)
class CmImport:
    """What :func:`read_cm` read: the trace, the matrix's node count, triggers, and how many
    dependencies came from each trigger kind; ``ignored``: tokens and lines without a trace
    column (``prio``, ``addon``, ``failure``) -> count."""

    trace: Trace
    nodes: int
    triggers: int
    send_done_deps: int = 0
    recv_done_deps: int = 0
    ignored: dict = field(default_factory=dict)


@dataclass(frozen=True)
class CmExport:
    """What :func:`write_cm` wrote. ``inexact_starts``: start times htsim's 32-bit float parse
    rounds; ``dropped_start_ps`` / ``dropped_gap_ps``: messages with dependencies whose
    ``start_ps`` / ``gap_ps`` were dropped (only with ``approximate=True``)."""

    path: Path | None
    nodes: int
    connections: int
    triggers: int
    inexact_starts: int = 0
    dropped_start_ps: int = 0
    dropped_gap_ps: int = 0


# ---------------------------------------------------------------------------------------------
# import


class _Reader:
    """Parses one file; every error names the file, line and field."""

    def __init__(self, source: str):
        self.source = source

    def err(self, line, column, message):
        return TraceError(message, source=self.source, column=column, line=line)

    def int_(self, text: str, line: int, column: str, minimum: int = 0, maximum: int | None = None) -> int:
        try:
            v = int(text)
        except ValueError:
            raise self.err(line, column, f"expected an integer, got {text!r}") from None
        if v < minimum:
            raise self.err(line, column, f"got {v} (allowed: {'> 0' if minimum == 1 else f'>= {minimum}'})")
        if maximum is not None and v > maximum:
            raise self.err(line, column, f"got {v} (allowed: at most {maximum}, htsim reads a C int)")
        return v

    def start_ps(self, text: str, line: int) -> int:
        try:
            d = Decimal(text)
        except InvalidOperation:
            raise self.err(line, "start", f"expected a number of picoseconds, got {text!r}") from None
        if not d.is_finite():
            raise self.err(line, "start", f"got {text!r} (allowed: a finite number of picoseconds >= 0)")
        if d < 0:
            raise self.err(line, "start", f"got {text} (allowed: >= 0 picoseconds)")
        if d > INT64_MAX:      # (before int(): 1e99999999 would take minutes to expand)
            raise self.err(line, "start", f"got {text} (allowed: at most {INT64_MAX} picoseconds, a 64-bit integer)")
        return int(d)   # truncation, as htsim's conversion to the integer simtime_picosec


def read_cm(path, op: str | None = None, multishot: str = "strict") -> CmImport:
    """Read an htsim connection matrix into a checked :class:`~fabricsim.traces.Trace`.

    Parameters
    ----------
    path:
        The ``.cm`` file.
    op:
        The ``op`` of every message (default: the file's stem).
    multishot:
        ``strict`` (default) refuses a multishot trigger with more than one connection to start
        (htsim starts them in the order its activators finish, which fixed dependencies cannot
        express); ``in-order`` makes the i-th waiting connection depend on the i-th activating one
        in file order (an approximation).

    Raises :class:`~fabricsim.errors.TraceError` (one line: file, line, field) for bad input.
    """
    path = Path(path)
    src = str(path)
    if multishot not in MULTISHOT_MODES:
        raise TraceError(f"got {multishot!r} (allowed: {', '.join(MULTISHOT_MODES)})", column="multishot")
    if not path.is_file():
        raise TraceError("connection matrix not found", source=src)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise TraceError(f"not valid UTF-8: {exc}", source=src) from None
    return parse_cm(text.splitlines(), src, op if op is not None else path.stem, multishot)


def parse_cm(lines, source: str = "<cm>", op: str = "htsim", multishot: str = "strict") -> CmImport:
    """:func:`read_cm` on the lines of a file already read."""
    rd = _Reader(source)
    header: dict[str, tuple[int, int]] = {}
    conns: list[dict] = []
    trig_defs: dict[int, dict] = {}
    failures: list[int] = []
    ignored = {"prio": 0, "addon": 0, "failure": 0}
    nodes = None
    for n, raw in enumerate(lines, 1):
        tok = raw.split()
        if not tok or tok[0].startswith("#"):
            continue
        head = tok[0]
        if head in HEADER_KEYS:
            if conns or trig_defs or failures:
                raise rd.err(n, head, "header line after the first connection, trigger or failure line "
                                      "(allowed: Nodes, Connections, Triggers, Failures before them)")
            if len(tok) != 2:
                raise rd.err(n, head, f"expected '{head} <count>', got {raw.strip()!r}")
            header[head] = (rd.int_(tok[1], n, head, minimum=1 if head == "Nodes" else 0), n)
            continue
        if "->" in head:
            if "Nodes" not in header:
                raise rd.err(n, "Nodes", "no 'Nodes N' header line before the first connection")
            nodes = header["Nodes"][0]
            conns.append(_connection(rd, tok, n, nodes, ignored))
        elif head == "trigger":
            t = _trigger(rd, tok, n)
            if t["id"] in trig_defs:
                raise rd.err(n, "id", f"trigger {t['id']} is defined twice (first at line {trig_defs[t['id']]['line']})")
            trig_defs[t["id"]] = t
        elif head == "failure":
            failures.append(n)
            ignored["failure"] += 1
        else:
            raise rd.err(n, None, f"unknown line starting {head!r} (allowed: Nodes, Connections, Triggers, "
                                  "Failures, SRC->DST ..., trigger ..., failure ..., # comment)")
    if "Nodes" not in header:
        raise rd.err(None, "Nodes", "no 'Nodes N' header line")
    nodes = header["Nodes"][0]
    for key, have in (("Connections", len(conns)), ("Triggers", len(trig_defs)), ("Failures", len(failures))):
        said, line = header.get(key, (0, None))
        if said != have:
            raise rd.err(line, key, f"the header says {said}{'' if line else ' (no header line)'}, "
                                    f"the file has {have} {key.lower()[:-1]} line{'s' if have != 1 else ''}")
    if not conns:
        raise rd.err(None, "Connections", "the matrix has no connections")
    deps, send_deps, recv_deps = _dependencies(rd, conns, trig_defs, multishot)
    records, where = [], []
    for k, c in enumerate(conns):
        tid = (c["id"] if c["id"] is not None else k + 1) - 1
        d = tuple((conns[j]["id"] if conns[j]["id"] is not None else j + 1) - 1 for j in deps[k])
        records.append(TraceRecord(tid, c["src"], c["dst"], c["size"], op, "other", deps=d,
                                   start_ps=c["start_ps"] if c["start_ps"] is not None else 0))
        where.append(("line", c["line"]))
    trace = check_trace(Trace(records, source, where), nodes)
    return CmImport(trace, nodes, len(trig_defs), send_deps, recv_deps, {k: v for k, v in ignored.items() if v})


def _connection(rd: _Reader, tok: list[str], n: int, nodes: int, ignored: dict) -> dict:
    s, _, d = tok[0].partition("->")
    c = {"line": n, "src": rd.int_(s, n, "src"), "dst": rd.int_(d, n, "dst"), "size": None, "start_ps": None,
         "id": None, "trigger": None, "send_done_trigger": None, "recv_done_trigger": None}
    for col in ("src", "dst"):
        if c[col] >= nodes:
            raise rd.err(n, col, f"node {c[col]} is not in the matrix (allowed: 0..{nodes - 1}, Nodes {nodes})")
    if c["src"] == c["dst"]:
        raise rd.err(n, "dst", f"src and dst are both {c['src']} (allowed: dst != src)")
    seen = set()
    i = 1
    while i < len(tok):
        key = tok[i]
        if key == "addon":
            ignored["addon"] += 1
            i += 1
            continue
        if key not in CONNECTION_KEYS:
            raise rd.err(n, key, f"unknown token {key!r} (allowed: {', '.join(CONNECTION_KEYS)}, addon)")
        if i + 1 >= len(tok):
            raise rd.err(n, key, f"'{key}' has no value")
        if key in seen:
            raise rd.err(n, key, f"'{key}' is given twice")
        seen.add(key)
        val = tok[i + 1]
        i += 2
        if key == "start":
            c["start_ps"] = rd.start_ps(val, n)
        elif key == "size":
            c["size"] = rd.int_(val, n, "size", minimum=1, maximum=HTSIM_INT_MAX)
        elif key == "prio":
            rd.int_(val, n, "prio", minimum=-HTSIM_INT_MAX - 1, maximum=HTSIM_INT_MAX)
            ignored["prio"] += 1
        else:   # id and trigger ids: >= 1 (htsim: "ID zero is not allowed")
            c[key] = rd.int_(val, n, key, minimum=1, maximum=HTSIM_INT_MAX)
    if c["size"] is None:
        raise rd.err(n, "size", "missing (every connection needs 'size B')")
    if c["start_ps"] is None and c["trigger"] is None:
        raise rd.err(n, "start", "no start method (allowed: 'start T' or 'trigger ID')")
    if c["start_ps"] is not None and c["trigger"] is not None:
        raise rd.err(n, "trigger", "both 'start' and 'trigger' given (allowed: one of them)")
    if c["trigger"] is not None and c["id"] is None:
        raise rd.err(n, "id", "a triggered connection needs 'id F' (htsim asserts a flow id)")
    return c


def _trigger(rd: _Reader, tok: list[str], n: int) -> dict:
    t = {"line": n, "id": None, "type": None, "count": 0}
    i = 1
    while i < len(tok):
        key = tok[i]
        if key in TRIGGER_TYPES:
            if t["type"] is not None:
                raise rd.err(n, "type", f"two trigger types ({t['type']}, {key}) (allowed: one of {', '.join(TRIGGER_TYPES)})")
            t["type"] = key
            i += 1
        elif key in ("id", "count"):
            if i + 1 >= len(tok):
                raise rd.err(n, key, f"'{key}' has no value")
            t[key] = rd.int_(tok[i + 1], n, key, minimum=1 if key == "id" else 0, maximum=HTSIM_INT_MAX)
            i += 2
        else:
            raise rd.err(n, key, f"unknown token {key!r} (allowed: id, count, {', '.join(TRIGGER_TYPES)})")
    if t["id"] is None:
        raise rd.err(n, "id", "trigger with no id (allowed: 'trigger id ID TYPE')")
    if t["type"] is None:
        raise rd.err(n, "type", f"trigger {t['id']} has no type (allowed: {', '.join(TRIGGER_TYPES)})")
    if t["type"] == "barrier" and t["count"] < 1:
        raise rd.err(n, "count", f"barrier trigger {t['id']} needs 'count K' with K >= 1")
    return t


def _dependencies(rd: _Reader, conns: list[dict], trig_defs: dict, multishot: str):
    """Per connection, the connections (indices) it waits for; and how many dependencies came
    from send_done / recv_done triggers."""
    acts: dict[int, list[tuple[int, str]]] = {}
    targets: dict[int, list[int]] = {}
    for k, c in enumerate(conns):
        for kind in ("send_done_trigger", "recv_done_trigger"):
            t = c[kind]
            if t is not None:
                if t not in trig_defs:
                    raise rd.err(c["line"], kind, f"trigger {t} is not defined (allowed: ids of 'trigger id ID ...' lines)")
                acts.setdefault(t, []).append((k, kind))
        t = c["trigger"]
        if t is not None:
            if t not in trig_defs:
                raise rd.err(c["line"], "trigger", f"trigger {t} is not defined (allowed: ids of 'trigger id ID ...' lines)")
            targets.setdefault(t, []).append(k)
    deps: list[tuple[int, ...]] = [()] * len(conns)
    counts = {"send_done_trigger": 0, "recv_done_trigger": 0}
    for tid, t in trig_defs.items():
        a, tg = acts.get(tid, []), targets.get(tid, [])
        n, line = len(a), t["line"]
        if t["type"] == "barrier" and t["count"] < n:
            raise rd.err(line, "count", f"barrier trigger {tid} has count {t['count']} but {n} activating connections "
                                        "(htsim asserts on the extra activations; allowed: count = activations)")
        if not tg:
            continue
        where = ", ".join(f"line {conns[k]['line']}" for k, _ in a)
        if n == 0:
            raise rd.err(line, "id", f"trigger {tid} is never activated (no connection has send_done_trigger or "
                                     f"recv_done_trigger {tid}): its {len(tg)} connection(s) would never start")
        if t["type"] == "oneshot":
            if n > 1:
                raise rd.err(line, "type", f"oneshot trigger {tid} is activated by {n} connections ({where}); htsim fires "
                                           f"it once and asserts on the next (allowed: one activator, or 'barrier count {n}')")
            pairs = [(k, (a[0],)) for k in tg]
        elif t["type"] == "barrier":
            if t["count"] > n:
                raise rd.err(line, "count", f"barrier trigger {tid} waits for {t['count']} activations but only {n} "
                                            f"connections activate it: its connections would never start")
            pairs = [(k, tuple(a)) for k in tg]
        else:
            if n < len(tg):
                raise rd.err(line, "type", f"multishot trigger {tid} starts one connection per activation: {len(tg)} "
                                           f"connections wait but only {n} activate it")
            if (n > 1 or len(tg) > 1) and multishot == "strict":
                raise rd.err(line, "type", f"multishot trigger {tid} starts its {len(tg)} connections in the order its {n} "
                                           "activators finish, which fixed dependencies cannot express (allowed: "
                                           "--multishot in-order: the i-th waits for the i-th activator in file order)")
            pairs = [(k, (a[i],)) for i, k in enumerate(tg)]
        for k, acts_k in pairs:
            seen = []
            for j, kind in acts_k:
                if j not in seen:
                    seen.append(j)
                counts[kind] += 1
            deps[k] = tuple(seen)
    return deps, counts["send_done_trigger"], counts["recv_done_trigger"]


# ---------------------------------------------------------------------------------------------
# export


def format_cm(messages, nodes: int | None = None, source: str | None = None, done: str = "send",
              approximate: bool = False) -> tuple[str, CmExport]:
    """The connection matrix of ``messages`` (a :class:`~fabricsim.traces.Trace` or a
    :class:`~fabricsim.flows.MessageTable`) as text, and what it holds.

    One connection per message in table order: ``SRC->DST id (ID + 1) start START_PS size
    SIZE_BYTES``; a message with dependencies gets ``trigger T`` instead of ``start``, where all
    messages with the same set of dependencies share trigger T (``oneshot`` for one dependency,
    ``barrier count K`` for K), and each dependency gets ``{done}_done_trigger T``
    (``done="send"``: every htsim main binding triggers supports it; ``"recv"``: the exact
    fabricsim meaning, bound by ``main_eqds`` and ``main_ndp`` only). Not expressible, and refused
    with a :class:`~fabricsim.errors.TraceError`: a message that is a dependency of two different
    dependency sets (an htsim connection activates one trigger when done), sizes or ids beyond a
    C ``int``, GPU ids >= ``nodes``; and, unless ``approximate``, ``start_ps`` or ``gap_ps`` > 0
    on a message with dependencies (htsim starts a triggered connection when the trigger fires):
    ``approximate=True`` drops them and counts them. ``qps``, ``conn`` and the tags are not
    written. ``nodes`` default: the largest GPU id + 1; ``source`` (default: the trace's file)
    names the input in errors.
    """
    from ..flows.table import MessageTable
    if done not in DONE_KINDS:
        raise TraceError(f"got {done!r} (allowed: {', '.join(DONE_KINDS)})", column="done")
    if source is None:
        source = messages.source if isinstance(messages, Trace) else "<messages>"
    table = messages.to_table() if isinstance(messages, Trace) else messages
    if not isinstance(table, MessageTable):
        table = MessageTable.from_messages(table)
    n = len(table)
    if n == 0:
        raise TraceError("no messages to export", source=source)

    def err(i, column, message):
        return TraceError(f"message {int(table.id[i])}: {message}", source=source, column=column)

    ids, src, dst = table.id, table.src, table.dst
    size, start, gap, ptr, dep = table.size_bytes, table.start_ps, table.gap_ps, table.dep_ptr, table.dep_ids
    top = int(max(src.max(), dst.max()))
    if nodes is None:
        nodes = top + 1
    for col, arr in (("src", src), ("dst", dst)):
        bad = np.flatnonzero(arr >= nodes)
        if bad.size:
            i = int(bad[0])
            raise err(i, col, f"GPU {int(arr[i])} is not in the matrix (allowed: 0..{nodes - 1}, --nodes {nodes})")
    for col, arr, lim in (("size_bytes", size, HTSIM_INT_MAX), ("id", ids, HTSIM_INT_MAX - 1)):
        bad = np.flatnonzero(arr > lim)
        if bad.size:
            i = int(bad[0])
            raise err(i, col, f"got {int(arr[i])} (allowed: at most {lim}: htsim reads {'size' if col == 'size_bytes' else 'id + 1'} as a C int)")
    row_of = {int(x): r for r, x in enumerate(ids.tolist())}
    trig_of_set: dict[tuple[int, ...], int] = {}
    trig_of_row = [0] * n
    done_of_row: dict[int, tuple[int, tuple]] = {}   # dependency row -> (trigger, its set)
    dropped_start = dropped_gap = 0
    bounds = ptr.tolist()
    dl = dep.tolist()
    for i in range(n):
        d = dl[bounds[i]:bounds[i + 1]]
        if not d:
            continue
        if start[i] > 0 or gap[i] > 0:
            if not approximate:
                col = "start_ps" if start[i] > 0 else "gap_ps"
                raise err(i, col, f"{col} {int(start[i] if start[i] > 0 else gap[i])} on a message with dependencies: "
                                  "htsim starts a triggered connection when its trigger fires (allowed: 0, or "
                                  "--approximate to drop it)")
            dropped_start += int(start[i] > 0)
            dropped_gap += int(gap[i] > 0)
        key = tuple(sorted(set(d)))
        new = key not in trig_of_set
        t = trig_of_set.setdefault(key, len(trig_of_set) + 1)
        trig_of_row[i] = t
        if new:
            for x in key:
                r = row_of.get(x)
                if r is None:
                    raise err(i, "deps", f"depends on unknown message {x}")
                prev = done_of_row.get(r)
                if prev is not None and prev[0] != t:
                    raise err(r, "deps", f"is a dependency of two different dependency sets ({list(prev[1])} and "
                                         f"{list(key)}): an htsim connection activates one trigger when done "
                                         "(allowed: messages whose dependents all wait for the same set)")
                done_of_row[r] = (t, key)
    out = [f"Nodes {nodes}", f"Connections {n}"]
    if trig_of_set:
        out.append(f"Triggers {len(trig_of_set)}")
    inexact = 0
    sl, dl2, zl, stl, il = src.tolist(), dst.tolist(), size.tolist(), start.tolist(), ids.tolist()
    for i in range(n):
        line = f"{sl[i]}->{dl2[i]} id {il[i] + 1}"
        if trig_of_row[i]:
            line += f" trigger {trig_of_row[i]}"
        else:
            line += f" start {stl[i]}"
            inexact += int(float(np.float32(stl[i])) != stl[i])
        line += f" size {zl[i]}"
        if i in done_of_row:
            line += f" {done}_done_trigger {done_of_row[i][0]}"
        out.append(line)
    for key, t in trig_of_set.items():
        out.append(f"trigger id {t} oneshot" if len(key) == 1 else f"trigger id {t} barrier count {len(key)}")
    return "\n".join(out) + "\n", CmExport(None, nodes, n, len(trig_of_set), inexact, dropped_start, dropped_gap)


def write_cm(messages, path, nodes: int | None = None, source: str | None = None, done: str = "send",
             approximate: bool = False) -> CmExport:
    """Write :func:`format_cm` of ``messages`` to ``path`` (nothing is written on an error)."""
    path = Path(path)
    text, info = format_cm(messages, nodes, source, done, approximate)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return CmExport(path, info.nodes, info.connections, info.triggers, info.inexact_starts,
                    info.dropped_start_ps, info.dropped_gap_ps)
