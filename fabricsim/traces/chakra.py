"""Import MLCommons Chakra execution traces (ET) into trace format v1 (docs/traces.md, "Chakra import").

Optional: needs the ``protobuf`` package (``pip install "fabricsim[chakra]"``); the ET schema is
declared in :mod:`fabricsim.traces.et_format`, so mlc-chakra itself is not needed. One ET file per
rank (``et.0.et``, ``et.1.et``, ...): a ``GlobalMetadata`` message, then ``Node`` messages, each
preceded by its length as a varint.

Mapping (rank r = the number in the file name = the GPU id in the trace):

- ``COMM_SEND_NODE`` on r with ``comm_dst`` p, matched in order with the ``COMM_RECV_NODE`` on p whose
  ``comm_src`` is r (and the same ``comm_tag`` when both give one): one message r -> p of
  ``comm_size`` (or ``tensor_size``) bytes, released by the sender's dependencies.
- ``COMM_COLL_NODE``: the k-th collective of a process group (``pg_name``; none: all ranks) on every
  rank is one instance, expanded once over the ranks that have it: ``ALL_REDUCE`` /
  ``REDUCE_SCATTER`` (also ``REDUCE_SCATTER_BLOCK``) / ``ALL_GATHER`` as rings
  (:mod:`fabricsim.traces.collectives`, ``comm_size`` = the full buffer), ``ALL_TO_ALL`` split
  uniformly over the other ranks (the ET gives only a total: :class:`ChakraWarning`).
- ``COMP_NODE`` (and memory / metadata nodes): no message; durations (``duration_micros``, else a
  ``runtime`` attribute in microseconds) along the longest compute path between two communication
  nodes become ``gap_ps``; a compute path from the start of a rank becomes ``start_ps``.
- Dependencies: ``data_deps`` and ``ctrl_deps``; a communication node waits for the communication
  nodes reachable backwards through compute nodes (their messages into / from the rank).
"""
from __future__ import annotations

import graphlib
import re
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..errors import ConfigError
from .collectives import ring_all_gather, ring_all_reduce, ring_reduce_scatter
from .schema import Trace, TraceRecord, check_trace

PS_PER_US = 1_000_000
_RANK_RE = re.compile(r"^(.*?)(\d+)\.et$")
_RING = {"ALL_REDUCE": ("all_reduce", ring_all_reduce), "ALL_GATHER": ("all_gather", ring_all_gather),
         "REDUCE_SCATTER": ("reduce_scatter", ring_reduce_scatter),
         "REDUCE_SCATTER_BLOCK": ("reduce_scatter", ring_reduce_scatter)}
SUPPORTED_COLLECTIVES = tuple(_RING) + ("ALL_TO_ALL",)


class ChakraWarning(UserWarning):
    """An approximation made while importing a Chakra trace."""


@dataclass
class ChakraImport:
    trace: Trace
    ranks: int
    files: list[str]
    node_types: dict[str, int]
    collectives: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> dict:
        recs = self.trace.records
        return {"ranks": self.ranks, "nodes": dict(self.node_types), "collectives": dict(self.collectives),
                "messages": len(recs), "bytes": sum(r.size_bytes for r in recs), "warnings": list(self.warnings)}


def _pb():
    """The ET schema (fabricsim/traces/et_format.py); ConfigError if protobuf is not installed."""
    try:
        import google.protobuf.message  # noqa: F401  (DecodeError, in read_et)

        from .et_format import schema
        return schema()
    except ImportError:
        raise ConfigError("importing Chakra traces needs the optional package protobuf "
                          "(install: pip install 'fabricsim[chakra]', or pip install protobuf)") from None


