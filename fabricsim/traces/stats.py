"""``fabricsim trace inspect``: counts, bytes per operation and phase, traffic-matrix statistics
and dependency depth of a trace (definitions in docs/traces.md)."""
from __future__ import annotations

from collections import defaultdict

from .schema import FORMAT_VERSION, Trace


def _max_mean(values) -> tuple[int, float]:
    values = list(values)
    if not values:
        return 0, 0.0
    return max(values), sum(values) / len(values)


def dependency_depth(trace: Trace) -> int:
    """Messages on the longest dependency chain (1 when no message has deps, 0 when empty)."""
    depth: dict[int, int] = {}
    by_id = {r.id: r for r in trace.records}
    # iterative longest path over the DAG (check_trace guarantees no cycles)
    for r in trace.records:
        if r.id in depth:
            continue
        stack = [(r.id, False)]
        while stack:
            mid, expanded = stack.pop()
            if mid in depth:
                continue
            deps = by_id[mid].deps
            if expanded or not deps:
                depth[mid] = 1 + max((depth[d] for d in deps), default=0)
                continue
            stack.append((mid, True))
            stack.extend((d, False) for d in deps if d not in depth)
    return max(depth.values(), default=0)


def dispatch_rank_imbalance(trace: Trace) -> dict:
    """Per-rank receive imbalance of every dispatch op: over the GPUs of the op (src or dst of one
    of its phase-``dispatch`` messages), max / mean - 1 of the bytes each receives. These are bytes
    received over the network: copies a GPU keeps for its own experts are not messages and are not in
    it, and in hierarchical dispatch a relay's bytes include the copies it forwards."""
    ops: dict[str, dict[int, int]] = defaultdict(dict)
    for r in trace.records:
        if r.phase == "dispatch":
            rx = ops[r.op]
            rx[r.dst] = rx.get(r.dst, 0) + r.size_bytes
            rx.setdefault(r.src, 0)
    per_op = {}
    for op, rx in sorted(ops.items()):
        mean = sum(rx.values()) / len(rx)
        per_op[op] = max(rx.values()) / mean - 1 if mean else 0.0
    vals = list(per_op.values())
    return {"ops": len(vals), "mean": sum(vals) / len(vals) if vals else None,
            "max": max(vals) if vals else None, "per_op": per_op}


def inspect_trace(trace: Trace) -> dict:
    """Summary dict of a (checked) trace; every byte figure is payload bytes."""
    recs = trace.records
    per_op: dict[str, dict] = defaultdict(lambda: {"messages": 0, "bytes": 0})
    per_phase: dict[str, dict] = defaultdict(lambda: {"messages": 0, "bytes": 0})
    pair: dict[tuple[int, int], int] = defaultdict(int)
    send: dict[int, int] = defaultdict(int)
    recv: dict[int, int] = defaultdict(int)
    for r in recs:
        for d, k in ((per_op, r.op), (per_phase, r.phase)):
            d[k]["messages"] += 1
            d[k]["bytes"] += r.size_bytes
        pair[(r.src, r.dst)] += r.size_bytes
        send[r.src] += r.size_bytes
        recv[r.dst] += r.size_bytes
    gpus = sorted(set(send) | set(recv))
    pmax, pmean = _max_mean(pair.values())
    smax, smean = _max_mean(send.get(g, 0) for g in gpus)
    rmax, rmean = _max_mean(recv.get(g, 0) for g in gpus)
    return {
        "file": trace.source,
        "format_version": FORMAT_VERSION,
        "messages": len(recs),
        "total_bytes": sum(r.size_bytes for r in recs),
        "gpus": len(gpus),
        "ops": len(per_op),
        "layers": len({r.layer for r in recs}),
        "microbatches": len({r.microbatch for r in recs}),
        "messages_with_deps": sum(1 for r in recs if r.deps),
        "dependency_edges": sum(len(r.deps) for r in recs),
        "dependency_depth": dependency_depth(trace),
        "bytes_per_op": {k: dict(v) for k, v in sorted(per_op.items())},
        "bytes_per_phase": {k: dict(v) for k, v in sorted(per_phase.items())},
        "traffic_matrix": {
            "pairs": len(pair),
            "pair_bytes_max": pmax,
            "pair_bytes_mean": pmean,
            "send_bytes_max": smax,
            "send_bytes_mean": smean,
            "recv_bytes_max": rmax,
            "recv_bytes_mean": rmean,
            "recv_skew": (rmax - rmean) / rmean if rmean else None,
        },
        "dispatch_rank_imbalance": dispatch_rank_imbalance(trace),
    }
