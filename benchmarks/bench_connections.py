"""Queue pairs per connection and path pinning on a ring all-reduce over a low-entropy leaf-spine.

Workload: NCCL-like ring all-reduce (``fabricsim trace collective``, :func:`sequence`) over 32
ranks with ``channels`` rings (each on its own persistent connection: ``conn = channel``), the
ring order interleaving the 4 leaves (0, 8, 16, 24, 1, 9, ...) so every ring hop crosses the
spine layer: per channel each leaf sends 8 flows up and receives 8. Fabric: 4 leaves x 8 hosts,
4 spines x 2 links (8 uplinks per leaf, non-blocking), 400G, 500 ns links, 600 ns switches,
unbounded buffers, no congestion control, so only placement (which uplink and spine downlink each
queue pair hashes to) separates the cases.

Measured: bus bandwidth as nccl-tests defines it, ``busbw = algbw x 2 (n - 1) / n`` with
``algbw = S / t``, ``S`` the buffer bytes per rank and ``t`` the all-reduce time (first release to
last completion of its messages, from the messages table), reported as a fraction of the 400G
line rate (``busbw_fraction``) and in Gbit/s. Cases: ECMP with 1, 2, 4, 8, 16 queue pairs per
connection (``traffic.qps_per_connection``), ``pinned`` with 1 and 16, ECMP with fresh queue
pairs per message (``--conn-base -1``: every ring step re-rolls the hash) at 1 queue pair, and
``spray`` (per packet) as the reference with no per-flow placement. Also reported: max / mean data
bytes over the leaf -> spine and the spine -> leaf links (1.0 = every link carries the same).

    python3 benchmarks/bench_connections.py                    # seeds 1-5, about 2.5 min on one core
    python3 benchmarks/bench_connections.py --seeds 1 2 --size 4MiB

Prints a table and writes ``benchmarks/results/connections.json`` (per seed and mean / min / max).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import tempfile
import time

import fabricsim
from fabricsim.analysis.collectives import KINDS
from fabricsim.traces import write_trace
from fabricsim.traces.collectives import compose, sequence
from fabricsim.units import parse_size

LEAVES, HOSTS_PER_LEAF, SPINES, LINKS_PER_SPINE = 4, 8, 4, 2
RATE_BPS = 400e9

#: (label, routing policy, queue pairs per connection, conn_base)
CASES = [("ecmp_fresh_qp1", "ecmp", 1, -1)] + [(f"ecmp_qp{q}", "ecmp", q, 0) for q in (1, 2, 4, 8, 16)] + \
        [("pinned_qp1", "pinned", 1, 0), ("pinned_qp16", "pinned", 16, 0), ("spray_qp1", "spray", 1, 0)]


def ring_order() -> list[int]:
    """Host ids leaf-interleaved: consecutive ranks sit under different leaves."""
    return [leaf * HOSTS_PER_LEAF + h for h in range(HOSTS_PER_LEAF) for leaf in range(LEAVES)]


def scenario(trace: pathlib.Path, policy: str, qps: int, seed: int) -> dict:
    link = {"rate": "400Gbps", "delay": "500ns"}
    return {"name": f"ar_{policy}_{qps}", "topology": {
                "kind": "leaf_spine", "hosts_per_leaf": HOSTS_PER_LEAF, "leaves": LEAVES, "spines": SPINES,
                "links_per_spine": LINKS_PER_SPINE, "host_link": link, "fabric_link": link,
                "switch_latency": "600ns", "buffer": {"size": "unbounded"}},
            "traffic": {"pattern": "trace", "path": str(trace), "qps_per_message": qps, "qps_per_connection": qps},
            "routing": {"policy": policy}, "simulation": {"seed": seed, "time_limit": "50ms"}}


def bus_bandwidth(res, size_bytes: int, n: int) -> dict:
    """nccl-tests all-reduce bus bandwidth from the messages table (time = first release to last end)."""
    m = res.messages
    if not m["completed"].all():
        raise RuntimeError("the all-reduce did not complete")
    t_ps = int(m["end_ps"].max() - m["release_ps"].min())
    algbw = size_bytes * 8 / (t_ps * 1e-12)
    busbw = algbw * KINDS["allreduce"].bus(n)      # the one nccl-tests factor (analysis/collectives.py)
    return {"time_ps": t_ps, "algbw_gbps": algbw / 1e9, "busbw_gbps": busbw / 1e9, "busbw_fraction": busbw / RATE_BPS}


def imbalance(res) -> dict:
    """max / mean data bytes over the leaf -> spine links and over the spine -> leaf links."""
    L = res.links
    fab = L[L["kind"] == "leaf-spine"]
    up = fab[fab["src_name"].str.startswith("leaf")]["tx_data_bytes"]
    down = fab[fab["src_name"].str.startswith("spine")]["tx_data_bytes"]
    return {"uplink_max_over_mean": float(up.max() / up.mean()), "downlink_max_over_mean": float(down.max() / down.mean())}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    ap.add_argument("--size", default="8MiB", help="all-reduce buffer per rank (S)")
    ap.add_argument("--channels", type=int, default=2)
    ap.add_argument("--out", default=str(pathlib.Path(__file__).parent / "results" / "connections.json"))
    args = ap.parse_args()
    size = parse_size(args.size)
    ranks = ring_order()
    n = len(ranks)
    rows = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        traces = {}
        for conn_base in (0, -1):
            recs = sequence("allreduce", ranks, size, channels=args.channels, conn_base=conn_base)
            traces[conn_base] = write_trace(compose([recs]), pathlib.Path(tmp) / f"ar{conn_base}.parquet")
        for label, policy, qps, conn_base in CASES:
            for seed in args.seeds:
                w = time.perf_counter()
                res = fabricsim.run(scenario(traces[conn_base], policy, qps, seed))
                row = {"case": label, "routing": policy, "qps_per_connection": qps, "conn_base": conn_base,
                       "seed": seed, **bus_bandwidth(res, size, n), **imbalance(res), "wall_s": round(time.perf_counter() - w, 2)}
                rows.append(row)
                print(f"{label:16s} seed {seed}: busbw {row['busbw_gbps']:6.1f} Gbps "
                      f"({row['busbw_fraction']:.3f} of line), t = {row['time_ps'] / 1e6:.1f} us, uplink / downlink "
                      f"max/mean {row['uplink_max_over_mean']:.2f} / {row['downlink_max_over_mean']:.2f}, "
                      f"{row['wall_s']} s", flush=True)
    summary = {}
    for label, *_ in CASES:
        v = [r["busbw_fraction"] for r in rows if r["case"] == label]
        summary[label] = {"busbw_fraction_mean": statistics.fmean(v), "busbw_fraction_min": min(v),
                          "busbw_fraction_max": max(v), "busbw_gbps_mean": statistics.fmean(v) * RATE_BPS / 1e9,
                          "uplink_max_over_mean_mean": statistics.fmean(
                              r["uplink_max_over_mean"] for r in rows if r["case"] == label),
                          "downlink_max_over_mean_mean": statistics.fmean(
                              r["downlink_max_over_mean"] for r in rows if r["case"] == label),
                          "seeds": len(v)}
    print(f"\n{'case':16s} {'busbw/line mean':>15s} {'min':>6s} {'max':>6s} {'Gbps mean':>9s} {'up max/mean':>11s} "
          f"{'down max/mean':>13s}")
    for label, s in summary.items():
        print(f"{label:16s} {s['busbw_fraction_mean']:15.3f} {s['busbw_fraction_min']:6.3f} "
              f"{s['busbw_fraction_max']:6.3f} {s['busbw_gbps_mean']:9.1f} {s['uplink_max_over_mean_mean']:11.2f} "
              f"{s['downlink_max_over_mean_mean']:13.2f}")
    out = {"workload": {"collective": "allreduce", "algorithm": "ring", "ranks": n, "ring_order": ranks,
                        "size_bytes_per_rank": size, "channels": args.channels,
                        "fabric": f"leaf_spine {LEAVES} leaves x {HOSTS_PER_LEAF} hosts, {SPINES} spines x "
                                  f"{LINKS_PER_SPINE} links, 400G, 500 ns links, 600 ns switches, unbounded buffers, "
                                  f"no CC",
                        "busbw": "algbw x 2(n-1)/n, algbw = S / t, t = last end - first release (messages table)"},
           "seeds": args.seeds, "summary": summary, "runs": rows,
           "wall_s_total": round(time.perf_counter() - t0, 1)}
    pathlib.Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
