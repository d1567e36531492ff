"""Check that a change to the engine's hot path did not change what is simulated.

Runs 3 scenarios x 5 routing set-ups (ecmp, spray, adaptive, adaptive with ``metric:
queue_util``, flowlet) twice, in subprocesses: once with the working tree, once with a reference
copy of the working tree in which the hot-path files (``HOT_FILES``) are reverted to a base
commit. Every output table (messages, links, latency histogram, goodput series) and the summary
(minus wall-clock fields) are fingerprinted and compared. Comparing against a reference built
from the *current* tree keeps the check valid while other parts of the package (config, topology,
traffic) change under it::

    python3 benchmarks/check_equivalence.py                      # vs HOT_FILES at BASE_COMMIT
    python3 benchmarks/check_equivalence.py --kernel simpy       # the simpy kernel vs the reference
    python3 benchmarks/check_equivalence.py --kernel compiled    # the compiled core vs the reference
        # (a set-up the compiled core does not cover falls back to heap: listed, and counted apart)
    python3 benchmarks/check_equivalence.py --keep fabricsim/routing/adaptive.py
        # reference keeps the current adaptive.py: checks the rest of the hot path around a
        # deliberate change of the adaptive tie-break

Exit status 1 on any difference.

The scenarios are chosen to reach every branch of the data path: queueing and ties
(permutation), per-port drop-tail with parallel links and oversubscription (all-to-all),
a shared buffer with cells and drops (incast). Two more (ECMP only) reach the replay logic
(``fabricsim/flows/replay.py``): a ring of dependent steps on persistent connections with GPU
compute jobs shared and queued (``replay_ring_gpu``), and connections whose queue pairs give up
under loss, flushing later messages and failing their dependents (``replay_conn_errors``).
A hot-path file missing at the base commit is left as the working tree has it (the base's
other files do not import it).
"""
from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: default reference: the last commit (checks uncommitted hot-path edits); pass --base for older
BASE_COMMIT = "HEAD"
HOT_FILES = [
    "fabricsim/engine/kernel.py", "fabricsim/engine/packet.py", "fabricsim/net/packet.py",
    "fabricsim/net/port.py", "fabricsim/routing/adaptive.py", "fabricsim/routing/ecmp.py",
    "fabricsim/routing/flowlet.py", "fabricsim/routing/spray.py", "fabricsim/routing/base.py",
    "fabricsim/receiver/ddp.py", "fabricsim/receiver/base.py", "fabricsim/flows/replay.py",
    "fabricsim/flows/identity.py", "fabricsim/net/sender.py", "fabricsim/net/nic.py",
]

SCENARIOS = {
    "perm32": {
        "name": "eq_perm32",
        "topology": {"kind": "leaf_spine", "hosts_per_leaf": 8, "leaves": 4, "spines": 8},
        "traffic": {"pattern": "permutation", "message_size": "1MiB", "qps_per_message": 2},
        "simulation": {"seed": 3},
    },
    "a2a_oversub_drops": {
        "name": "eq_a2a",
        "topology": {"kind": "leaf_spine", "hosts_per_leaf": 4, "leaves": 4, "spines": 2, "links_per_spine": 2,
                     "fabric_link": {"rate": "300Gbps", "delay": "300ns"},   # 8e12 % rate != 0
                     "buffer": {"mode": "per_port", "size": "96KiB"}},
        "traffic": {"pattern": "all_to_all", "message_size": "80KiB", "qps_per_message": 3},
        "simulation": {"seed": 11, "mtu": "2KiB"},
    },
    "incast_shared_cells": {
        "name": "eq_incast",
        "topology": {"kind": "leaf_spine", "hosts_per_leaf": 4, "leaves": 4, "spines": 4,
                     "buffer": {"mode": "shared", "size": "1MiB"}},
        "traffic": {"pattern": "incast", "senders": 12, "receiver": 1, "message_size": "512KiB",
                    "qps_per_message": 4},
        "simulation": {"seed": 5, "cell_packets": 2},
    },
}

