"""Transport realism benchmark on the quickstart (32 hosts, 4 MiB permutation, 2 MiB drop-tail
per port, no congestion control): ACK coalescing and adaptive retransmission.

Prints three tables and writes ``benchmarks/results/transport.json``::

    python3 benchmarks/bench_transport.py            # about a minute
    python3 benchmarks/bench_transport.py --seeds 3  # fewer seeds

1. ack_every x routing: control/data wire bytes (summed over links), completion-time ratio,
   retransmitted and duplicate payload bytes. ``legacy`` = ``ack_every: 1`` with the fixed IRN
   timeouts (the defaults); the other rows use ``rto_mode: adaptive``.
2. RTO mode x ECMP seeds: completion-time ratio against the same hash placement without drops
   (``topology.buffer.size: unbounded``, the lossless reference), timeouts, probes, and the
   spurious retransmissions measured at the receiver (duplicate units).
3. Long queues: the adaptive timer on unbounded buffers (queues grow to hundreds of microseconds),
   where every early expiry is spurious, and go-back-N (a timeout resends the window) on the lossy
   quickstart with and without the RTT floor: the probes spent and the duplicates they cause.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import fabricsim

HERE = Path(__file__).resolve().parent
QUICKSTART = str(HERE.parent / "scenarios" / "leaf_spine_32_raw.yaml")
UNIT = 4096


def measure(overrides, seed=1) -> dict:
    r = fabricsim.run(QUICKSTART, overrides=overrides, seed=seed)
    s, L, run = r.summary, r.links, r.summary["run"]
    return {
        "overrides": overrides, "seed": seed,
        "completed": s["messages"]["completed"],
        "completion_ratio": s["effective_bandwidth"]["completion_time_ratio"],
        "control_over_data": float(L["tx_control_bytes"].sum() / L["tx_data_bytes"].sum()),
        "dropped_payload_bytes": s["bytes"]["dropped_payload_bytes"],
        "retransmitted_payload_bytes": run["retransmitted_payload_bytes"],
        "duplicate_payload_bytes": run["duplicate_payload_bytes"],
        "timeouts": run["retransmission_timeouts"], "timeout_probes": run["timeout_probes"],
        "spurious_timeout_probes": run["spurious_timeout_probes"],
        "spurious_detected": run["spurious_retransmissions_detected"],
        "wall_s": run["wall_time_s"],
    }


def _f(x, fmt):
    return "-" if x is None else format(x, fmt)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--out", default=str(HERE / "results" / "transport.json"))
    a = ap.parse_args(argv)
    out = {"scenario": "scenarios/leaf_spine_32_raw.yaml", "coalescing": [], "rto": [], "long_queues": []}

    print("1. ACK coalescing x routing (seed 1)")
    print(f"{'routing':9s} {'set-up':22s} {'ctrl/data':>10s} {'x fewer':>8s} {'ratio':>7s} {'rtx MB':>8s} {'dup MB':>8s}")
    for routing in ("ecmp", "spray", "adaptive"):
        base = None
        for label, ov in (("legacy (1, fixed)", []), ("ack_every 1", ["receiver.rto_mode=adaptive"]),
                          ("ack_every 8", ["receiver.rto_mode=adaptive", "receiver.ack_every=8"]),
                          ("ack_every 64", ["receiver.rto_mode=adaptive", "receiver.ack_every=64"])):
            m = measure([f"routing.policy={routing}"] + ov)
            m.update(routing=routing, setup=label)
            base = base or m["control_over_data"]
            m["reduction"] = base / m["control_over_data"]
            out["coalescing"].append(m)
            print(f"{routing:9s} {label:22s} {m['control_over_data']:10.5f} {m['reduction']:8.1f} "
                  f"{_f(m['completion_ratio'], '7.3f')} {m['retransmitted_payload_bytes'] / 1e6:8.2f} "
                  f"{m['duplicate_payload_bytes'] / 1e6:8.2f}", flush=True)

    print("\n2. RTO mode x ECMP seeds (ratio / lossless = against the same placement without drops)")
    print(f"{'seed':>4s} {'mode':28s} {'ratio':>7s} {'/lossless':>9s} {'timeouts':>8s} {'probes':>7s} "
          f"{'spurious units':>14s} {'rtx MB':>7s}")
    modes = (("fixed (IRN 100/320 us)", []), ("adaptive", ["receiver.rto_mode=adaptive"]),
             ("adaptive, floor srtt+4rttvar", ["receiver.rto_mode=adaptive", "receiver.rto_rttvar_mult=4"]),
             ("adaptive, ack_every 64", ["receiver.rto_mode=adaptive", "receiver.ack_every=64"]))
    for seed in range(1, a.seeds + 1):
        ref = measure(["topology.buffer.size=unbounded"], seed)["completion_ratio"]
        for label, ov in modes:
            m = measure(ov, seed)
            m.update(mode=label, lossless_ratio=ref,
                     vs_lossless=(m["completion_ratio"] / ref) if m["completion_ratio"] else None)
            out["rto"].append(m)
            print(f"{seed:4d} {label:28s} {_f(m['completion_ratio'], '7.4f')} {_f(m['vs_lossless'], '9.3f')} "
                  f"{m['timeouts']:8d} {m['timeout_probes']:7d} {m['duplicate_payload_bytes'] // UNIT:14d} "
                  f"{m['retransmitted_payload_bytes'] / 1e6:7.2f}", flush=True)
    for label, _ in modes:
        rows = [m for m in out["rto"] if m["mode"] == label and m["vs_lossless"] is not None]
        if rows:
            print(f"mean {label:28s} {sum(m['completion_ratio'] for m in rows) / len(rows):7.4f} "
                  f"{sum(m['vs_lossless'] for m in rows) / len(rows):9.3f}")

    print("\n3. Long queues: 'unbounded' = no drops, ECMP collisions queue for up to ~200 us (every expiry is"
          " spurious);\n   'lossy' = the quickstart's 2 MiB buffers (40 us queues and drops), go-back-N")
    print(f"{'set-up':40s} {'ratio':>7s} {'timeouts':>8s} {'probes':>7s} {'spurious probes':>15s} {'dup units':>9s}")
    ub, gbn = ["topology.buffer.size=unbounded"], ["receiver.model=go_back_n"]
    for label, ov in (("unbounded, fixed", ub), ("unbounded, adaptive", ub + ["receiver.rto_mode=adaptive"]),
                      ("unbounded, adaptive, ack_every 64", ub + ["receiver.rto_mode=adaptive", "receiver.ack_every=64"]),
                      ("lossy go_back_n, fixed", gbn),
                      ("lossy go_back_n, adaptive (floor 4)", gbn + ["receiver.rto_mode=adaptive"]),
                      ("lossy go_back_n, adaptive, no floor", gbn + ["receiver.rto_mode=adaptive",
                                                                     "receiver.rto_rttvar_mult=0"])):
        m = measure(ov)
        m.update(setup=label)
        out["long_queues"].append(m)
        print(f"{label:40s} {_f(m['completion_ratio'], '7.4f')} {m['timeouts']:8d} {m['timeout_probes']:7d} "
              f"{m['spurious_timeout_probes']:15d} {m['duplicate_payload_bytes'] // UNIT:9d}", flush=True)

    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"\nwrote {a.out}")


if __name__ == "__main__":
    main()
