"""Speed of the vectorised max-min solver (fabricsim.flows.fluid) at the target scale.

Fabric: 4 planes, each a 2-tier fat tree of 64 leaves and 32 spines with 4 parallel links per
leaf-spine pair (128 uplinks per leaf); 8192 hosts, one 200 Gbps port per plane (128 hosts per
leaf); every link 200 Gbps = 0.025 payload bytes/ps, directed: 131,072 links.

Flows: 500,000 (src, dst) host pairs on different leaves, each split 1/4 per plane.

* ``ecmp``: per flow and plane one segment, an explicit 4-link path (host up, one of the 128
  uplinks, one of the 4 spine->dst-leaf links, host down): F 2M non-zeros, V 8M.
* ``spray``: per flow and plane three shared segments: the src host's up link, the dst host's
  down link and the (plane, src leaf, dst leaf) spray, 1/128 on each of the 128 uplinks and
  1/128 (1/32 spine x 1/4 parallel link) on each of the 128 spine->dst-leaf links: F 6M, V 4.3M.

Per case: build time (numpy/scipy construction of F and V), prepare time (FluidProblem),
solve wall time, iterations, peak traced memory of a second solve under tracemalloc, process
max RSS, and a baseline measured in the same run (median of 3 of one ``V.T @ (F.T @ x)``
mat-vec pair) so the ratio is comparable across machines.

    PYTHONPATH=. python benchmarks/bench_fluid_solver.py          # ~1-2 min, writes the JSON
    PYTHONPATH=. python benchmarks/bench_fluid_solver.py --flows 50000

Writes ``benchmarks/results/fluid_solver.json``.
"""
from __future__ import annotations

import argparse
import datetime
import json
import pathlib
import platform
import resource
import sys
import time
import tracemalloc

import numpy as np
import scipy.sparse as sp

from fabricsim.flows.fluid import FluidProblem, check_max_min

PLANES, LEAVES, SPINES, PAR, HOSTS_PER_LEAF = 4, 64, 32, 4, 128
HOSTS = LEAVES * HOSTS_PER_LEAF
UP = SPINES * PAR                              # uplinks per leaf
CAP_BYTES_PER_PS = 200e9 / 8 / 1e12


def link_ids():
    """Directed link numbering: per plane [host up | host down | leaf up | spine down]."""
    per_plane = 2 * HOSTS + 2 * LEAVES * UP
    host_up = lambda p, h: p * per_plane + h
    host_down = lambda p, h: p * per_plane + HOSTS + h
    # uplink j of leaf a goes to spine j // PAR (parallel link j % PAR)
    leaf_up = lambda p, a, j: p * per_plane + 2 * HOSTS + a * UP + j
    # spine s to leaf b, parallel link k
    spine_down = lambda p, s, b, k: p * per_plane + 2 * HOSTS + LEAVES * UP + (s * LEAVES + b) * PAR + k
    return PLANES * per_plane, host_up, host_down, leaf_up, spine_down


