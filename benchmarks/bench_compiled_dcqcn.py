#!/usr/bin/env python3
"""DCQCN on ``simulation.kernel: heap`` against ``compiled``: the ``ethernet`` profile (``dcqcn_cx``
with CNPs in the strict-priority class, ``go_back_n`` with ``ack_every: 64``, fixed timers, PFC, ECN
at dequeue, ECMP).

Three workloads: the shipped quickstart with ``profile: ethernet`` (32 hosts, a cross-leaf
permutation of 4 MiB), bench_packet.py's 128-host leaf-spine (8 leaves x 16 hosts, 16 spines,
400G, 500 ns links, 600 ns switches) with ``profile: ethernet`` and a cross-leaf permutation of
``--message-size`` per host, and the same fabric with a 32-to-1 incast of ``--incast-size`` per
sender, without link samples (DCQCN's cuts stretch it to about 34 ms of simulated time, whose
3,400 samples at the default 10 us would be most of either kernel's time: Python snapshots). Each runs on both kernels (the compiled core loaded before the timed runs); every table of
the two runs must be identical and the event counts equal. Engine s is the CPU time of
``PacketEngine.run`` (the event loop; scenario parsing and tables excluded), the fastest of
``--repeat`` runs (bench_compiled_telemetry.py's method: on a shared machine the wall time counts
the time other processes held the core); the wall times are recorded too.

    taskset -c 0 python3 benchmarks/bench_compiled_dcqcn.py --repeat 3    # writes results/compiled_dcqcn.json
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import fabricsim  # noqa: E402
from bench_compiled_telemetry import _cpu_timed_engine_run, compare, report  # noqa: E402

DEFAULT_OUT = HERE / "results" / "compiled_dcqcn.json"


def fabric_128(traffic: dict, name: str) -> dict:
    """bench_packet.py's 128-host fabric with ``profile: ethernet`` and ``traffic``."""
    from bench_packet import FULL, scenario
    sc = scenario(FULL, "ecmp")
    sc["name"] = name
    sc["profile"] = "ethernet"
    sc["traffic"] = traffic
    sc["simulation"].pop("kernel", None)
    return sc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--message-size", default="4MiB", help="128-host permutation: bytes per host (default 4MiB)")
    ap.add_argument("--incast-size", default="4MiB", help="128-host incast: bytes per sender (default 4MiB)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per kernel (the fastest engine time is kept)")
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args(argv)
    _cpu_timed_engine_run()
    # load (or compile) the core before timing anything
    t0 = time.perf_counter()
    fabricsim.run({"profile": "ethernet", "topology": {"kind": "leaf_spine", "hosts_per_leaf": 2, "leaves": 2,
                                                       "spines": 1},
                   "traffic": {"pattern": "permutation", "message_size": "64KiB"},
                   "simulation": {"kernel": "compiled"}})
    warm = time.perf_counter() - t0
    quick = yaml.safe_load((HERE.parent / "scenarios" / "quickstart.yaml").read_text())
    quick["profile"] = "ethernet"                 # = --set profile=ethernet
    rows = []
    for name, source in (
            ("quickstart, profile ethernet (32 hosts, 4 MiB)", quick),
            (f"128 hosts (bench_packet), permutation {args.message_size}",
             fabric_128({"pattern": "permutation", "locality": "cross_leaf", "message_size": args.message_size},
                        "bench_128h_ethernet_permutation")),
            (f"128 hosts (bench_packet), incast 32 to 1 of {args.incast_size}",
             {**fabric_128({"pattern": "incast", "senders": 32, "receiver": 0, "message_size": args.incast_size},
                           "bench_128h_ethernet_incast"), "outputs": {"formats": ["csv"], "link_sample_interval": "off"}})):
        row = compare(name, source, args.repeat)
        res = fabricsim.run(source, overrides=["simulation.kernel=heap"])
        row["cnps"] = int(res.messages["cnps"].sum())
        row["ctrl_sent"] = res.summary["conservation"]["control"]["sent_packets"]
        rows.append(row)
    report(__file__, argv, warm, rows, args.out, (("CNPs", "cnps"), ("PFC pauses", "pfc_pause_events")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