def _replay_traces(where: Path) -> dict:
    """CSV traces of the replay scenarios, written under ``where``: {scenario key: path}."""
    where.mkdir(parents=True, exist_ok=True)
    head = "id,src,dst,size_bytes,start_ps,gap_ps,deps,conn"
    # ring over 8 GPUs, 5 steps: each GPU sends two messages to its successor on connection 0 (the
    # second queues behind the first), both after one shared GPU job once the previous step's
    # message from its predecessor is in, and one to the GPU after, after a longer job queued
    # behind that one on the same GPU; a fan-in at the end; some GPUs' steps start late
    rows, last = [head], {}
    mid = 0
    for step in range(5):
        cur = {}
        for h in range(8):
            dep = last.get(h)
            deps = "" if dep is None else str(dep)
            gap = 0 if dep is None else 2_000_000 + 500_000 * (h % 3)
            start = 3_000_000 * step if h % 4 == 1 else 0
            for k, (dst, size, conn, more) in enumerate((((h + 1) % 8, 65536, 0, 0), ((h + 1) % 8, 32768, 0, 0),
                                                         ((h + 2) % 8, 16384, -1, 700_000 if gap else 0))):
                rows.append(f"{mid},{h},{dst},{size},{start},{gap + more},{deps},{conn}")
                if k == 1:
                    cur[(h + 1) % 8] = mid
                mid += 1
        last = cur
    rows.append(f"{mid},0,4,4096,0,1000000,{';'.join(str(v) for v in sorted(last.values()))},-1")
    out = {"replay_ring_gpu": where / "ring.csv"}
    out["replay_ring_gpu"].write_text("\n".join(rows) + "\n")
    # 7 senders x 4 messages to GPU 0 on one connection each, under loss with retry limit 1;
    # two levels of dependents on each connection's last message
    rows = [head] + [f"{(s - 1) * 4 + k},{s},0,131072,0,0,,0" for s in range(1, 8) for k in range(4)]
    for s in range(1, 8):
        rows.append(f"{100 + s},0,{s},8192,0,1000,{(s - 1) * 4 + 3},-1")
        rows.append(f"{200 + s},{s},{(s + 1) % 8},8192,0,0,{100 + s},-1")
    out["replay_conn_errors"] = where / "errors.csv"
    out["replay_conn_errors"].write_text("\n".join(rows) + "\n")
    return out


def replay_scenarios(where: Path) -> dict:
    paths = _replay_traces(where)
    small = {"kind": "leaf_spine", "hosts_per_leaf": 4, "leaves": 2, "spines": 2}
    return {
        "replay_ring_gpu": {
            "name": "eq_ring", "topology": {**small, "buffer": {"mode": "per_port", "size": "256KiB"}},
            "traffic": {"pattern": "csv", "path": str(paths["replay_ring_gpu"]), "qps_per_connection": 2},
            "simulation": {"seed": 2, "compute": "gpu"},
        },
        "replay_conn_errors": {
            "name": "eq_err", "topology": {**small, "buffer": {"mode": "per_port", "size": "64KiB"}},
            "traffic": {"pattern": "csv", "path": str(paths["replay_conn_errors"]), "qps_per_connection": 2},
            "receiver": {"model": "go_back_n", "retry_limit": 1}, "congestion_control": {"algorithm": "none"},
            "simulation": {"seed": 3, "time_limit": "20ms"},
        },
    }


ROUTINGS = {
    "ecmp": {"policy": "ecmp"},
    "spray": {"policy": "spray"},
    "adaptive": {"policy": "adaptive"},
    "adaptive_util": {"policy": "adaptive", "metric": "queue_util", "util_window": "2us"},
    "flowlet": {"policy": "flowlet", "gap": "1us"},
}

#: set-ups the compiled core covers: with --kernel compiled they must run compiled (else exit 1), so
#: that a missing numba or a coverage regression cannot pass as "identical"
COMPILED_COVERS = [f"{s}/{r}" for s in ("perm32", "a2a_oversub_drops") for r in ("ecmp", "spray", "adaptive")]

WALL_FIELDS = ("wall_time_s", "events_per_s", "packet_hops_per_s", "version")


def _h(df) -> str:
    return hashlib.sha256(df.to_csv(index=False).encode()).hexdigest()[:16]


def fingerprint(scenario: dict) -> dict:
    import fabricsim
    r = fabricsim.run(scenario)
    summary = copy.deepcopy(r.summary)
    for k in WALL_FIELDS:
        summary["run"].pop(k, None)
    # the kernel is the one thing allowed to differ (--kernel simpy / compiled against heap): its
    # record and the compiled core's fallback line leave the fingerprint, the kernel that ran is
    # kept beside it (keys with a leading underscore are reported, not compared)
    summary.pop("kernel", None)
    ran = summary["run"].pop("kernel", {}).get("ran", "heap")
    summary["warnings"] = [w for w in summary.get("warnings", []) if not w.startswith("kernel: ")]
    return {"_ran": ran,
        "messages": _h(r.messages), "links": _h(r.links), "latency": _h(r.latency), "goodput": _h(r.goodput),
        "summary": hashlib.sha256(json.dumps(summary, sort_keys=True, default=str).encode()).hexdigest()[:16],
        "completed": r.summary["messages"]["completed"], "drops": r.summary["drops"]["packets"],
        "events": r.summary["run"]["events"], "hops": r.summary["run"]["packet_hops"],
    }


