#!/usr/bin/env python3
"""ACK coalescing on the compiled packet core: engine time of ``heap`` and ``compiled``, and the
ACKs coalescing saves.

The fabric is ``bench_packet.py``'s 128-host leaf-spine (8 leaves x 16 hosts, 16 spines, 400G,
500 ns links, 600 ns switches) running the ``ethernet`` profile's transport without its DCQCN
(congestion control is a later slice of the compiled core): ECMP, the ``go_back_n`` receiver with
fixed timers, PFC-lossless switches (default thresholds) with ECN at dequeue. The traffic is a
cross-leaf permutation of ``--size`` per host. Each ``ack_every`` (64, the profile's, and 1, one ACK
per unit) runs on both kernels ``--repeat`` times; the figure kept is the best engine wall time
(``summary.run.wall_time_s``: the event loop, not scenario parsing or tables). Every table, the
summary and the event count of the compiled runs are asserted identical to heap's, and the
compiled runs to be compiled. ACKs saved: the control packets the receivers sent
(``summary.conservation.control.sent_packets``: ACKs and NAKs) at ``ack_every: 1`` minus those at
``ack_every: 64``, and the control packet-hops the links carried.

    taskset -c 0 python3 benchmarks/bench_ack_coalescing.py --out benchmarks/results/ack_coalescing_speed.json
"""
from __future__ import annotations

import argparse
import gc
import json
import sys
import time

import fabricsim


def scenario(ack_every: int, kernel: str, size: str) -> dict:
    return {
        "name": f"bench_ack_coalescing_{ack_every}",
        "topology": {"kind": "leaf_spine", "hosts_per_leaf": 16, "leaves": 8, "spines": 16,
                     "host_link": {"rate": "400Gbps", "delay": "500ns"},
                     "fabric_link": {"rate": "400Gbps", "delay": "500ns"}, "switch_latency": "600ns"},
        "traffic": {"pattern": "permutation", "locality": "cross_leaf", "message_size": size, "qps_per_message": 1},
        "routing": {"policy": "ecmp"},
        "receiver": {"model": "go_back_n", "rto_mode": "fixed", "ack_every": ack_every},
        "congestion_control": {"algorithm": "none"},
        "switch": {"pfc": {"enabled": True}, "ecn": {"enabled": True, "sample": "dequeue"}},
        "simulation": {"seed": 1, "kernel": kernel, "time_limit": "1s"},
        "outputs": {"link_sample_interval": "off"},
    }


def _identical(a, b) -> None:
    import pandas as pd
    for t in ("messages", "links", "latency", "goodput", "nics"):
        pd.testing.assert_frame_equal(getattr(a, t), getattr(b, t))

    def comparable(d):
        return {k: comparable(v) if isinstance(v, dict) else v for k, v in d.items()
                if "wall" not in k and not k.endswith("_per_s") and k != "kernel"}
    assert comparable(a.summary) == comparable(b.summary)
    assert a.summary["run"]["events"] == b.summary["run"]["events"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="4MiB", help="message size per host")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    # the compiled core is loaded (or compiled) once, before any timed run
    t0 = time.perf_counter()
    fabricsim.run({**scenario(64, "compiled", "64KiB"), "topology": {"kind": "leaf_spine", "hosts_per_leaf": 2,
                                                                     "leaves": 2, "spines": 1}})
    out = {"command": " ".join(sys.argv), "size": args.size, "repeat": args.repeat,
           "compiled_warm_up_s": time.perf_counter() - t0, "runs": []}
    for ack_every in (64, 1):
        res = {}
        for kernel in ("heap", "compiled"):
            walls = []
            for _ in range(args.repeat):
                gc.collect()
                r = fabricsim.run(scenario(ack_every, kernel, args.size))
                walls.append(r.summary["run"]["wall_time_s"])
            res[kernel] = r
            run = r.summary["run"]
            assert run["kernel"]["ran"] == kernel, run["kernel"]
            row = {"ack_every": ack_every, "kernel": kernel, "engine_s_best": min(walls), "engine_s_all": walls,
                   "status": r.summary["status"], "events": run["events"], "end_ps": run["end_ps"],
                   "control_packets_sent": r.summary["conservation"]["control"]["sent_packets"],
                   "naks": int(r.messages["naks"].sum()),
                   "data_packet_hops": run["packet_hops_data"], "control_packet_hops": run["packet_hops_control"],
                   "pfc_pause_events": int(r.links["pfc_pause_events"].sum()),
                   "retransmission_timeouts": run["retransmission_timeouts"]}
            out["runs"].append(row)
            print(json.dumps(row), flush=True)
        _identical(res["heap"], res["compiled"])
    by = {(r["ack_every"], r["kernel"]): r for r in out["runs"]}
    for ae in (64, 1):
        out[f"speedup_ack_every_{ae}"] = by[(ae, "heap")]["engine_s_best"] / by[(ae, "compiled")]["engine_s_best"]
    out["control_packets_saved"] = by[(1, "heap")]["control_packets_sent"] - by[(64, "heap")]["control_packets_sent"]
    out["control_packet_hops_saved"] = by[(1, "heap")]["control_packet_hops"] - by[(64, "heap")]["control_packet_hops"]
    print(json.dumps({k: v for k, v in out.items() if k != "runs"}, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
