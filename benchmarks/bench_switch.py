#!/usr/bin/env python3
"""Switch and DCQCN models on the standard cases: what each model choice changes.

Usage::

    python3 benchmarks/bench_switch.py                  # writes benchmarks/results/switch.json
    python3 benchmarks/bench_switch.py --quick          # smaller incast (8 -> 1), a few seconds
    python3 benchmarks/bench_switch.py --hotpath BEFORE.json AFTER.json
        # also record the hot-path cost: two outputs of benchmarks/bench_packet.py (--quick
        # --no-simpy --routing ecmp adaptive), one run on the code before the switch changes and
        # one after; the ratio of engine events/s (each normalised by its own bare-heapq loop)

Cases (all 400G, 500 ns links, 600 ns switch latency, seed 1):

* ``incast``: 32 -> 1 (``--quick``: 8 -> 1) on a 6-leaf x 8-host, 8-spine leaf-spine, 2 MiB each,
  ECMP, DDP receiver with a 1 ms RTO, for congestion control none / dcqcn (paper) / dcqcn_cx
  (ConnectX), in lossless (PFC) and lossy mode (dynamic-threshold buffer). Figures: drops, peak
  egress queue, PFC pauses, ECN marks, CNPs, last completion.
* ``buffer``: static 2 MiB per egress port against the dynamic threshold (alpha 1 over the same
  total memory, 2 MiB x ports) on the quickstart ECMP permutation and on the lossy incast, no CC.
* ``ecn_sample``: dequeue against enqueue ECN sampling on the lossless dcqcn_cx incast.
* ``profiles``: the incast under candidate profile settings: ``spectrum_x`` (PFC, telemetry CC,
  adaptive routing), ``spectrum_x_lossy`` (dynamic-threshold buffer instead of PFC), ``ethernet``
  (PFC, ConnectX DCQCN, ECMP) and ``ethernet_paper_dcqcn``.
* ``cx_sensitivity``: the lossless dcqcn_cx incast with one setting changed: HPCC ns-3's 400G ECN
  thresholds, rpg_byte_reset in isekai's 64 B units, rpg_min_rate 1 Gb/s.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import fabricsim

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "switch.json"


def _topology(buffer=None):
    topo = {"kind": "leaf_spine", "hosts_per_leaf": 8, "leaves": 6, "spines": 8,
            "host_link": {"rate": "400Gbps", "delay": "500ns"}, "fabric_link": {"rate": "400Gbps", "delay": "500ns"},
            "switch_latency": "600ns"}
    if buffer:
        topo["buffer"] = buffer
    return topo


def incast(senders, cc="none", pfc=False, admission="dynamic", sample="dequeue", size="2MiB"):
    sc = {"name": "bench_incast", "topology": _topology(),
          "traffic": {"pattern": "incast", "senders": senders, "receiver": 0, "message_size": size},
          "routing": {"policy": "ecmp"},
          "receiver": {"model": "ddp", "rto_low": "1ms", "rto_high": "1ms"},
          "congestion_control": {"algorithm": cc},
          "switch": {"pfc": {"enabled": pfc}, "buffer": {"admission": admission}, "ecn": {"sample": sample}},
          "simulation": {"seed": 1, "time_limit": "50ms"}}
    return sc


def quickstart(admission):
    return {"name": "bench_quickstart", "topology": dict(_topology(), leaves=4),
            "traffic": {"pattern": "permutation", "locality": "cross_leaf", "message_size": "4MiB"},
            "routing": {"policy": "ecmp"}, "receiver": {"model": "ddp"}, "congestion_control": {"algorithm": "none"},
            "switch": {"buffer": {"admission": admission}}, "simulation": {"seed": 1, "time_limit": "10ms"}}


def figures(sc) -> dict:
    t0 = time.perf_counter()
    res = fabricsim.run(sc)
    wall = time.perf_counter() - t0
    s, m, L = res.summary, res.messages, res.links
    tr = s["transport"]
    return {
        "completed": int(m["completed"].sum()), "messages": len(m),
        "incomplete_reasons": {str(k): int(v) for k, v in m.loc[~m["completed"], "incomplete_reason"].value_counts().items()},
        "last_completion_us": round(float(m["fct_ps"].max()) / 1e6, 2) if m["completed"].all() else None,
        "mean_fct_us": round(float(m["fct_ps"].mean()) / 1e6, 2),
        "drops_packets": int(s["drops"]["packets"]),
        "peak_queue_bytes": int(L["peak_queue_bytes"].max()),
        "pfc_pause_events": int(tr["pfc_pause_events"]),
        "pfc_headroom_used_max_bytes": int((L["pfc_peak_ingress_bytes"] - sc["switch"].get("pfc", {}).get("xoff", 135000)
                                            ).clip(lower=0).max()) if sc["switch"].get("pfc", {}).get("enabled") else 0,
        "pfc_headroom_need_bytes": int(L["pfc_headroom_bytes"].max()),
        "ecn_marked_packets": int(L["ecn_marked_packets"].sum()),
        "cnps": int(tr["cnps"]),
        "retransmitted_bytes": int(tr["retransmitted_bytes"]),
        "wall_s": round(wall, 2),
    }


def hotpath(before_path: str, after_path: str) -> dict:
    """Engine events/s over the bare-heapq reference, before and after, per routing policy."""
    out = {}
    runs = {}
    for tag, path in (("before", before_path), ("after", after_path)):
        data = json.loads(Path(path).read_text())
        for row in data["engine"]:
            if row["kernel"] != "heap":
                continue
            runs.setdefault(row["routing"], {})[tag] = {"events_per_s": row["events_per_s"],
                                                         "events_per_bare": row["events_per_s_over_bare_heapq"]}
    for routing, r in runs.items():
        if "before" in r and "after" in r:
            out[routing] = {**{f"{k}_{tag}": v for tag in ("before", "after") for k, v in r[tag].items()},
                            "ratio_after_over_before": round(r["after"]["events_per_bare"] / r["before"]["events_per_bare"], 3)}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="8 -> 1 incast instead of 32 -> 1")
    ap.add_argument("--hotpath", nargs=2, metavar=("BEFORE", "AFTER"), help="two bench_packet.py JSON outputs")
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args(argv)
    n = 8 if args.quick else 32
    results = {"machine": {"python": sys.version.split()[0], "platform": platform.platform()},
               "senders": n, "incast": {}, "buffer": {}, "ecn_sample": {}, "profiles": {},
               "cx_sensitivity": {}}
    lines = []
    for pfc in (True, False):
        for cc in ("none", "dcqcn", "dcqcn_cx"):
            key = f"{'pfc' if pfc else 'lossy_dt'}/{cc}"
            r = results["incast"][key] = figures(incast(n, cc, pfc=pfc))
            done = "" if not r["incomplete_reasons"] else f"  NOT DONE {r['incomplete_reasons']}"
            lines.append(f"incast {n}->1 {key:<18} last {r['last_completion_us']} us  drops {r['drops_packets']:>5}  "
                         f"peak q {r['peak_queue_bytes'] / 1e3:8.1f} KB  pauses {r['pfc_pause_events']:>5}  "
                         f"marks {r['ecn_marked_packets']:>6}  cnps {r['cnps']:>5}  rtx {r['retransmitted_bytes'] / 2**20:.1f} MiB{done}")
    for admission in ("static", "dynamic"):
        q = results["buffer"][f"quickstart/{admission}"] = figures(quickstart(admission))
        i = results["buffer"][f"incast/{admission}"] = figures(incast(n, "none", pfc=False, admission=admission))
        for name, r in (("quickstart ecmp", q), (f"incast {n}->1 lossy", i)):
            lines.append(f"buffer {admission:<8} {name:<18} last {r['last_completion_us']} us  drops "
                         f"{r['drops_packets']:>5}  peak q {r['peak_queue_bytes'] / 1e3:8.1f} KB  rtx "
                         f"{r['retransmitted_bytes'] / 2**20:.1f} MiB")
    for sample in ("dequeue", "enqueue"):
        r = results["ecn_sample"][sample] = figures(incast(n, "dcqcn_cx", pfc=True, sample=sample))
        lines.append(f"ecn sample {sample:<8} pfc/dcqcn_cx  last {r['last_completion_us']} us  marks "
                     f"{r['ecn_marked_packets']:>6}  cnps {r['cnps']:>5}  pauses {r['pfc_pause_events']:>5}  "
                     f"peak q {r['peak_queue_bytes'] / 1e3:8.1f} KB")
    for name, cc, routing, pfc in (("spectrum_x", "telemetry", "adaptive", True),
                                   ("spectrum_x_lossy", "telemetry", "adaptive", False),
                                   ("ethernet", "dcqcn_cx", "ecmp", True), ("ethernet_paper_dcqcn", "dcqcn", "ecmp", True)):
        sc = incast(n, cc, pfc=pfc)
        sc["routing"]["policy"] = routing
        r = results["profiles"][name] = figures(sc)
        lines.append(f"profile {name:<21} {cc:<9} {routing:<8} last {r['last_completion_us']} us  drops "
                     f"{r['drops_packets']:>5}  peak q {r['peak_queue_bytes'] / 1e3:8.1f} KB  pauses {r['pfc_pause_events']:>5}")
    for label, cc, sw in (("ecn_1600KB_6400KB", {}, {"ecn": {"kmin": "1600KB", "kmax": "6400KB"}}),
                          ("rpg_byte_reset_2MiB", {"rpg_byte_reset": "2097088B"}, {}),
                          ("rpg_min_rate_1Gbps", {"rpg_min_rate": "1Gbps"}, {})):
        sc = incast(n, "dcqcn_cx", pfc=True)
        sc["congestion_control"].update(cc)
        sc["switch"].update(sw)
        r = results["cx_sensitivity"][label] = figures(sc)
        lines.append(f"dcqcn_cx pfc {label:<20} last {r['last_completion_us']} us  mean {r['mean_fct_us']} us  "
                     f"pauses {r['pfc_pause_events']:>5}  cnps {r['cnps']:>5}")
    if args.hotpath:
        results["hotpath"] = hotpath(*args.hotpath)
        for routing, r in results["hotpath"].items():
            lines.append(f"hot path {routing:<9} events/s after/before (each over its bare heapq loop): "
                         f"{r['ratio_after_over_before']}")
    print("\n".join(lines))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