def find_rank_files(path) -> list[Path]:
    """Rank files of ``path``: a directory (its ``*.N.et`` files), a prefix (``dir/et`` or ``dir/et.``)
    or a glob (``dir/et.*.et``). Ranks must be 0..N-1 with one file each."""
    p = Path(path)
    if p.is_dir():
        cands = sorted(p.iterdir())
    elif any(ch in str(path) for ch in "*?["):
        cands = sorted(p.parent.glob(p.name))
    else:
        cands = sorted(q for q in p.parent.glob(p.name + "*") if q.name.startswith(p.name))
    by_rank: dict[int, list[Path]] = defaultdict(list)
    for q in cands:
        m = _RANK_RE.match(q.name)
        if m and q.is_file():
            by_rank[int(m.group(2))].append(q)
    if not by_rank:
        raise ConfigError("no Chakra ET files found (expected one file per rank named like et.0.et, et.1.et, ...)",
                          source=str(path))
    for r, qs in by_rank.items():
        if len(qs) > 1:
            raise ConfigError(f"several files for rank {r}: {', '.join(q.name for q in qs)} "
                              "(allowed: one file per rank; give a prefix such as DIR/et.)", source=str(path))
    n = max(by_rank) + 1
    missing = [r for r in range(n) if r not in by_rank]
    if missing:
        raise ConfigError(f"missing rank file for rank {missing[0]} (have ranks {sorted(by_rank)}; "
                          f"allowed: ranks 0..N-1, one file each)", source=str(path))
    return [by_rank[r][0] for r in range(n)]


def read_et(path, pb=None):
    """(GlobalMetadata, [Node]) of one ET file; ConfigError if it cannot be decoded."""
    from google.protobuf.message import DecodeError

    from .et_format import read_delimited
    et = pb or _pb()
    meta, nodes = et.GlobalMetadata(), []
    try:
        with open(path, "rb") as fh:
            if not read_delimited(fh, meta):
                raise ConfigError("empty file or no GlobalMetadata message (allowed: a Chakra ET file)",
                                  source=str(path))
            while True:
                node = et.Node()
                if not read_delimited(fh, node):
                    break
                nodes.append(node)
    except (DecodeError, IndexError, ValueError) as exc:
        raise ConfigError(f"not a Chakra ET file: node {len(nodes)}: {exc}", source=str(path)) from None
    return meta, nodes


def _attrs(node) -> dict:
    out = {}
    for a in node.attr:
        kind = a.WhichOneof("value")
        if kind is not None:
            v = getattr(a, kind)
            out[a.name] = v if kind.endswith("_val") else list(getattr(v, "values", v))
    return out


@dataclass
class _CommNode:
    rank: int
    node: object
    kind: str            # "send" | "recv" | "coll"
    attrs: dict
    instance: int = -1   # index into instances
    deps: dict = field(default_factory=dict)   # comm node key -> longest compute ps in between
    start_ps: int = 0


