"""Counter-based ECN draws against other sources of the same random decision, on the 3-flow
``dcqcn_cx`` collision of tests/test_dcqcn_collisions.py (3 x 16 MB from hosts under one leaf
into one 400G downlink, ``ethernet`` profile: PFC, ECN at dequeue).

RED marks a packet when its draw is below ``pmax (q - kmin) / (kmax - kmin)``. Three sources of
that draw, each over the same seeds:

* ``packet_draw``: the model (``flows.identity.packet_draw``: the tuple hash of the packet's
  identity and the switch, splitmix64 on top);
* ``chain``: splitmix64 chained over the same fields (a second counter-based hash);
* ``sequential``: one ``random.Random`` per switch, drawn in event order (the model before
  counter-based draws).

The figure per run is the last completion over the fluid ideal (3 x 16 MB through 400G). Prints
each distribution's quantiles, two-sample Kolmogorov-Smirnov p-values and Fisher's exact test on
the runs over 1.3x, and writes ``benchmarks/results/ecn_draws.json`` (``--out``)::

    taskset -c 0 python3 benchmarks/check_ecn_draws.py --seeds 600     # about 10 minutes
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from datetime import date
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SOURCES = ("packet_draw", "chain", "sequential")
IDEAL_PS = 3 * 16e6 * 8 / 400e9 * 1e12


def _install(source: str, rngs: dict):
    """Switch.mark drawing from ``source``; returns the original to restore."""
    from fabricsim.flows.identity import mix64
    from fabricsim.net import switch as swmod
    from fabricsim.net.packet import UNIT
    orig = swmod.Switch.mark
    if source == "chain":
        def mark(self, q, pkt):
            if q > self.kmax:
                return True
            h = mix64(self.ecn_salt ^ pkt.qp.uid)
            h = mix64(h ^ pkt.seq)
            h = mix64(h ^ pkt.t_tx)
            h = mix64(h ^ (pkt.kind << 32) ^ self.id)
            return h * UNIT < self.pmax * (q - self.kmin) / (self.kmax - self.kmin)
        swmod.Switch.mark = mark
    elif source == "sequential":
        def mark(self, q, pkt):
            if q > self.kmax:
                return True
            r = rngs.get(id(self))
            if r is None:
                r = rngs[id(self)] = random.Random(self.ecn_salt ^ self.id)
            return r.random() < self.pmax * (q - self.kmin) / (self.kmax - self.kmin)
        swmod.Switch.mark = mark
    return orig


def run(source: str, seeds: range, csv: Path) -> list[float]:
    import fabricsim
    from fabricsim.net import switch as swmod
    rngs: dict = {}
    orig = _install(source, rngs)
    out = []
    try:
        for seed in seeds:
            rngs.clear()
            sc = {"name": "collide", "profile": "ethernet",
                  "topology": {"kind": "leaf_spine", "hosts_per_leaf": 4, "leaves": 2, "spines": 1,
                               "host_link": {"rate": "400Gbps", "delay": "1us"},
                               "fabric_link": {"rate": "400Gbps", "delay": "1us"}},
                  "traffic": {"pattern": "csv", "path": str(csv)},
                  "congestion_control": {"algorithm": "dcqcn_cx"},
                  "simulation": {"seed": seed, "time_limit": "10ms"},
                  "outputs": {"link_sample_interval": "off"}}
            r = fabricsim.run(sc)
            assert r.messages["completed"].all(), (source, seed)
            out.append(float(r.messages["end_ps"].max()) / IDEAL_PS)
    finally:
        swmod.Switch.mark = orig
    return out


def main(argv=None):
    from scipy import stats
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=600, help="seeds 1..N per source")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "ecn_draws.json")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        csv = Path(d) / "flows.csv"
        csv.write_text("src,dst,size_bytes\n" + "".join(f"{i},4,16000000\n" for i in range(3)))
        runs = {s: run(s, range(1, a.seeds + 1), csv) for s in SOURCES}
    summary = {}
    for s, x in runs.items():
        v = np.array(x)
        summary[s] = {"median": float(np.median(v)), "p90": float(np.quantile(v, 0.9)),
                      "p99": float(np.quantile(v, 0.99)), "max": float(v.max()),
                      "over_1.3": int((v > 1.3).sum()), "over_1.5": int((v > 1.5).sum())}
        print(f"{s:12s} median {summary[s]['median']:.3f} p90 {summary[s]['p90']:.3f} p99 {summary[s]['p99']:.3f} "
              f"max {summary[s]['max']:.3f}  >1.3x {summary[s]['over_1.3']}  >1.5x {summary[s]['over_1.5']}")
    tests = {}
    for i, s in enumerate(SOURCES):
        for t in SOURCES[i + 1:]:
            x, y = np.array(runs[s]), np.array(runs[t])
            hi = [[int((x > 1.3).sum()), int((x <= 1.3).sum())], [int((y > 1.3).sum()), int((y <= 1.3).sum())]]
            tests[f"{s} vs {t}"] = {"ks_p": float(stats.ks_2samp(x, y).pvalue),
                                   "fisher_over_1.3_p": float(stats.fisher_exact(hi)[1])}
            print(f"{s} vs {t}: KS p {tests[f'{s} vs {t}']['ks_p']:.3f}, "
                  f"Fisher (>1.3x) p {tests[f'{s} vs {t}']['fisher_over_1.3_p']:.3f}")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"command": " ".join(["python3", "benchmarks/check_ecn_draws.py",
                                                      *(argv if argv is not None else sys.argv[1:])]),
                                 "date": date.today().isoformat(), "seeds": a.seeds, "summary": summary,
                                 "tests": tests, "ratios": runs}, indent=1) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
