#!/usr/bin/env python3
"""Heap against the compiled core on slice 4's persistent connections and shared switch buffers.

Two scenarios: the shipped DeepSeek-V3-shaped MoE layer on 64 GPUs (scenarios/moe_dsv3_64gpu_flat.yaml:
every message on a persistent connection, which fell back to heap before), and the shipped 32-to-1
incast (scenarios/incast_32to1.yaml) through dynamic-threshold shared buffers of 4 MiB per switch
(``switch.buffer.admission: dynamic``, ``alpha`` 1, DCTCP-free: drops and timeouts). Each runs on
both kernels, alternating, ``--repeat`` times; the figure is the engine's CPU time
(``PacketEngine.run``, ``time.process_time``: the machine is shared, wall time is not), best of the
runs, and every table must be identical::

    PYTHONPATH=. taskset -c 0 python3 benchmarks/bench_compiled_conn.py --repeat 3 --out benchmarks/results/compiled_conn.json
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CASES = {
    "moe_dsv3_64gpu_flat": (str(ROOT / "scenarios" / "moe_dsv3_64gpu_flat.yaml"), []),
    "incast_32to1_dynamic_buffer": (str(ROOT / "scenarios" / "incast_32to1.yaml"),
                                    ["switch.buffer.admission=dynamic", "switch.buffer.size=4MiB",
                                     "switch.buffer.alpha=1.0"]),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cases", nargs="*", default=list(CASES))
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    import pandas as pd

    import fabricsim
    from fabricsim.engine.packet import PacketEngine
    cpu: list = []
    orig = PacketEngine.run

    def timed(self, *a, **k):
        t0 = time.process_time()
        try:
            return orig(self, *a, **k)
        finally:
            cpu.append(time.process_time() - t0)
    PacketEngine.run = timed
    out = {}
    for name in args.cases:
        path, sets = CASES[name]
        best: dict = {}
        res: dict = {}
        for _ in range(args.repeat):
            for k in ("heap", "compiled"):
                r = fabricsim.run(path, overrides=[f"simulation.kernel={k}"] + sets)
                if r.summary["run"]["kernel"]["ran"] != k:
                    raise SystemExit(f"{name}: ran on {r.summary['run']['kernel']}")
                best[k] = min(best.get(k, float("inf")), cpu[-1])
                res[k] = r
        a, b = res["heap"], res["compiled"]
        for t in ("messages", "links", "latency", "goodput"):
            pd.testing.assert_frame_equal(getattr(a, t), getattr(b, t))
        assert a.summary["run"]["events"] == b.summary["run"]["events"]
        run = a.summary["run"]
        out[name] = {"heap_engine_cpu_s": round(best["heap"], 3), "compiled_engine_cpu_s": round(best["compiled"], 3),
                     "speedup": round(best["heap"] / best["compiled"], 2), "events": run["events"],
                     "messages": len(a.messages), "status": a.summary["status"],
                     "dropped_packets": run["dropped_packets"], "timeouts": run["retransmission_timeouts"],
                     "overrides": sets}
        print(name, json.dumps(out[name]), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