def import_chakra(path, warn: bool = True) -> ChakraImport:
    """Read the per-rank ET files of ``path`` and expand them into a checked v1 :class:`Trace`."""
    pb = _pb()
    NT = pb.NodeType
    type_names = dict((v, k) for k, v in NT.items())
    coll_names = dict((v, k) for k, v in pb.CollectiveCommType.items())
    files = find_rank_files(path)
    n_ranks = len(files)
    node_types: Counter = Counter()
    comm: dict[tuple[int, int], _CommNode] = {}
    compute_like = {NT.Value(t) for t in ("COMP_NODE", "METADATA_NODE", "MEM_LOAD_NODE", "MEM_STORE_NODE")}
    comm_kinds = {NT.Value("COMM_SEND_NODE"): "send", NT.Value("COMM_RECV_NODE"): "recv",
                  NT.Value("COMM_COLL_NODE"): "coll"}
    per_rank_order: list[list[int]] = []

    for rank, f in enumerate(files):
        src = str(f)
        _, nodes = read_et(f, pb)
        by_id = {}
        for nd in nodes:
            if nd.id in by_id:
                raise ConfigError(f"node id {nd.id} appears twice (allowed: unique node ids)", source=src)
            if nd.type not in compute_like and nd.type not in comm_kinds:
                name = type_names.get(nd.type, str(nd.type))
                raise ConfigError(f"node {nd.id} ({nd.name!r}): unknown node type {name} (allowed: COMP_NODE, "
                                  "COMM_SEND_NODE, COMM_RECV_NODE, COMM_COLL_NODE, METADATA_NODE, "
                                  "MEM_LOAD_NODE, MEM_STORE_NODE)", source=src)
            by_id[nd.id] = nd
            node_types[type_names[nd.type]] += 1
        ts = graphlib.TopologicalSorter()
        for nd in nodes:
            deps = list(nd.data_deps) + list(nd.ctrl_deps)
            for d in deps:
                if d not in by_id:
                    raise ConfigError(f"node {nd.id} depends on unknown node {d} (allowed: node ids of the same "
                                      "rank file)", source=src)
            ts.add(nd.id, *deps)
        try:
            order = list(ts.static_order())
        except graphlib.CycleError as exc:
            raise ConfigError(f"dependency cycle through nodes {exc.args[1]}", source=src) from None
        # reach[x]: comm node id -> longest compute duration on a path from it to x (x's own excluded
        # for comm nodes, included for compute nodes); root[x]: longest compute path from the start
        reach: dict[int, dict[int, int]] = {}
        root: dict[int, int] = {}
        comm_order = []
        for nid in order:
            nd = by_id[nid]
            acc: dict[int, int] = {}
            r0 = 0
            for d in list(nd.data_deps) + list(nd.ctrl_deps):
                if by_id[d].type in comm_kinds:
                    acc[d] = max(acc.get(d, 0), 0)
                else:
                    for q, v in reach[d].items():
                        acc[q] = max(acc.get(q, 0), v)
                    r0 = max(r0, root[d])
            if nd.type in comm_kinds:
                cn = _CommNode(rank, nd, comm_kinds[nd.type], _attrs(nd), deps=acc, start_ps=r0)
                comm[(rank, nid)] = cn
                comm_order.append(nid)
                reach[nid], root[nid] = {}, 0
            else:
                dur = int(nd.duration_micros) or int(_attrs(nd).get("runtime", 0) or 0)
                dur_ps = dur * PS_PER_US
                reach[nid] = {q: v + dur_ps for q, v in acc.items()}
                # a path from the start only counts while no comm node lies on it
                root[nid] = r0 + dur_ps if (r0 or not acc) else 0
        # comm nodes of this rank in node-id order (the order the ranks issue them)
        per_rank_order.append(sorted(comm_order))

    # ---- instances: send/recv pairs and collectives matched across ranks
    instances: list[dict] = []
    pending_recv: dict[tuple[int, int], list[_CommNode]] = defaultdict(list)  # (src, dst) -> recvs in order
    coll_seen: dict[tuple[int, str], int] = Counter()
    coll_groups: dict[tuple[str, int], dict[int, _CommNode]] = {}
    sends: list[_CommNode] = []
    for rank, ids in enumerate(per_rank_order):
        src = str(files[rank])
        for nid in ids:
            cn = comm[(rank, nid)]
            a = cn.attrs
            if cn.kind in ("send", "recv"):
                peer = a.get("comm_dst" if cn.kind == "send" else "comm_src")
                if peer is None:
                    raise ConfigError(f"node {nid} ({cn.node.name!r}): {cn.kind} node without "
                                      f"{'comm_dst' if cn.kind == 'send' else 'comm_src'} attribute", source=src)
                peer = int(peer)
                if not 0 <= peer < n_ranks or peer == rank:
                    raise ConfigError(f"node {nid}: peer rank {peer} (allowed: 0..{n_ranks - 1}, not {rank})",
                                      source=src)
                if cn.kind == "send":
                    sends.append(cn)
                else:
                    pending_recv[(peer, rank)].append(cn)
            else:
                pg = str(a.get("pg_name", ""))
                k = coll_seen[(rank, pg)]
                coll_seen[(rank, pg)] += 1
                coll_groups.setdefault((pg, k), {})[rank] = cn
    for cn in sends:
        a = cn.attrs
        dst = int(a["comm_dst"])
        queue = pending_recv[(cn.rank, dst)]
        tag = a.get("comm_tag")
        match = next((i for i, r in enumerate(queue)
                      if tag is None or r.attrs.get("comm_tag") is None or r.attrs.get("comm_tag") == tag), None)
        if match is None:
            raise ConfigError(f"node {cn.node.id}: send to rank {dst} has no matching COMM_RECV_NODE "
                              f"(comm_src {cn.rank}) in rank {dst}'s file", source=str(files[cn.rank]))
        recv = queue.pop(match)
        size = int(a.get("comm_size", 0) or a.get("tensor_size", 0) or 0)
        if size <= 0:
            raise ConfigError(f"node {cn.node.id}: send of {size} B (allowed: comm_size > 0)",
                              source=str(files[cn.rank]))
        cn.instance = recv.instance = len(instances)
        instances.append({"kind": "sendrecv", "members": {cn.rank: cn}, "recv": recv, "size": size,
                          "src": cn.rank, "dst": dst})
    for (s, d), queue in pending_recv.items():
        if queue:
            raise ConfigError(f"node {queue[0].node.id}: receive from rank {s} has no matching COMM_SEND_NODE "
                              f"in rank {s}'s file", source=str(files[d]))
    all_ranks = list(range(n_ranks))
    for (pg, k), members in coll_groups.items():
        first = members[min(members)]
        if not pg and len(members) != n_ranks:
            lacking = min(set(all_ranks) - set(members))
            raise ConfigError(f"collective #{k} ({first.node.name!r}) of rank {min(members)} has no match in "
                              f"rank {lacking}'s file (allowed: every rank issues the same collectives in order)",
                              source=str(files[lacking]))
        ctypes = {int(m.attrs.get("comm_type", -1)) for m in members.values()}
        if len(ctypes) != 1:
            raise ConfigError(f"collective #{k} ({first.node.name!r}): comm_type differs between ranks "
                              f"({sorted(coll_names.get(c, str(c)) for c in ctypes)})", source=str(files[first.rank]))
        ctype = coll_names.get(ctypes.pop(), None)
        if ctype not in SUPPORTED_COLLECTIVES:
            raise ConfigError(f"node {first.node.id} ({first.node.name!r}): collective type {ctype} is not "
                              f"supported (allowed: {', '.join(SUPPORTED_COLLECTIVES)})", source=str(files[first.rank]))
        sizes = {r: int(m.attrs.get("comm_size", 0) or 0) for r, m in members.items()}
        if min(sizes.values()) <= 0:
            raise ConfigError(f"node {first.node.id} ({first.node.name!r}): comm_size missing or 0 (allowed: > 0)",
                              source=str(files[first.rank]))
        inst = {"kind": ctype, "members": members, "sizes": sizes, "pg": pg, "k": k,
                "ranks": sorted(members) if pg else all_ranks}
        if len(inst["ranks"]) < 2:
            for m in members.values():  # a one-rank collective moves no data
                m.instance = -2
            continue
        for m in members.values():
            m.instance = len(instances)
        instances.append(inst)

    # ---- expand in dependency order
    ts = graphlib.TopologicalSorter()
    for i, inst in enumerate(instances):
        preds = set()
        for m in inst["members"].values():
            for q in m.deps:
                j = comm[(m.rank, q)].instance
                if j >= 0:
                    preds.add(j)
        ts.add(i, *preds)
    try:
        order = list(ts.static_order())
    except graphlib.CycleError:
        raise ConfigError("the communication nodes of the ranks wait for each other in a cycle (deadlock)",
                          source=str(path)) from None
    done: dict[int, dict[int, tuple[int, ...]]] = {}  # instance -> rank -> completion message ids
    records: list[TraceRecord] = []
    warned: list[str] = []
    coll_count: Counter = Counter()
    nid = 0

    def release(m: _CommNode):
        ids, gap = [], 0
        for q, g in m.deps.items():
            j = comm[(m.rank, q)].instance
            if j < 0:
                continue
            ids.extend(done[j].get(m.rank, ()))
            gap = max(gap, g)
        ids = tuple(sorted(set(ids)))
        return ids, (gap if ids else 0), m.start_ps

    for i in order:
        inst = instances[i]
        kind = inst["kind"]
        if kind == "sendrecv":
            m = inst["members"][inst["src"]]
            deps, gap, start = release(m)
            op = f"sendrecv.{i}"
            records.append(TraceRecord(nid, inst["src"], inst["dst"], inst["size"], op, "other", -1, -1,
                                       deps, gap, start))
            done[i] = {inst["src"]: (nid,), inst["dst"]: (nid,)}
            nid += 1
            coll_count["sendrecv"] += 1
            continue
        ranks = inst["ranks"]
        rel = {r: release(m) for r, m in inst["members"].items()}
        op = f"{kind.lower()}.{i}"
        coll_count[kind] += 1
        if kind == "ALL_TO_ALL":
            msg = ("ALL_TO_ALL nodes carry only a total size: each rank's comm_size is split uniformly "
                   "over the other ranks")
            if msg not in warned:
                warned.append(msg)
                if warn:
                    warnings.warn(msg, ChakraWarning, stacklevel=2)
            n = len(ranks)
            part = []
            into: dict[int, list[int]] = defaultdict(list)
            for s in ranks:
                deps, gap, start = rel[s]
                total = inst["sizes"][s]
                q, rem = divmod(total, n - 1)
                others = [d for d in ranks if d != s]
                for j, d in enumerate(others):
                    sz = q + (1 if j < rem else 0)
                    if sz <= 0:
                        continue
                    part.append(TraceRecord(nid, s, d, sz, op, "other", -1, -1, deps, gap, start))
                    into[d].append(nid)
                    nid += 1
            records.extend(part)
            done[i] = {r: tuple(into.get(r, ())) or tuple(x.id for x in part if x.src == r) for r in ranks}
            continue
        sizes = set(inst["sizes"].values())
        if len(sizes) != 1:
            first = inst["members"][min(inst["members"])]
            raise ConfigError(f"node {first.node.id} ({first.node.name!r}): {kind} comm_size differs between "
                              f"ranks ({sorted(sizes)})", source=str(files[first.rank]))
        _, gen = _RING[kind]
        try:
            part = gen(ranks, sizes.pop(), op=op, start_id=nid)
        except ConfigError as exc:
            raise ConfigError(f"collective {op}: {exc.message}", source=str(path)) from None
        n = len(ranks)
        for j in range(n):  # first step: rank j's release condition
            deps, gap, start = rel[part[j].src]
            part[j] = replace(part[j], deps=deps, gap_ps=gap, start_ps=start)
        records.extend(part)
        last_in: dict[int, int] = {}
        for r in part:
            last_in[r.dst] = r.id
        done[i] = {r: (last_in[r],) for r in ranks}
        nid += len(part)

    if not records:
        raise ConfigError("the Chakra trace has no communication (no send/recv pairs or collectives)",
                          source=str(path))
    trace = check_trace(Trace(records, str(path), [("row", k) for k in range(len(records))]))
    return ChakraImport(trace, n_ranks, [str(f) for f in files], dict(sorted(node_types.items())),
                        dict(sorted(coll_count.items())), warned)


def format_summary(imp: ChakraImport, output) -> str:
    from ..units import format_size
    d = imp.summary()
    nodes = ", ".join(f"{k} {v}" for k, v in d["nodes"].items()) or "none"
    colls = ", ".join(f"{k} {v}" for k, v in d["collectives"].items()) or "none"
    lines = [f"{output}: imported {d['ranks']} ranks from Chakra ET",
             f"nodes         {nodes}",
             f"operations    {colls}",
             f"messages      {d['messages']}",
             f"bytes         {d['bytes']} B ({format_size(d['bytes'])})",
             f"warnings      {len(d['warnings'])}"]
    lines += [f"  warning: {w}" for w in d["warnings"]]
    return "\n".join(lines)