def compute(kernel: str = "heap") -> dict:
    out = {}
    for sname, sc in SCENARIOS.items():
        for rname, routing in ROUTINGS.items():
            s = copy.deepcopy(sc)
            s["routing"] = routing
            s["simulation"] = {**s["simulation"], "kernel": kernel}
            s["outputs"] = {"formats": ["csv"]}
            out[f"{sname}/{rname}"] = fingerprint(s)
    with tempfile.TemporaryDirectory(prefix="fabricsim_eq_") as tmp:
        for sname, sc in replay_scenarios(Path(tmp)).items():
            s = copy.deepcopy(sc)
            s["routing"] = {"policy": "ecmp"}
            s["simulation"] = {**s["simulation"], "kernel": kernel}
            s["outputs"] = {"formats": ["csv"]}
            out[f"{sname}/ecmp"] = fingerprint(s)
    return out


def _in_subprocess(pythonpath: Path, kernel: str) -> dict:
    """Fingerprints computed by a fresh interpreter importing fabricsim from ``pythonpath``."""
    code = (f"import sys, json; sys.path.insert(0, {str(HERE)!r}); import check_equivalence as c; "
            f"import fabricsim; assert fabricsim.__file__.startswith({str(pythonpath)!r}), fabricsim.__file__; "
            f"print(json.dumps(c.compute({kernel!r})))")
    env = dict(os.environ, PYTHONPATH=str(pythonpath))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=pythonpath)
    if out.returncode:
        sys.exit(f"run under {pythonpath} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def reference_tree(tmp: Path, base: str, keep: list[str], package: str = "fabricsim") -> Path:
    """A copy of the working tree's package with HOT_FILES (except ``keep``) taken from ``base``,
    as ``tmp/<package>`` (the package only uses relative imports, so it may be renamed and
    imported next to the working tree's ``fabricsim``)."""
    shutil.copytree(ROOT / "fabricsim", tmp / package, ignore=shutil.ignore_patterns("__pycache__"))
    for f in HOT_FILES:
        if f in keep:
            continue
        got = subprocess.run(["git", "show", f"{base}:{f}"], cwd=ROOT, capture_output=True, text=True)
        if got.returncode:
            if subprocess.run(["git", "cat-file", "-e", f"{base}^{{commit}}"], cwd=ROOT).returncode:
                sys.exit(f"unknown base commit {base}")
            continue        # not at the base: the working tree's copy stays (nothing there imports it)
        text = got.stdout
        (tmp / package / Path(f).relative_to("fabricsim")).write_text(text)
    return tmp


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", default=BASE_COMMIT, help="commit whose hot-path files make the reference")
    ap.add_argument("--keep", nargs="*", default=[], help="hot-path files the reference takes from the working tree")
    ap.add_argument("--kernel", default="heap", choices=["heap", "simpy", "compiled"], help="kernel of the working-tree runs")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fabricsim_ref_") as tmp:
        ref = _in_subprocess(reference_tree(Path(tmp), args.base, args.keep), "heap")
    cur = _in_subprocess(ROOT, args.kernel)
    bad = 0
    for key in sorted(set(ref) | set(cur)):
        a, b = ref.get(key), cur.get(key)
        a, b = ({k: v for k, v in d.items() if not k.startswith("_")} if d else d for d in (a, b))
        if a != b:
            bad += 1
            diff = {k: (a.get(k) if a else None, b.get(k) if b else None)
                    for k in set(a or {}) | set(b or {}) if (a or {}).get(k) != (b or {}).get(k)}
            print(f"DIFFERENT {key}: {diff}")
        else:
            ran = cur[key].get("_ran", "heap")
            print(f"same      {key}  completed={b['completed']} drops={b['drops']} hops={b['hops']} events={b['events']}"
                  + (f"  (ran {ran})" if ran != args.kernel else ""))
    fell = sorted(k for k, v in cur.items() if v.get("_ran", "heap") != args.kernel)
    if fell:
        print(f"{len(fell)}/{len(cur)} ran on another kernel than {args.kernel} (outside its coverage): {' '.join(fell)}")
    missed = [k for k in COMPILED_COVERS if k in fell] if args.kernel == "compiled" else []
    if missed:
        bad += len(missed)
        print(f"NOT COMPILED {' '.join(missed)}: set-ups the compiled core covers ran on another kernel")
    print(f"{len(cur) - bad}/{len(cur)} identical{f' ({len(fell)} of them on heap)' if fell else ''} to the reference (base {args.base}"
          f"{', keeping ' + ' '.join(args.keep) if args.keep else ''}; kernel {args.kernel}) "
          f"in {time.perf_counter() - t0:.1f}s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
