"""Check that the legacy transport set-up (``receiver.ack_every: 1``, ``rto_mode: fixed``, the
defaults) simulates exactly what it did before the transport-realism changes.

Runs the scenarios x routings of ``check_equivalence.py`` plus the quickstart (ECMP, spray, and
go-back-N / reorder-buffer receivers under spray) twice, in subprocesses: with the working tree and
with the whole package at ``--base`` (``git archive``). Every output table (messages, links,
latency histogram, goodput series) and the summary are fingerprinted; the summary's ``run``
section is compared on the counters both versions have (the new transport counters are new)::

    python3 benchmarks/check_transport_legacy.py --base 9de9ee3

Exit status 1 on any difference.
"""
from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
NEW_RUN_KEYS = {"timeout_probes", "spurious_timeout_probes", "dsacks_received", "sent_payload_bytes",
                "retransmitted_payload_bytes", "duplicate_payload_bytes", "discarded_payload_bytes",
                "in_network_payload_bytes"}
WALL = {"wall_time_s", "events_per_s", "packet_hops_per_s", "version"}


def scenarios() -> dict:
    sys.path.insert(0, str(HERE))
    import check_equivalence as ce
    out = {}
    for sname, sc in ce.SCENARIOS.items():
        for rname, routing in ce.ROUTINGS.items():
            s = copy.deepcopy(sc)
            s["routing"] = routing
            s["outputs"] = {"formats": ["csv"]}
            out[f"{sname}/{rname}"] = (s, [])
    import yaml
    qs = yaml.safe_load((ROOT / "scenarios" / "leaf_spine_32_raw.yaml").read_text())
    qs.pop("profile", None)      # (the raw fabric: also loadable by commits before profiles)
    for name, ov in {"quickstart/ecmp": [], "quickstart/spray": ["routing.policy=spray"],
                     "quickstart/spray_gbn": ["routing.policy=spray", "receiver.model=go_back_n"],
                     "quickstart/spray_rob": ["routing.policy=spray", "receiver.model=reorder_buffer",
                                              "receiver.buffer=8KiB"]}.items():
        out[name] = (qs, ov)
    return out


def _h(df) -> str:
    return hashlib.sha256(df.to_csv(index=False).encode()).hexdigest()[:16]


def compute() -> dict:
    import fabricsim
    res = {}
    for name, (sc, ov) in scenarios().items():
        r = fabricsim.run(sc, overrides=ov)
        summary = copy.deepcopy(r.summary)
        summary.pop("profile", None)
        for k in NEW_RUN_KEYS | WALL:
            summary["run"].pop(k, None)
        res[name] = {"messages": _h(r.messages), "links": _h(r.links), "latency": _h(r.latency),
                     "goodput": _h(r.goodput),
                     "summary": hashlib.sha256(json.dumps(summary, sort_keys=True, default=str).encode()).hexdigest()[:16]}
    return res


def _run(pythonpath: Path) -> dict:
    code = (f"import sys, json; sys.path.insert(0, {str(HERE)!r}); import check_transport_legacy as c; "
            f"import fabricsim; assert fabricsim.__file__.startswith({str(pythonpath)!r}), fabricsim.__file__; "
            f"print(json.dumps(c.compute()))")
    env = dict(os.environ, PYTHONPATH=str(pythonpath))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=pythonpath)
    if out.returncode:
        sys.exit(f"run under {pythonpath} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="commit of the reference package")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        archive = subprocess.run(["git", "archive", a.base, "fabricsim"], cwd=ROOT, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive.stdout, check=True)
        ref = _run(tmp)
    new = _run(ROOT)
    bad = 0
    for name in new:
        diff = [k for k in new[name] if new[name][k] != ref[name][k]]
        print(f"{name:32s} {'identical' if not diff else 'DIFFERENT: ' + ', '.join(diff)}")
        bad += bool(diff)
    print(f"{len(new) - bad}/{len(new)} identical")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
