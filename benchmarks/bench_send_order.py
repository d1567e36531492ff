"""Send order of an MoE dispatch at scale: the issue's own measurement.

The issue: "At EP256 with 128 tokens per rank, a dispatch takes 2.7-3x longer with the ascending
order (drops and timeouts) than with each sender's messages in random order; inside one NVL72
rack (EP36) 25% longer."

Workload: ``fabricsim trace moe`` with the DeepSeek-V3 preset (node-limited to 4 nodes of 8 GPUs,
FP8 dispatch 7,392 B per token copy, ``copies: per_gpu``, ``connections: persistent``), one layer,
``ep_size = gpus = EP``, ``tokens_per_gpu`` tokens per GPU, only the dispatch messages
(``phase == "dispatch"``, as docs/traces.md "Measured send-order effect" does), for each
``send_order`` (``staggered``, ``random``, ``ascending``) and trace seed. Each trace is replayed on:

* ``leaf_spine_raw``: a non-blocking leaf-spine of ``leaves x hosts_per_leaf`` hosts with
  ``spines`` spines and every other setting from ``scenarios/leaf_spine_32_raw.yaml`` (profile
  ``none``: per-flow ECMP, DDP receiver, no congestion control, lossy drop-tail 2 MiB per port,
  fixed IRN timers, 400G, 500 ns links, 600 ns switches; its topology size is replaced, and
  ``--buffer SIZE`` replaces the per-port buffer);
* ``leaf_spine_spectrum_x``: the same topology with ``profile: spectrum_x`` (the raw file's
  routing / receiver / congestion-control keys removed so the profile's apply);
* ``nvl72``: one NVL72 rack (``kind: cluster, domain: nvl72``, one 400G NIC per GPU, the NVLink
  defaults), ``gpus_per_node: 72``, EP ``--nvl-ep`` (the issue's EP36 is not valid for 256 experts:
  ``ep_size`` must divide ``experts``; 32 is the nearest divisor).

Reported per case: dispatch duration (``summary["pattern"]["duration_ps"]``),
``completion_time_ratio``, dropped packets, retransmission timeouts, retransmitted bytes,
the largest queue any port reached, messages completed, wall time; and each order's duration against ``random`` and ``staggered``.

    python3 benchmarks/bench_send_order.py                        # EP256, 128 tokens, seed 1
    python3 benchmarks/bench_send_order.py --seeds 1 2 --cases nvl72
    python3 benchmarks/bench_send_order.py --cases leaf_spine_raw --buffer 256KiB --out results/x.json

Prints a table and writes ``benchmarks/results/send_order.json`` (configuration and figures).
"""
from __future__ import annotations

import argparse
import copy
import json
import pathlib
import platform
import tempfile
import time

import yaml

import fabricsim
from fabricsim.traces import Trace, write_trace
from fabricsim.traces.moe import MoeTraceConfig, generate_moe_trace

ROOT = pathlib.Path(__file__).resolve().parents[1]
RAW = ROOT / "scenarios" / "leaf_spine_32_raw.yaml"
ORDERS = ("staggered", "random", "ascending")
CASES = ("leaf_spine_raw", "leaf_spine_spectrum_x", "nvl72")


def dispatch_records(ep: int, tokens: int, seed: int, order: str, gpus_per_node: int = 8):
    cfg = MoeTraceConfig(model="deepseek-v3", ep_size=ep, gpus=ep, gpus_per_node=gpus_per_node,
                         tokens_per_gpu=tokens, layers=1, seed=seed, send_order=order)
    return cfg, [r for r in generate_moe_trace(cfg).trace.records if r.phase == "dispatch"]


def scenario(case: str, path: str, args) -> dict:
    if case == "nvl72":
        return {"name": f"send_order_{case}",
                "topology": {"kind": "cluster", "domain": "nvl72", "gpus": args.nvl_ep,
                             "nic": {"ports": 1, "rate": "400Gbps"}},
                "traffic": {"pattern": "trace", "path": path},
                "simulation": {"seed": 1, "time_limit": args.time_limit}}
    sc = yaml.safe_load(RAW.read_text())
    sc.pop("outputs", None)
    sc["name"] = f"send_order_{case}"
    sc["topology"].update(hosts_per_leaf=args.hosts_per_leaf, leaves=args.leaves, spines=args.spines)
    if args.buffer:
        sc["topology"]["buffer"] = {"size": args.buffer}
    sc["traffic"] = {"pattern": "trace", "path": path}
    sc["simulation"]["time_limit"] = args.time_limit
    if case == "leaf_spine_spectrum_x":
        sc["profile"] = "spectrum_x"
        for k in ("routing", "receiver", "congestion_control"):
            sc.pop(k, None)
    return sc


