"""htsim side by side: the same 128-host permutation in htsim and in fabricsim's packet engine,
wall time and fraction of ideal for both, per routing policy (issue 15, "htsim side by side").

Workload: ``bench_routing.py``'s ``128`` fabric (the htsim comparison case): 16 leaves x 8 hosts,
8 spines, 400G, 1 us links, 600 ns switches (fabricsim's default), a cross-leaf permutation of
8 MB (8,000,000 B) per host, seed 1. The flows htsim runs are fabricsim's: the scenario's
generated messages written by ``fabricsim interop cm-export`` (or, with ``--cm FILE``, an htsim
connection matrix read by ``fabricsim interop cm-import``, replayed by fabricsim as a trace and
exported back for htsim). The script checks that htsim reports the same (src, dst, size)
connections as fabricsim's messages table.

Which htsim binary: ``htsim_roce`` (sim/datacenter/main_roce.cpp). It is htsim's model of
RoCEv2 without congestion control: the sender paces MTU packets at line rate, the receiver
ACKs every packet, and the fabric is lossless (PFC, ``LosslessInputQueue``). That is fabricsim's
default transport (no CC, one ACK per packet, 4 KiB MTU RoCEv2 packets) except for two models
htsim_roce does not offer, so the script runs fabricsim twice per policy:

* ``fabricsim (as htsim_roce)``: ``receiver: go_back_n`` (htsim RoceSink: NAK on any gap,
  sender goes back to the NAKed PSN) and ``switch.pfc`` with htsim's thresholds converted to
  bytes (``-pfc_thresholds 27 33`` x 4096 B = 110,592 / 135,168 B; fabricsim's defaults are
  htsim's 12/15 x 9000 B). The wall-time ratio is taken against this run;
* ``fabricsim (default)``: the scenario as ``bench_routing.py`` runs it: DDP receiver (any
  order), lossy 2 MiB drop-tail ports, SACK/RACK. No htsim binary has both an out-of-order
  receiver and no congestion control (htsim_eqds / htsim_ndp spray with receiver-driven credits
  and packet trimming), so this row has no htsim twin; it is printed for the model difference.

Policies (htsim_roce ``-strat``; main_roce forces per-flowlet stickiness for switch AR):

=============  ===================================================  ==============================
label          htsim_roce                                           fabricsim ``routing``
=============  ===================================================  ==============================
ecmp           ``-strat ecmp_host`` (switch hash of flow id and a   ``ecmp``
               per-flow random path id)
spray          ``-strat ecmp_rr`` (per-packet round robin at every  ``spray`` (uniform random per
               switch, order reshuffled every 5 x ports packets)    packet at every switch)
adaptive       ``-strat ecmp_ar -ar_sticky_delta 0`` (queue grades  ``adaptive`` with ``remote:
               0-3, uniform among best; with delta 0 a packet       false`` (htsim has no remote
               re-paths with probability 1/2, only to a strictly   congestion reports)
               better port)
flowlet        ``-strat ecmp_ar`` (main_roce default: re-path after ``flowlet`` (gap 10 us)
               a 10 us gap, coin flip, only if better)
=============  ===================================================  ==============================

Parameters mapped (htsim flag = fabricsim key): ``-nodes 128 -tiers 2`` = 16 leaves x 8 hosts,
8 spines (htsim's 2-tier fat tree with K = 16); ``-linkspeed 400000`` (Mb/s) = 400Gbps;
``-hop_latency 1`` (us) = link delay 1us; ``-switch_latency 0.6`` = switch_latency 600ns (the
fabricsim default); ``-mtu 4096`` = simulation.mtu 4KiB payload; ``-q 512`` (packets of 4096 B
= 2 MiB per egress queue) = the 2 MiB per-port buffer; ``-end 100000`` (us) = a time limit far
beyond any run. Not matchable: htsim's packet is 4096 + 64 B and its ACK 64 B (fabricsim 4096 +
82 B RoCEv2 headers, 86 B ACK); htsim sends the last packet full size (8,003,584 B per flow);
htsim's PFC response is immediate after the pause frame's flight (fabricsim adds the 802.3
Annex 31B response, 1.16 us at 400G); htsim's host queue is ``-host_queue_type prio`` here
because the default ``fair_prio`` aborts under ``ecmp_rr`` (``FairPriorityQueue::beginService``
assertion) -- with one flow per host the two are the same; and htsim_roce's random choices are
seeded by the clock, not ``-seed`` (``RoceSrc``'s constructor calls ``srand(time(NULL))``,
which in glibc reseeds ``random()``), so its ECMP placement changes from run to run.

Fraction of ideal (the same definition for both): ideal = the per-host payload at line rate,
``8,000,000 B x 8 / 400 Gb/s = 160 us`` (no headers, no latency); fraction = ideal / T, T the
completion of the last flow from time 0. fabricsim's T is the last payload byte at its receiver
(``end_ps``); htsim's is the sender's last ACK (``Flow ... finished at T``, main_roce prints no
receiver time), about 6 us later on an idle path. ``vs alone`` divides instead by each
simulator's own time for one flow alone on the idle fabric (fabricsim: ``ideal_fct_ps``, exact;
htsim: a one-connection run), which cancels headers and the completion definition;
``fabricsim completion_time_ratio`` is fabricsim's own figure (docs/metrics.md).

Timing: wall time of each run, best of ``--repeat`` (3); a run that took over ``--long`` (60) s
is timed once. htsim: the process (set-up included); fabricsim: ``fabricsim.run(scenario)`` in a
fresh interpreter that has already imported fabricsim (set-up, engine and result tables; the
engine alone is ``engine_wall_s``). Pin the whole script to one core::

    HTSIM=/work/htsim/sim/datacenter/htsim_roce taskset -c 1 python3 benchmarks/bench_htsim.py
    taskset -c 1 python3 benchmarks/bench_htsim.py --policies ecmp        # no HTSIM: fabricsim only

Writes ``benchmarks/results/htsim_side_by_side.json`` (``--out``) with the command line, date,
machine, htsim commit and every htsim command line, and prints a table. Without ``HTSIM`` (or
if the binary is missing) it says so and runs the fabricsim side only.

htsim build used for the recorded results (Broadcom/csg-htsim 841d9e7be46bb968eece766aa4b6c044c7799f67,
"Revised connection_matrix.h/cpp", 2026-03-23)::

    git clone <csg-htsim> /work/htsim && cd /work/htsim && git checkout HEAD -- sim
    cd sim && make libhtsim.a && cd datacenter && make htsim_roce     # g++ -O3 lib, -O2 mains
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent

LINE_RATE_BPS = 400 * 10**9
MTU = 4096
PFC_XON_PKTS, PFC_XOFF_PKTS = 27, 33          # htsim -pfc_thresholds LOW HIGH, in MTU packets

POLICIES = {
    "ecmp": {"fabricsim": {"policy": "ecmp"}, "htsim": ["-strat", "ecmp_host"]},
    "spray": {"fabricsim": {"policy": "spray"}, "htsim": ["-strat", "ecmp_rr"]},
    "adaptive": {"fabricsim": {"policy": "adaptive", "remote": False},
                 "htsim": ["-strat", "ecmp_ar", "-ar_sticky_delta", "0", "-ar_method", "queue"]},
    "flowlet": {"fabricsim": {"policy": "flowlet", "gap": "10us"},
                "htsim": ["-strat", "ecmp_ar", "-ar_method", "queue"]},
}

VARIANTS = {
    "as_htsim_roce": {"receiver": {"model": "go_back_n"},
                      "switch": {"pfc": {"enabled": True, "xoff": f"{PFC_XOFF_PKTS * MTU}B",
                                         "xon": f"{PFC_XON_PKTS * MTU}B"}}},
    "default": {},
}


def scenario(policy: str, variant: str, seed: int, trace: str | None = None, kernel: str | None = None) -> dict:
    """bench_routing.py's ``128`` fabric with the policy's routing and the variant's settings
    (``kernel``: ``simulation.kernel``, the engine's default if None)."""
    sys.path.insert(0, str(HERE))
    from bench_routing import fabric
    sc = fabric("128", dict(POLICIES[policy]["fabricsim"]), seed)
    sc["name"] = f"htsim-{policy}-{variant}"
    sc.update(json.loads(json.dumps(VARIANTS[variant])))
    if trace:
        sc["traffic"] = {"pattern": "trace", "path": trace}
    if kernel:
        sc.setdefault("simulation", {})["kernel"] = kernel
    return sc


def htsim_args(binary: str, cm: str, nodes: int, policy: str, log: str) -> list[str]:
    return [binary, "-nodes", str(nodes), "-tiers", "2", "-tm", cm, "-paths", "256",
            "-linkspeed", str(LINE_RATE_BPS // 10**6), "-mtu", str(MTU), "-hop_latency", "1",
            "-switch_latency", "0.6", "-q", "512", "-pfc_thresholds", str(PFC_XON_PKTS),
            str(PFC_XOFF_PKTS), "-host_queue_type", "prio", "-end", "100000", "-o", log,
            *POLICIES[policy]["htsim"]]


FLOW_DONE = re.compile(r"^Flow (\S+) \d+ finished at ([0-9.eE+-]+) total bytes (\d+)")
CONNECTION = re.compile(r"^Connection (\d+)->(\d+) starting at \S+ size (\d+)")


def run_htsim(args: list[str], cwd: str) -> dict:
    """One htsim process: wall time, flows finished, last finish (us), the connections it read."""
    t0 = time.perf_counter()
    p = subprocess.run(args, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    done, conns, rtx = [], [], None
    for line in p.stdout.splitlines():
        if m := FLOW_DONE.match(line):
            done.append(float(m.group(2)))
        elif m := CONNECTION.match(line):
            conns.append((int(m.group(1)), int(m.group(2)), int(m.group(3))))
        elif line.startswith("New:") and "Rtx:" in line:
            rtx = line.split("Rtx:")[1].strip()
    out = {"wall_s": wall, "returncode": p.returncode, "flows_finished": len(done),
           "flows_total": len(conns), "last_finish_us": max(done) if done else None,
           "rtx_reported": rtx, "connections": conns}
    if p.returncode:
        out["stderr_tail"] = p.stderr.strip().splitlines()[-3:]
    return out


FABRICSIM_CHILD = r"""
import json, sys, time
import fabricsim
sc, out = json.loads(sys.argv[1]), sys.argv[2]
t0 = time.perf_counter()
res = fabricsim.run(sc, output_dir=out)
wall = time.perf_counter() - t0
s = res.summary
m = res.messages
print(json.dumps({"wall_s": wall, "engine_wall_s": s["run"]["wall_time_s"], "status": s["status"],
    "last_end_ps": s["pattern"]["last_end_ps"], "ideal_duration_ps": s["pattern"]["ideal_duration_ps"],
    "alone_ps": int(m["ideal_fct_ps"].max()),
    "completion_time_ratio": s["effective_bandwidth"]["completion_time_ratio"],
    "messages_completed": s["messages"]["completed"], "messages_total": s["messages"]["total"],
    "events": s["run"]["events"], "packet_hops": s["run"]["packet_hops"], "kernel": s["run"]["kernel"],
    "drops": s["run"]["dropped_packets"], "retransmitted_payload_bytes": s["run"]["retransmitted_payload_bytes"],
    "pfc_pause_events": s["run"]["pfc_pause_events"],
    "connections": sorted(zip(m["src"].tolist(), m["dst"].tolist(), m["size_bytes"].tolist()))}))
"""


def run_fabricsim(sc: dict, out: pathlib.Path) -> dict:
    p = subprocess.run([sys.executable, "-c", FABRICSIM_CHILD, json.dumps(sc), str(out)], cwd=REPO,
                       capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(f"fabricsim run failed: {p.stderr.strip()[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def timed(fn, repeat: int, long_s: float) -> tuple[dict, list[float], list[dict]]:
    """Best of ``repeat`` runs of ``fn()`` by wall time; one run if the first exceeds ``long_s``."""
    runs = [fn()]
    while len(runs) < repeat and runs[0]["wall_s"] <= long_s:
        runs.append(fn())
    best = min(runs, key=lambda r: r["wall_s"])
    return best, [r["wall_s"] for r in runs], runs


def cm_export(source: str, out: str, nodes: int | None = None) -> str:
    cmd = [sys.executable, "-m", "fabricsim", "interop", "cm-export", source, out]
    if nodes:
        cmd += ["--nodes", str(nodes)]
    subprocess.run(cmd, cwd=REPO, check=True, capture_output=True, text=True)
    return shlex.join(cmd[2:])


def git_commit(binary: str) -> str | None:
    d = pathlib.Path(binary).resolve().parent
    p = subprocess.run(["git", "-C", str(d), "rev-parse", "HEAD"], capture_output=True, text=True)
    return p.stdout.strip() or os.environ.get("HTSIM_COMMIT")


def machine() -> dict:
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")),
               platform.processor()) if os.path.exists("/proc/cpuinfo") else platform.processor()
    return {"host": platform.node(), "platform": platform.platform(), "cpu": cpu, "cpus": os.cpu_count(),
            "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "loadavg_start": os.getloadavg(), "python": platform.python_version()}


def fmt(x, spec=".3f"):
    return "-" if x is None else format(x, spec)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--policies", nargs="+", default=list(POLICIES), choices=list(POLICIES))
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per case, best kept (3)")
    ap.add_argument("--long", type=float, default=60.0, help="a case whose first run exceeds this many s is run once")
    ap.add_argument("--cm", help="an htsim connection matrix to run instead of the generated permutation "
                                 "(read through fabricsim interop cm-import)")
    ap.add_argument("--kernels", nargs="+", default=["heap"], choices=["heap", "simpy", "compiled"],
                    help="fabricsim's packet kernels (simulation.kernel), one row each (default heap); a "
                         "compiled run that falls back to heap says so in its row")
    ap.add_argument("--out", default=str(HERE / "results" / "htsim_side_by_side.json"))
    args = ap.parse_args()
    if "compiled" in args.kernels:
        # numba compiles the core on first use (about a minute) and caches it on disk: pay that
        # before any timed run, on a tiny case
        warm = scenario(args.policies[0], args.variants[0], args.seed, kernel="compiled")
        warm["traffic"] = {**warm["traffic"], "message_size": "64KiB"}
        with tempfile.TemporaryDirectory(prefix="bench_htsim_warm_") as tmp:
            run_fabricsim(warm, pathlib.Path(tmp) / "warm")

    binary = os.environ.get("HTSIM")
    htsim_note = None
    if not binary:
        htsim_note = "HTSIM not set: htsim was not run (set HTSIM=path/to/htsim_roce)"
    elif not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        htsim_note = f"HTSIM={binary} is not an executable file: htsim was not run"
        binary = None
    if htsim_note:
        print(f"NOTE: {htsim_note}; running the fabricsim side only.", flush=True)

    ideal_ps = None
    rows, htsim_cmds, export_cmds = [], [], []
    with tempfile.TemporaryDirectory(prefix="bench_htsim_") as tmp:
        tmpd = pathlib.Path(tmp)
        trace = None
        if args.cm:
            trace = str(tmpd / "imported.parquet")
            subprocess.run([sys.executable, "-m", "fabricsim", "interop", "cm-import", args.cm, trace],
                           cwd=REPO, check=True, capture_output=True, text=True)
            export_cmds.append(f"fabricsim interop cm-import {args.cm} imported.parquet")
        alone = None
        for policy in args.policies:
            import yaml
            cm = tmpd / f"{policy}.cm"
            sc_file = tmpd / f"{policy}.yaml"
            sc_file.write_text(yaml.safe_dump(scenario(policy, args.variants[0], args.seed, trace), sort_keys=False))
            export_cmds.append(cm_export(str(sc_file), str(cm)))
            nodes = int(cm.read_text().split()[1])
            for variant, kernel in ((v, k) for v in args.variants for k in args.kernels):
                sc = scenario(policy, variant, args.seed, trace, kernel)
                print(f"fabricsim {policy:<9} {variant:<14} {kernel:<8}", end=" ", flush=True)
                best, walls, _ = timed(lambda: run_fabricsim(sc, tmpd / f"fs_{policy}_{variant}_{kernel}"), args.repeat,
                                       args.long)
                conns = best.pop("connections")
                size = max(c[2] for c in conns)
                ideal_ps = size * 8 * 10**12 // LINE_RATE_BPS
                T = best["last_end_ps"] if best["status"] == "complete" else None
                ran = best["kernel"]
                row = {"simulator": "fabricsim", "variant": variant, "policy": policy, "scenario": sc,
                       "kernel_requested": kernel,
                       "kernel_ran": ran.get("ran", kernel) if isinstance(ran, dict) else kernel,
                       "wall_s": best["wall_s"], "wall_runs_s": walls, "completion_us": T / 1e6 if T else None,
                       "fraction_of_ideal": ideal_ps / T if T else None,
                       "vs_alone": best["alone_ps"] / T if T else None, **best}
                rows.append(row)
                print(f"wall {best['wall_s']:.2f} s (runs {', '.join(f'{w:.2f}' for w in walls)}; engine "
                      f"{best['engine_wall_s']:.2f} s on {row['kernel_ran']})  "
                      f"T {fmt(row['completion_us'], '.1f')} us  fraction {fmt(row['fraction_of_ideal'])}", flush=True)
            if binary:
                if alone is None:   # one flow alone on the idle fabric, in htsim's own terms
                    first = [ln for ln in cm.read_text().splitlines() if "->" in ln][0]
                    one = tmpd / "alone.cm"
                    one.write_text(f"Nodes {nodes}\nConnections 1\n{first}\n")
                    cmd = htsim_args(binary, str(one), nodes, "ecmp", str(tmpd / "alone.dat"))
                    a = run_htsim(cmd, tmp)
                    alone = a["last_finish_us"]
                    htsim_cmds.append({"case": "alone", "argv": shlex.join(cmd)})
                cmd = htsim_args(binary, str(cm), nodes, policy, str(tmpd / f"{policy}.dat"))
                htsim_cmds.append({"case": policy, "argv": shlex.join(cmd)})
                print(f"htsim     {policy:<9} {'htsim_roce':<14}", end=" ", flush=True)
                best, walls, runs = timed(lambda: run_htsim(cmd, tmp), args.repeat, args.long)
                same = sorted(map(tuple, best["connections"])) == sorted(map(tuple, conns))
                best.pop("connections")
                for r in runs:
                    r.pop("connections", None)
                complete = best["returncode"] == 0 and best["flows_finished"] == best["flows_total"] > 0
                T = best["last_finish_us"] if complete else None
                row = {"simulator": "htsim", "variant": "htsim_roce", "policy": policy, "argv": shlex.join(cmd),
                       "same_connections_as_fabricsim": same, "wall_s": best["wall_s"], "wall_runs_s": walls,
                       "completion_us": T, "fraction_of_ideal": ideal_ps / (T * 1e6) if T else None,
                       "vs_alone": alone / T if T and alone else None, "alone_us": alone,
                       "completion_runs_us": [r["last_finish_us"] for r in runs], **best}
                rows.append(row)
                print(f"wall {best['wall_s']:.2f} s (runs {', '.join(f'{w:.2f}' for w in walls)})  "
                      f"T {fmt(T, '.1f')} us  fraction {fmt(row['fraction_of_ideal'])}  "
                      f"same flows: {same}", flush=True)
                if not same:
                    print("WARNING: htsim read other connections than fabricsim ran", flush=True)

    # the table
    print(f"\nideal = per-host payload at line rate = {fmt(ideal_ps and ideal_ps / 1e6, '.1f')} us; "
          "fraction = ideal / last completion; vs alone = the simulator's own one-flow time / last completion")
    hdr = ("policy", "simulator", "wall s", "engine s", "T us", "fraction", "vs alone", "fs CTR", "htsim/fabricsim wall")
    print(" | ".join(hdr))
    ratios = {}
    for policy in args.policies:
        h = next((r for r in rows if r["simulator"] == "htsim" and r["policy"] == policy), None)
        for r in (x for x in rows if x["policy"] == policy):
            kern = r.get("kernel_ran")
            if r["simulator"] == "fabricsim" and r.get("kernel_requested") != kern:
                kern = f"{r['kernel_requested']} -> {kern}"      # fell back: outside the compiled core's coverage
            name = "htsim_roce" if r["simulator"] == "htsim" else f"fabricsim ({r['variant']}, {kern})"
            ratio = None
            if h and r["simulator"] == "fabricsim":
                ratio = h["wall_s"] / r["wall_s"]
                ratios[f"{policy}/{r['variant']}/{r['kernel_requested']}"] = ratio
            print(" | ".join([policy, name, f"{r['wall_s']:.2f}", fmt(r.get("engine_wall_s"), ".2f"),
                              fmt(r["completion_us"], ".1f"),
                              fmt(r["fraction_of_ideal"]), fmt(r["vs_alone"]),
                              fmt(r.get("completion_time_ratio")), fmt(ratio, ".2f")]))
    if htsim_note:
        print(f"\n{htsim_note}")

    result = {
        "command": shlex.join([sys.executable, *sys.argv]), "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": machine(), "htsim_binary": binary, "htsim_commit": git_commit(binary) if binary else None,
        "htsim_note": htsim_note, "htsim_command_lines": htsim_cmds, "cm_commands": export_cmds,
        "ideal_ps": ideal_ps,
        "ideal_definition": "per-host payload bytes x 8 / 400 Gb/s (no headers, no latency), the same for both; "
                            "fraction_of_ideal = ideal / completion of the last flow (fabricsim: last payload byte "
                            "at the receiver; htsim: the sender's last ACK)",
        "policies": POLICIES, "variants": VARIANTS, "wall_ratio_htsim_over_fabricsim": ratios, "rows": rows,
    }
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
