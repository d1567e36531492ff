"""NVLink as NVLink: bound fraction, drops, events and wall time inside one NVL72 rack.

Runs four NVL72 (18-chip) scenarios (a 4 MiB permutation, a 64 KiB all-to-all, a 64-to-1
incast of 1 MiB, and a hot spot: 32 GPUs each sending 1 MiB to GPU 0 and 1 MiB to another GPU) with

- ``roce``: ``nvlink.transport: roce``, the earlier model (RoCE packets with 82 B headers and an
  86 B ACK per packet through 2 MiB drop-tail chip ports, RTO recovery) on today's engine;
- ``credit``: the default, lossless per-link credit flow control, NVLink framing, no ACKs;
- with ``--baseline-src DIR`` also ``baseline``: the same scenarios run by another checkout of
  fabricsim (e.g. commit 9de9ee3, before this change) in a subprocess;

then sweeps the credit model's [EST] parameters (credit buffer, unit size, framing, spread) on
the permutation and the all-to-all (credit buffer and spread also on the incast and a hot spot
with background traffic). For each run it prints the completion time as a fraction of
the idle-fabric bound (``completion_time_ratio``; the bound uses the run's own framing), goodput
as a fraction of the raw link rate, drops, retransmission timeouts, kernel events, wall time,
NIC transmit attempts that sent nothing, and for the incast how busy the receiver's links were.

    python3 benchmarks/bench_nvlink.py                            # ~1 min; writes results/nvlink.json
    git archive 9de9ee3 | tar -x -C /tmp/base                    # the code before the change
    python3 benchmarks/bench_nvlink.py --baseline-src /tmp/base --repeat 3
    python3 benchmarks/bench_nvlink.py --quick                    # NVL36, small sizes, no sweep
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

SCENARIOS = {
    "permutation_4MiB": {"pattern": "permutation", "message_size": "4MiB"},
    "all_to_all_64KiB": {"pattern": "all_to_all", "message_size": "64KiB"},
    "incast_64to1_1MiB": {"pattern": "incast", "senders": 64, "receiver": 0, "message_size": "1MiB"},
    # GPUs 1..32 each send 1 MiB to GPU 0 and 1 MiB to GPU i+32: how much the hot spot slows the
    # other traffic of its senders (head-of-line blocking through shared credits)
    "hotspot_32to1_plus_background": {"pattern": "csv", "path": "hotspot.csv"},
}
HOTSPOT_ROWS = [(s, 0, 2**20) for s in range(1, 33)] + [(s, s + 32, 2**20) for s in range(1, 33)]
QUICK = {
    "permutation_1MiB": {"pattern": "permutation", "message_size": "1MiB"},
    "all_to_all_64KiB": {"pattern": "all_to_all", "message_size": "64KiB"},
    "incast_32to1_256KiB": {"pattern": "incast", "senders": 32, "receiver": 0, "message_size": "256KiB"},
}
SWEEP = {
    "credit_buffer": ["8KiB", "16KiB", "32KiB", "48KiB", "64KiB", "256KiB"],
    "unit": ["1KiB", "4KiB", "16KiB"],
    "packet_header": ["0B", "16B", "32B"],
    "spread": ["stripe", "adaptive"],
}


def scenario(traffic: dict, nvlink: dict | None, domain_size: int) -> dict:
    topo = {"kind": "nvl72_rack", "domain_size": domain_size}
    if nvlink:
        topo["nvlink"] = nvlink
    return {"name": "bench_nvlink", "topology": topo, "traffic": traffic, "routing": {"policy": "spray"},
            "simulation": {"seed": 1, "time_limit": "50ms"}}


def run_engine(sc: dict):
    """Run ``sc`` on the packet engine in this process, keeping the engine (its NICs' counters):
    ``(engine, result, engine wall seconds)``."""
    from fabricsim import __version__
    from fabricsim.analysis.recorder import Recorder
    from fabricsim.analysis.result import build_result
    from fabricsim.api import prepare
    from fabricsim.engine.interface import ENGINES
    _loaded, sim = prepare(sc)
    s = sim.scenario
    rec = Recorder(s.outputs.latency_rel_error, s.outputs.timeseries_bin)
    eng = ENGINES.get("packet")(sim, rec)
    t0 = time.perf_counter()
    out = eng.run()
    wall = time.perf_counter() - t0
    return eng, build_result(sim, rec, out, wall, __version__), wall


def measure(sc: dict, count_tx: bool) -> dict:
    """Run one scenario in this process: figures from the summary and the engine's NICs."""
    from fabricsim.net import nic as nic_mod

    restore = None
    if count_tx and "tx_calls" not in nic_mod.Nic.__slots__:
        # code without the counters: count attempts and data units sent by wrapping Nic.tx
        orig = nic_mod.Nic.tx
        tally = [0, 0]

        def tx(self, t, token):
            before = self.port.tx_packets
            orig(self, t, token)
            tally[0] += 1
            tally[1] += self.port.tx_packets > before
        nic_mod.Nic.tx = tx
        restore = orig
    eng, res, wall = run_engine(sc)
    if restore is not None:
        nic_mod.Nic.tx = restore
        calls, sent = tally
    elif "tx_calls" not in nic_mod.Nic.__slots__:
        calls = sent = None
    else:
        nics = [n for ns in eng.nics.values() for n in ns]
        calls = sum(n.tx_calls for n in nics)
        sent = sum(n.tx_sent for n in nics)
    run = res.summary["run"]
    eb = res.summary["effective_bandwidth"]
    links = res.links
    row = {"status": run["status"], "completion_time_ratio": eb["completion_time_ratio"],
           "goodput_fraction_of_link_rate": eb["goodput_fraction"],
           "duration_ps": res.summary["pattern"]["duration_ps"],
           "ideal_duration_ps": res.summary["pattern"]["ideal_duration_ps"],
           "dropped_packets": run["dropped_packets"], "retransmission_timeouts": run["retransmission_timeouts"],
           "nvlink_control_bytes": int(links.loc[links["kind"] == "nvlink", "tx_control_bytes"].sum()),
           "events": run["events"], "wall_s": round(wall, 3),
           "nic_tx_attempts": calls, "nic_tx_sent": sent,
           "nic_tx_idle_fraction": (1 - sent / calls) if calls else None}
    if sc["traffic"]["pattern"] == "csv":
        m = res.messages
        bg = m[m["dst"] != 0]
        row["background_slowdown_median"] = float(bg["slowdown"].median())
        row["background_slowdown_max"] = float(bg["slowdown"].max())
        row["hotspot_slowdown_max"] = float(m.loc[m["dst"] == 0, "slowdown"].max())
    if sc["traffic"]["pattern"] == "incast":
        into = links[links["dst"] == sc["traffic"]["receiver"]]
        busy = into["tx_bytes"].astype(float) * 8e12 / (into["rate_bps"].astype(float) * run["end_ps"])
        row["receiver_link_busy_min"] = float(busy.min())
        row["receiver_link_busy_mean"] = float(busy.mean())
    return row


def baseline(src: str, sc: dict) -> dict:
    """Run ``sc`` (without NVLink keys) with the fabricsim found in ``src``, in a subprocess: once
    as it is (events, wall time, figures), once with ``Nic.tx`` wrapped to count its attempts
    (that code has no counters; the wrapper's cost stays out of the wall time)."""
    env = dict(os.environ, PYTHONPATH=src)
    rows = []
    for count in ("0", "1"):
        cmd = [sys.executable, __file__, "--child", json.dumps(sc), "--count-tx", count]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    plain, counted = rows
    for k in ("nic_tx_attempts", "nic_tx_sent", "nic_tx_idle_fraction"):
        plain[k] = counted[k]
    return plain


def fmt(name: str, r: dict) -> str:
    s = (f"{name:<44} bound {r['completion_time_ratio']:.4f}  link-rate goodput {r['goodput_fraction_of_link_rate']:.3f}  "
         f"drops {r['dropped_packets']:>6}  rto {r['retransmission_timeouts']:>3}  events {r['events']:>9,}  "
         f"wall {r['wall_s']:6.2f} s")
    if r.get("nic_tx_attempts") is not None:
        s += f"  idle tx {r['nic_tx_idle_fraction'] * 100:5.1f} % of {r['nic_tx_attempts']:,}"
    if "receiver_link_busy_min" in r:
        s += f"  rx busy min {r['receiver_link_busy_min']:.4f}"
    if "background_slowdown_median" in r:
        s += f"  background slowdown median {r['background_slowdown_median']:.2f}"
    return s


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="NVL36, smaller messages, no sweep")
    ap.add_argument("--baseline-src", help="another fabricsim checkout to run the scenarios with (before)")
    ap.add_argument("--no-sweep", action="store_true")
    ap.add_argument("--repeat", type=int, default=1, help="headline runs: best wall time of this many")
    ap.add_argument("--json", type=Path, default=Path(__file__).parent / "results" / "nvlink.json")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--count-tx", default="1", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(measure(json.loads(args.child), count_tx=args.count_tx == "1")))
        return 0
    scen = QUICK if args.quick else dict(SCENARIOS)
    dom = 36 if args.quick else 72
    if "hotspot_32to1_plus_background" in scen:
        path = args.json.parent / "hotspot.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("src,dst,size_bytes\n" + "".join(f"{a},{b},{n}\n" for a, b, n in HOTSPOT_ROWS))
        scen["hotspot_32to1_plus_background"] = {"pattern": "csv", "path": str(path.resolve())}
    rows = []
    for name, tr in scen.items():
        walls = {}
        for i in range(args.repeat):          # interleaved, so load on the machine hits all alike
            if args.baseline_src:
                r = baseline(args.baseline_src, scenario(tr, None, dom))
                walls.setdefault("baseline", []).append((r["wall_s"], r))
            for model in ("roce", "credit"):
                r = measure(scenario(tr, {"transport": model}, dom), count_tx=True)
                walls.setdefault(model, []).append((r["wall_s"], r))
        for model, runs in walls.items():
            r = dict(runs[-1][1], wall_s=min(w for w, _ in runs), wall_s_all=[w for w, _ in runs])
            nv = None if model == "baseline" else {"transport": model}
            rows.append({"scenario": name, "model": model, "nvlink": nv, **r})
            label = f"{name} baseline ({args.baseline_src})" if model == "baseline" else f"{name} {model}"
            print(fmt(label, r), flush=True)
    if not (args.quick or args.no_sweep):
        for key, values in SWEEP.items():
            for v in values:
                extra = ("incast_64to1_1MiB", "hotspot_32to1_plus_background") if key in ("credit_buffer", "spread") else ()
                for name in ("permutation_4MiB", "all_to_all_64KiB") + extra:
                    nv = {"transport": "credit", key: v}
                    r = measure(scenario(scen[name], nv, dom), count_tx=True)
                    rows.append({"scenario": name, "model": "credit", "sweep": key, "nvlink": nv, **r})
                    print(fmt(f"{name} credit {key}={v}", r), flush=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({
        "command": " ".join(["python3", "benchmarks/bench_nvlink.py"] + (argv if argv is not None else sys.argv[1:])),
        "python": platform.python_version(), "platform": platform.platform(), "cpu_count": os.cpu_count(),
        "domain_size": dom, "scenarios": scen, "rows": rows}, indent=1))
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