def make_flows(n, rng):
    src = rng.integers(0, HOSTS, n)
    dst = rng.integers(0, HOSTS - HOSTS_PER_LEAF, n)
    # a destination on another leaf: skip over the source's own leaf
    dst = np.where(dst >= (src // HOSTS_PER_LEAF) * HOSTS_PER_LEAF, dst + HOSTS_PER_LEAF, dst)
    return src, dst


def build_ecmp(src, dst, rng):
    L, host_up, host_down, leaf_up, spine_down = link_ids()
    n = src.size
    p = np.tile(np.arange(PLANES), n)                 # segment = (flow, plane), flow-major
    s_, d_ = np.repeat(src, PLANES), np.repeat(dst, PLANES)
    j = rng.integers(0, UP, n * PLANES)
    k = rng.integers(0, PAR, n * PLANES)
    cols = np.stack([host_up(p, s_), leaf_up(p, s_ // HOSTS_PER_LEAF, j),
                     spine_down(p, j // PAR, d_ // HOSTS_PER_LEAF, k), host_down(p, d_)], axis=1)
    S = n * PLANES
    V = sp.csr_matrix((np.ones(4 * S), cols.ravel(), np.arange(0, 4 * S + 1, 4)), shape=(S, L))
    F = sp.csr_matrix((np.full(S, 0.25), np.arange(S), np.arange(0, S + 1, PLANES)), shape=(n, S))
    return F, V, np.full(L, CAP_BYTES_PER_PS)


def build_spray(src, dst):
    L, host_up, host_down, leaf_up, spine_down = link_ids()
    n = src.size
    # segments: [host up (p, h) | host down (p, h) | spray (p, a, b)]
    n_host = PLANES * HOSTS
    n_pair = PLANES * LEAVES * LEAVES
    S = 2 * n_host + n_pair
    hp = np.repeat(np.arange(PLANES), HOSTS)
    hh = np.tile(np.arange(HOSTS), PLANES)
    rows_h = [np.arange(n_host), n_host + np.arange(n_host)]
    cols_h = [host_up(hp, hh), host_down(hp, hh)]
    pa = np.arange(n_pair)
    pp, aa, bb = pa // (LEAVES * LEAVES), (pa // LEAVES) % LEAVES, pa % LEAVES
    j = np.arange(UP)
    up_cols = leaf_up(pp[:, None], aa[:, None], j[None, :])
    dn_cols = spine_down(pp[:, None], (j // PAR)[None, :], bb[:, None], (j % PAR)[None, :])
    spray_cols = np.concatenate([up_cols, dn_cols], axis=1)          # 256 per segment
    vrows = np.concatenate(rows_h + [np.repeat(2 * n_host + pa, 2 * UP)])
    vcols = np.concatenate(cols_h + [spray_cols.ravel()])
    vdata = np.concatenate([np.ones(2 * n_host), np.full(spray_cols.size, 1.0 / UP)])
    V = sp.csr_matrix((vdata, (vrows, vcols)), shape=(S, L))
    fp = np.tile(np.arange(PLANES), n)
    fs, fd = np.repeat(src, PLANES), np.repeat(dst, PLANES)
    seg = np.stack([fp * HOSTS + fs, n_host + fp * HOSTS + fd,
                    2 * n_host + (fp * LEAVES + fs // HOSTS_PER_LEAF) * LEAVES + fd // HOSTS_PER_LEAF], axis=1)
    seg = seg.reshape(n, 3 * PLANES)
    seg.sort(axis=1)
    F = sp.csr_matrix((np.full(seg.size, 0.25), seg.ravel(), np.arange(0, seg.size + 1, 3 * PLANES)),
                      shape=(n, S))
    return F, V, np.full(L, CAP_BYTES_PER_PS)


def measure(name, build, check):
    t0 = time.perf_counter()
    F, V, cap = build()
    t_build = time.perf_counter() - t0
    t0 = time.perf_counter()
    prob = FluidProblem(F, V, cap)
    t_prep = time.perf_counter() - t0
    x = np.ones(F.shape[0])
    FT, VT = F.T.tocsr(), V.T.tocsr()
    base = []
    for _ in range(3):
        t0 = time.perf_counter()
        VT @ (FT @ x)
        base.append(time.perf_counter() - t0)
    t_base = float(np.median(base))
    t0 = time.perf_counter()
    sol = prob.solve()
    t_solve = time.perf_counter() - t0
    tracemalloc.start()
    prob.solve()
    _cur, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    out = {"flows": F.shape[0], "segments": F.shape[1], "links": V.shape[1],
           "nnz_F": int(F.nnz), "nnz_V": int(V.nnz),
           "build_s": round(t_build, 3), "prepare_s": round(t_prep, 3),
           "solve_s": round(t_solve, 3), "iterations": sol.iterations,
           "baseline_matvec_pair_s": round(t_base, 4),
           "solve_over_baseline": round(t_solve / t_base, 1),
           "solve_peak_traced_MiB": round(peak / 2**20, 1),
           "rate_min_Gbps": round(float(sol.rates.min()) * 8e3, 3),
           "rate_max_Gbps": round(float(sol.rates.max()) * 8e3, 3)}
    if check:
        t0 = time.perf_counter()
        out["check_max_min_violations"] = len(check_max_min(F, V, cap, sol.rates))
        out["check_s"] = round(time.perf_counter() - t0, 3)
    print(name, json.dumps(out), flush=True)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--flows", type=int, default=500_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-check", action="store_true", help="skip check_max_min on the results")
    ap.add_argument("--out", default=str(pathlib.Path(__file__).parent / "results" / "fluid_solver.json"))
    a = ap.parse_args(argv)
    rng = np.random.default_rng(a.seed)
    src, dst = make_flows(a.flows, rng)
    cases = {"ecmp": measure("ecmp", lambda: build_ecmp(src, dst, rng), not a.no_check),
             "spray": measure("spray", lambda: build_spray(src, dst), not a.no_check)}
    res = {"command": " ".join(["python", "benchmarks/bench_fluid_solver.py"] + (argv or sys.argv[1:])),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": {"platform": platform.platform(), "processor": platform.processor(),
                       "python": platform.python_version(), "numpy": np.__version__,
                       "scipy": sp.__name__ and __import__("scipy").__version__},
           "max_rss_MiB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
           "cases": cases}
    pathlib.Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(a.out).write_text(json.dumps(res, indent=2) + "\n")
    print("wrote", a.out)


if __name__ == "__main__":
    main()
