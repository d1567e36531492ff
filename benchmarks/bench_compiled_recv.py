#!/usr/bin/env python3
"""The ``reorder_buffer`` receiver and cells (``simulation.cell_packets``) on ``simulation.kernel:
heap`` against ``compiled``.

Two workloads on bench_packet.py's 128-host leaf-spine (8 leaves x 16 hosts, 16 spines, 400G, 500 ns
links, 600 ns switches), a cross-leaf permutation of ``--message-size`` per host, sprayed per packet
(spraying reorders, so units wait in the reorder buffers): ``reorder_buffer`` with a ``--buffer`` per
receiving host (small enough to overflow: discarded units and their duplicate ACKs, recovered by
RACK), and the same with cells of ``--cell`` MTU packets. Each runs on both kernels (the compiled
core loaded before the timed runs); every table of the two runs must be identical and the event
counts equal. Engine s is the CPU time of ``PacketEngine.run``, the fastest of ``--repeat`` runs
(bench_compiled_telemetry.py's method); the wall times are recorded too.

    PYTHONPATH=. taskset -c 0 python3 benchmarks/bench_compiled_recv.py --repeat 3   # writes results/compiled_recv.json
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import fabricsim  # noqa: E402
from bench_compiled_telemetry import _cpu_timed_engine_run, compare, report  # noqa: E402

DEFAULT_OUT = HERE / "results" / "compiled_recv.json"


def fabric_128(size: str, buffer: str, cell: int) -> dict:
    """bench_packet.py's 128-host fabric, a sprayed cross-leaf permutation through reorder buffers."""
    from bench_packet import FULL, scenario
    sc = scenario({**FULL, "message_size": size}, "spray")
    sc["name"] = f"bench_128h_reorder_buffer_cell{cell}"
    sc["receiver"] = {"model": "reorder_buffer", "buffer": buffer}
    sc["simulation"].pop("kernel", None)
    sc["simulation"]["cell_packets"] = cell
    sc["outputs"] = {"formats": ["csv"], "link_sample_interval": "off"}
    return sc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--message-size", default="4MiB", help="bytes per host (default 4MiB)")
    ap.add_argument("--buffer", default="64KiB", help="reorder buffer per receiving host (default 64KiB)")
    ap.add_argument("--cell", type=int, default=4, help="MTU packets per cell in the second workload (default 4)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per kernel (the fastest engine time is kept)")
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args(argv)
    _cpu_timed_engine_run()
    t0 = time.perf_counter()
    fabricsim.run({"topology": {"kind": "leaf_spine", "hosts_per_leaf": 2, "leaves": 2, "spines": 1},
                   "traffic": {"pattern": "permutation", "message_size": "64KiB"},
                   "receiver": {"model": "reorder_buffer"}, "simulation": {"kernel": "compiled"}})
    warm = time.perf_counter() - t0
    rows = []
    for cell in (1, args.cell):
        name = (f"128 hosts, sprayed permutation {args.message_size}, reorder_buffer {args.buffer}"
                + (f", cells of {cell}" if cell > 1 else ""))
        source = fabric_128(args.message_size, args.buffer, cell)
        row = compare(name, source, args.repeat)
        res = fabricsim.run(source, overrides=["simulation.kernel=heap"])
        row["overflow_bytes"] = int(res.messages["reorder_overflow_bytes"].sum())
        row["retransmitted_bytes"] = res.summary["run"]["retransmitted_payload_bytes"]
        rows.append(row)
    report(__file__, argv, warm, rows, args.out, (("overflow bytes", "overflow_bytes"),))
    return 0


if __name__ == "__main__":
    sys.exit(main())
