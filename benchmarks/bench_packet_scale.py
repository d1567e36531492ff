"""Packet engine scaling curve: 128, 256, 576 and 1,024 hosts, a permutation and an all-to-all,
wall time and peak memory per case (issue 15, "Scaling curve").

Engine: the packet engine (``simulation.engine: packet``, the default) with its default kernel
(``heap``; ``--kernel compiled`` for the compiled core, after one warm-up run that compiles it), profile ``none`` (every model's default: DDP receiver, one ACK per data packet, no
congestion control, lossy drop-tail 2 MiB per port), 4 KiB MTU (4,096 B payload + 82 B RoCEv2
headers), seed 1, ``simulation.time_limit: 100ms`` (the largest case's ideal is 1.4 ms) and
``outputs.link_sample_interval: off`` (no link time series). Routing: ``adaptive`` by default
(``--routing`` takes several; each is a ``routing.policy`` with its defaults).

Fabrics: two-tier leaf-spine, non-blocking (spines = hosts per leaf, one 400G link from every
leaf to every spine), every link 400 Gb/s with 1 us propagation delay, 600 ns switches (the
default) -- ``bench_routing.py``'s ``128`` fabric, grown:

=======  ======  ===============  ======  =============================
hosts    leaves  hosts per leaf   spines  switch ports (leaf / spine)
=======  ======  ===============  ======  =============================
128      16      8                8       16 / 16
256      32      8                8       16 / 32
576      36      16               16      32 / 36
1,024    64      16               16      32 / 64
=======  ======  ===============  ======  =============================

Workloads:

* ``permutation``: ``traffic.pattern: permutation``, ``locality: cross_leaf``, 8 MB
  (8,000,000 B = 1,954 data packets) per host: every flow crosses the spines (4 hops);
* ``all_to_all``: ``traffic.pattern: all_to_all``, 64 KiB (16 data packets) from every host to
  every other host, ``hosts x (hosts - 1)`` messages (intra-leaf pairs take 2 hops).

Each case runs in a fresh interpreter (``PYTHONPATH`` = the source tree measured, see below):
``wall_s`` is measured in the child from before ``import fabricsim`` to the end of
``fabricsim.run(scenario)`` (results kept in memory, no results folder), so it includes the
import (``import_s``), building the fabric and traffic, the engine and the result tables;
``engine_wall_s`` is the engine's own ``summary["run"]["wall_time_s"]``; ``peak_rss_mb`` is
the child's ``resource.getrusage(RUSAGE_SELF).ru_maxrss``. Also recorded: events, packet_hops
(data and control; split when the engine reports ``packet_hops_data`` / ``packet_hops_control``),
status, messages completed / total, completion_time_ratio, routing policy.

``--max-wall`` (1500 s): a case still running after that long is killed and recorded as
``"status": "over --max-wall"`` with the wall time it had used (and its peak RSS from
``wait4``); no figures are made up for it. Cases run from the smallest fabric to the largest;
before a case starts, its wall time is projected linearly in data packets from the previous
size's case of the same workload and routing (a killed case's time used gives a lower bound,
a skipped case's projection is carried forward); a case projected over ``--max-wall`` is not
run and is recorded as ``"status": "skipped (projected over --max-wall)"`` with the projection
and its basis. Projections are labelled as such and are never measurements.

Source tree: ``--src`` (this checkout by default). Unless ``--no-snapshot``, its ``fabricsim/``
package is copied (and byte-compiled) into a temporary directory before the first case, and
every case runs that copy, so that edits made to the checkout during a long run do not mix two
versions of the code in one curve; the JSON records the checkout's commit, its uncommitted
changes under ``fabricsim/`` at snapshot time and a hash of the files measured. Pin to one core::

    taskset -c 1 python3 benchmarks/bench_packet_scale.py                   # 26 min on one core (2026-12-03)
    taskset -c 1 python3 benchmarks/bench_packet_scale.py --hosts 128 256 --routing ecmp adaptive
    python3 benchmarks/bench_packet_scale.py --quick                        # 8 and 16 hosts, seconds

Writes ``benchmarks/results/packet_scale.json`` (``--out``) with the command line, date, machine,
CPU affinity, the shapes and every case; prints a table row per case as it finishes.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import math
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

MTU_PAYLOAD = 4096                       # simulation.mtu default (4 KiB payload per data packet)
#: hosts -> (leaves, hosts per leaf, spines); non-blocking: spines = hosts per leaf
SHAPES = {128: (16, 8, 8), 256: (32, 8, 8), 576: (36, 16, 16), 1024: (64, 16, 16)}
#: --quick: tiny fabrics of the same kind, smaller messages
QUICK_SHAPES = {8: (2, 4, 4), 16: (4, 4, 4)}
SIZES = {"permutation": 8_000_000, "all_to_all": 64 * 1024}
QUICK_SIZES = {"permutation": 256 * 1024, "all_to_all": 16 * 1024}
WORKLOADS = tuple(SIZES)
LINK = {"rate": "400Gbps", "delay": "1us"}
TIME_LIMIT = "100ms"
SEED = 1


def scenario(hosts: int, workload: str, routing: str, shapes: dict, size: int, kernel: str = "heap") -> dict:
    leaves, per_leaf, spines = shapes[hosts]
    assert leaves * per_leaf == hosts and spines == per_leaf, "shapes must be non-blocking"
    traffic = {"pattern": workload, "message_size": f"{size}B"}
    if workload == "permutation":
        traffic["locality"] = "cross_leaf"
    return {"name": f"packet_scale_{hosts}_{workload}_{routing}",
            "topology": {"kind": "leaf_spine", "hosts_per_leaf": per_leaf, "leaves": leaves, "spines": spines,
                         "host_link": dict(LINK), "fabric_link": dict(LINK)},
            "traffic": traffic, "routing": {"policy": routing},
            "simulation": {"engine": "packet", "seed": SEED, "time_limit": TIME_LIMIT, "kernel": kernel},
            "outputs": {"link_sample_interval": "off"}}


def messages_of(hosts: int, workload: str) -> int:
    return hosts if workload == "permutation" else hosts * (hosts - 1)


def data_packets(hosts: int, workload: str, size: int) -> int:
    """Data packets the workload sends without retransmissions (messages x ceil(size / MTU))."""
    return messages_of(hosts, workload) * math.ceil(size / MTU_PAYLOAD)


def project(prev: dict | None, packets: int) -> dict | None:
    """Wall time of a case with ``packets`` data packets, linear in data packets from ``prev``
    (the previous size's case of the same workload and routing), or None without a basis.

    A measured ``prev`` gives an estimate; a killed one (its time used) a lower bound; a skipped
    one carries its own projection forward (and its lower-bound flag)."""
    if prev is None:
        return None
    if prev.get("status") == "skipped (projected over --max-wall)":
        base, lower, kind = prev["projected_wall_s"], prev["projection_is_lower_bound"], "projection"
    elif prev.get("status") == "over --max-wall":
        base, lower, kind = prev["wall_used_s"], True, "time used before the kill (lower bound)"
    elif prev.get("wall_s") is not None:
        base, lower, kind = prev["wall_s"], False, "measured wall_s"
    else:
        return None                       # an error: no basis
    return {"projected_wall_s": base * packets / prev["data_packets"], "projection_is_lower_bound": lower,
            "projection_basis": f"{kind} {base:.1f} s of the {prev['hosts']}-host {prev['workload']} "
                                f"({prev['routing']}) x {packets:,} / {prev['data_packets']:,} data packets"}


CHILD = r"""
import time
t0 = time.perf_counter()
import json, os, resource, sys
import fabricsim
t_import = time.perf_counter() - t0
res = fabricsim.run(json.loads(sys.argv[1]))
wall = time.perf_counter() - t0
s = res.summary
run = s["run"]
print(json.dumps({"wall_s": wall, "import_s": t_import, "engine_wall_s": run["wall_time_s"],
    "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "status": run["status"], "events": run["events"], "packet_hops": run["packet_hops"],
    "packet_hops_data": run.get("packet_hops_data"), "packet_hops_control": run.get("packet_hops_control"),
    "packet_hops_per_s": run["packet_hops_per_s"], "events_per_s": run["events_per_s"],
    "messages_completed": s["messages"]["completed"], "messages_total": s["messages"]["total"],
    "completion_time_ratio": s["effective_bandwidth"]["completion_time_ratio"],
    "goodput_fraction": s["effective_bandwidth"]["goodput_fraction"], "routing_policy": s["routing"],
    "engine": s["engine"], "kernel": s["kernel"], "end_ps": run["end_ps"],
    "sent_payload_bytes": run["sent_payload_bytes"], "retransmitted_payload_bytes": run["retransmitted_payload_bytes"],
    "dropped_packets": run["dropped_packets"], "warnings": s.get("warnings"),
    "fabricsim_file": fabricsim.__file__, "affinity": sorted(os.sched_getaffinity(0))}))
"""


def run_case(sc: dict, src: Path, max_wall: float) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src)}
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(sc)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env, cwd=src)
    try:
        out, err = p.communicate(timeout=max_wall)
    except subprocess.TimeoutExpired:
        p.kill()                                   # the child this function started, by its pid
        _pid, _status, ru = os.wait4(p.pid, 0)
        used = time.perf_counter() - t0
        p.returncode = -9
        _out, err = p.communicate()
        return {"status": "over --max-wall", "wall_used_s": used, "peak_rss_mb_at_kill": ru.ru_maxrss / 1024,
                "stderr_tail": err.strip().splitlines()[-3:]}
    if p.returncode:
        lines = err.strip().splitlines()
        return {"status": "error", "error": lines[-1] if lines else f"exit {p.returncode}",
                "wall_used_s": time.perf_counter() - t0, "stderr_tail": lines[-5:]}
    return json.loads(out.strip().splitlines()[-1])


def snapshot(src: Path, dest: Path) -> dict:
    """Copy ``src/fabricsim`` to ``dest/fabricsim``, byte-compile it, and describe what was copied."""
    shutil.copytree(src / "fabricsim", dest / "fabricsim", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(dest / "fabricsim")], check=True)
    h = hashlib.sha256()
    files = sorted(p for p in (dest / "fabricsim").rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    for p in files:
        h.update(str(p.relative_to(dest)).encode() + b"\0" + p.read_bytes())
    return {"files": len(files), "sha256": h.hexdigest()}


def git(src: Path, *args) -> str | None:
    p = subprocess.run(["git", "-C", str(src), *args], capture_output=True, text=True)
    return p.stdout.strip() if p.returncode == 0 else None


def machine() -> dict:
    cpu = platform.processor()
    if os.path.exists("/proc/cpuinfo"):
        cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), cpu)
    mem = None
    if os.path.exists("/proc/meminfo"):
        mem = next((int(ln.split()[1]) // 1024 for ln in open("/proc/meminfo") if ln.startswith("MemTotal")), None)
    return {"host": platform.node(), "platform": platform.platform(), "cpu": cpu, "cpus": os.cpu_count(),
            "memory_mb": mem, "python": platform.python_version(), "loadavg_start": os.getloadavg()}


def fmt(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


HEADER = ("| hosts | workload | routing | data packets | wall s | engine s | peak RSS MB | events | "
          "packet-hops/s | messages | CTR | status |")


def row_line(r: dict) -> str:
    wall = r.get("wall_s")
    if wall is None and r.get("wall_used_s") is not None:
        wall_s = f">{r['wall_used_s']:.1f} (killed)" if r["status"] == "over --max-wall" else f"{r['wall_used_s']:.1f}"
    elif wall is None and r.get("projected_wall_s") is not None:
        wall_s = f"{'>=' if r['projection_is_lower_bound'] else '~'}{r['projected_wall_s']:.1f} (projected)"
    else:
        wall_s = fmt(wall, ".1f")
    rss = r.get("peak_rss_mb", r.get("peak_rss_mb_at_kill"))
    msgs = f"{r['messages_completed']:,}/{r['messages_total']:,}" if r.get("messages_total") is not None else "-"
    return (f"| {r['hosts']:,} | {r['workload']} | {r['routing']} | {r['data_packets']:,} | {wall_s} | "
            f"{fmt(r.get('engine_wall_s'), '.1f')} | {fmt(rss, ',.0f')} | {fmt(r.get('events'), ',')} | "
            f"{fmt(r.get('packet_hops_per_s'), ',.0f')} | {msgs} | {fmt(r.get('completion_time_ratio'), '.3f')} | "
            f"{r['status']} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, nargs="+", default=None,
                    help=f"fabric sizes, of {sorted(SHAPES)} ({sorted(QUICK_SHAPES)} with --quick); default all")
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    ap.add_argument("--routing", nargs="+", default=["adaptive"], help="routing.policy values (adaptive)")
    ap.add_argument("--max-wall", type=float, default=1500.0,
                    help="kill a case after this many s; skip a case projected over it (1500)")
    ap.add_argument("--quick", action="store_true",
                    help=f"tiny fabrics {sorted(QUICK_SHAPES)} hosts, {QUICK_SIZES['permutation']:,} B per host "
                         f"and {QUICK_SIZES['all_to_all']:,} B per pair (a smoke test, seconds)")
    ap.add_argument("--src", type=Path, default=ROOT, help="the source tree measured (this checkout)")
    ap.add_argument("--no-snapshot", action="store_true", help="run --src's fabricsim in place, not a copy")
    ap.add_argument("--kernel", default="heap", choices=["heap", "compiled"],
                    help="simulation.kernel (compiled: numba's cache is warmed by a small run first, timed apart)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "packet_scale.json")
    args = ap.parse_args(argv)
    shapes, sizes = (QUICK_SHAPES, QUICK_SIZES) if args.quick else (SHAPES, SIZES)
    hosts_list = sorted(args.hosts or shapes)
    unknown = [h for h in hosts_list if h not in shapes]
    if unknown:
        ap.error(f"--hosts: no shape for {unknown} (allowed: {sorted(shapes)})")
    src = args.src.resolve()
    source = {"src": str(src), "commit": git(src, "rev-parse", "HEAD"),
              "uncommitted_under_fabricsim": (git(src, "status", "--porcelain", "--", "fabricsim") or "").splitlines(),
              "snapshot": not args.no_snapshot}
    started = time.perf_counter()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench_packet_scale_") as tmp:
        run_src = src
        if not args.no_snapshot:
            source.update(snapshot(src, Path(tmp)))
            run_src = Path(tmp)
        print(f"source {src} at {source['commit']}, {len(source['uncommitted_under_fabricsim'])} uncommitted "
              f"file(s) under fabricsim/{'; measuring a snapshot' if not args.no_snapshot else ''}; "
              f"affinity {sorted(os.sched_getaffinity(0))}; --max-wall {args.max_wall:g} s", flush=True)
        if args.kernel == "compiled":
            # compile (or load) the core once into the measured tree's cache, so no case pays it
            warm = scenario(min(shapes), "permutation", args.routing[0], shapes, 65536, "compiled")
            source["compile_warmup"] = run_case(warm, run_src, args.max_wall)
            print(f"compiled core warm-up: {source['compile_warmup'].get('wall_s', 0):.1f} s", flush=True)
        print(HEADER, flush=True)
        print("|---" * (HEADER.count("|") - 1) + "|", flush=True)
        for routing in args.routing:
            last: dict[str, dict] = {}
            for hosts in hosts_list:
                for workload in args.workloads:
                    size = sizes[workload]
                    sc = scenario(hosts, workload, routing, shapes, size, args.kernel)
                    leaves, per_leaf, spines = shapes[hosts]
                    r = {"hosts": hosts, "workload": workload, "routing": routing, "message_size_bytes": size,
                         "messages": messages_of(hosts, workload), "data_packets": data_packets(hosts, workload, size),
                         "shape": {"leaves": leaves, "hosts_per_leaf": per_leaf, "spines": spines}}
                    proj = project(last.get(workload), r["data_packets"])
                    if proj is not None:
                        r.update(proj)
                    if proj is not None and proj["projected_wall_s"] > args.max_wall:
                        r["status"] = "skipped (projected over --max-wall)"
                    else:
                        r.update(run_case(sc, run_src, args.max_wall))
                    r["scenario"] = sc
                    rows.append(r)
                    last[workload] = r
                    print(row_line(r), flush=True)
    total = time.perf_counter() - started
    result = {
        "command": shlex.join([sys.executable, *(sys.argv if argv is None else [str(Path(__file__)), *argv])]),
        "date": datetime.datetime.now().isoformat(timespec="seconds"), "machine": machine(),
        "affinity": sorted(os.sched_getaffinity(0)), "source": source, "max_wall_s": args.max_wall,
        "total_wall_s": total,
        "shapes": {str(h): {"leaves": l, "hosts_per_leaf": p, "spines": s} for h, (l, p, s) in shapes.items()},
        "link": LINK, "switch_latency": "600ns (default)", "mtu_payload_bytes": MTU_PAYLOAD,
        "message_sizes_bytes": sizes, "time_limit": TIME_LIMIT, "seed": SEED,
        "definitions": {
            "wall_s": "child process, from before `import fabricsim` to the end of fabricsim.run(scenario) "
                      "(in memory, no results folder)",
            "engine_wall_s": "summary['run']['wall_time_s'] (the engine's event loop)",
            "peak_rss_mb": "resource.getrusage(RUSAGE_SELF).ru_maxrss / 1024 in the child",
            "data_packets": "messages x ceil(message size / 4096 B), without retransmissions",
            "packet_hops": "summary['run']['packet_hops']: data and control packets, per link traversed",
            "projected_wall_s": "NOT a measurement: wall_s (or time used, or a projection) of the previous size "
                                "of the same workload x data packets ratio",
        },
        "target": "issue 15: a 1,024-GPU all-to-all of 64 KiB per pair in under 10 minutes",
        "cases": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"total {total:.0f} s; wrote {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