def measure(sc: dict) -> dict:
    t0 = time.perf_counter()
    res = fabricsim.run(sc)
    wall = time.perf_counter() - t0
    s = res.summary
    tr = s.get("transport", {})
    d = s["pattern"]["duration_ps"]
    return {"duration_us": d / 1e6 if d is not None else None,
            "completion_time_ratio": s["effective_bandwidth"]["completion_time_ratio"],
            "drops": s["drops"]["packets"],
            "retransmission_timeouts": tr.get("retransmission_timeouts"),
            "retransmitted_bytes": tr.get("retransmitted_bytes"),
            "rtx_timeout_bytes": tr.get("retransmitted_bytes_by_cause", {}).get("timeout"),
            "messages": int(len(res.messages)), "messages_completed": int(res.messages["completed"].sum()),
            "max_peak_queue_bytes": s["links"]["max_peak_queue_bytes"],
            "status": s["run"]["status"], "wall_s": round(wall, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1], help="trace seeds")
    ap.add_argument("--ep", type=int, default=256, help="EP size (= GPUs) on the leaf-spine")
    ap.add_argument("--tokens", type=int, default=128, help="tokens per GPU")
    ap.add_argument("--hosts-per-leaf", type=int, default=16)
    ap.add_argument("--leaves", type=int, default=16)
    ap.add_argument("--spines", type=int, default=16)
    ap.add_argument("--nvl-ep", type=int, default=32, help="EP size inside the NVL72 rack (a divisor of 256)")
    ap.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    ap.add_argument("--orders", nargs="+", choices=ORDERS, default=list(ORDERS))
    ap.add_argument("--time-limit", default="200ms")
    ap.add_argument("--buffer", default=None,
                    help="leaf-spine switch buffer per egress port (default: the raw file's, i.e. 2 MiB)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "send_order.json"),
                    help="'-' writes nothing")
    args = ap.parse_args()
    if "leaf_spine_raw" in args.cases or "leaf_spine_spectrum_x" in args.cases:
        assert args.ep <= args.hosts_per_leaf * args.leaves, "more GPUs than hosts"

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="send_order_"))
    rows = []
    for seed in args.seeds:
        for case in args.cases:
            ep, gpn = (args.nvl_ep, 72) if case == "nvl72" else (args.ep, 8)
            for order in args.orders:
                cfg, recs = dispatch_records(ep, args.tokens, seed, order, gpn)
                path = write_trace(Trace(recs, "moe"), tmp / f"ep{ep}_t{args.tokens}_s{seed}_{order}.parquet")
                row = {"seed": seed, "case": case, "order": order, "ep_size": ep, "gpus_per_node": gpn,
                       "tokens_per_gpu": args.tokens, "dispatch_messages": len(recs),
                       "dispatch_bytes": sum(r.size_bytes for r in recs)}
                row.update(measure(scenario(case, str(path), args)))
                rows.append(row)
                print(json.dumps(row), flush=True)

    by = {(r["seed"], r["case"], r["order"]): r for r in rows}
    for r in rows:
        for ref in ("random", "staggered"):
            b = by.get((r["seed"], r["case"], ref))
            r[f"vs_{ref}"] = (r["duration_us"] / b["duration_us"]
                              if b and r["duration_us"] and b["duration_us"] else None)

    f = lambda v, p=2: "-" if v is None else (f"{v:.{p}f}" if isinstance(v, float) else str(v))  # noqa: E731
    hdr = ("seed", "case", "order", "EP", "duration_us", "vs_random", "vs_stagg", "ct_ratio", "drops",
           "rto", "rtx_bytes", "peak_q_KiB", "done", "wall_s")
    print("\n" + " | ".join(hdr))
    for r in rows:
        print(" | ".join([str(r["seed"]), r["case"], r["order"], str(r["ep_size"]), f(r["duration_us"]),
                          f(r["vs_random"], 3), f(r["vs_staggered"], 3), f(r["completion_time_ratio"], 3),
                          f(r["drops"]), f(r["retransmission_timeouts"]), f(r["retransmitted_bytes"]),
                          f(r["max_peak_queue_bytes"] / 1024, 0) if r["max_peak_queue_bytes"] is not None else "-",
                          f"{r['messages_completed']}/{r['messages']}", f(r["wall_s"], 1)]))
    if args.out != "-":
        cfg = {"command": "python3 benchmarks/bench_send_order.py " + " ".join(
                   f"--{k.replace('_', '-')} {' '.join(map(str, v)) if isinstance(v, list) else v}"
                   for k, v in vars(args).items() if k != "out" and v is not None),
               "model": "deepseek-v3", "layers": 1, "phase": "dispatch", "raw_base": str(RAW.relative_to(ROOT)),
               "scenarios": {c: scenario(c, "<trace>", args) for c in args.cases},
               "python": platform.python_version()}
        pathlib.Path(args.out).write_text(json.dumps({"config": cfg, "rows": rows}, indent=1) + "\n")
        print("wrote", args.out)


if __name__ == "__main__":
    main()
