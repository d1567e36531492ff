"""fabricsim plan, ``fabric.batch``: which patterns share an engine run, and what ECMP draws depend on.

ECMP hashes each queue pair's 5-tuple, and queue pairs are numbered in the order a run opens them.
With every pattern of a topology in one run (``together``), a pattern's draws depend on the
patterns before it: adding a cluster size to the plan moves another size's ECMP collisions. With
``per_pattern`` each pattern has a run of its own, numbered from 0: its times depend only on itself
(and the seed).
"""
from __future__ import annotations

import copy

import pytest

from fabricsim.plan import runner
from fabricsim.plan.spec import COMM_TYPES, load_plan

from test_plan import SMALL


def _row32(batch, sizes, routing="ecmp"):
    d = dict(copy.deepcopy(SMALL), clusters=[{"topology": "leaf_spine_32x400g", "gpus": sizes}],
             fabric={"routing": routing, "batch": batch})
    spec, src = load_plan(d)
    res = runner.run_plan(spec, src)
    return res.rows[-1], res


def test_per_pattern_runs_make_ecmp_times_independent_of_the_other_sizes():
    alone, res_a = _row32("per_pattern", [32])
    with16, res_b = _row32("per_pattern", [16, 32])
    for t in COMM_TYPES:
        assert with16[f"{t}_s"] == pytest.approx(alone[f"{t}_s"], rel=1e-12), t
    assert res_b.runs == res_b.simulations > res_a.runs == res_a.simulations     # one run per pattern
    assert res_a.assumptions["batch"] == "per_pattern"
    # batched together, the 16-GPU patterns run first and shift the 32-GPU patterns' queue-pair numbers:
    # the data-parallel ring steps draw other ECMP paths (measured: 1.65x here)
    t_alone, _ = _row32("together", [32])
    t_with16, res_c = _row32("together", [16, 32])
    assert res_c.runs == 1
    assert t_alone["dp_reduce_scatter_s"] == pytest.approx(alone["dp_reduce_scatter_s"], rel=1e-12)   # first: same
    assert max(abs(t_with16[f"{t}_s"] / t_alone[f"{t}_s"] - 1) for t in COMM_TYPES) > 0.1


def test_per_pattern_and_together_agree_without_hash_draws():
    a, _ = _row32("per_pattern", [16, 32], routing="adaptive")
    b, _ = _row32("together", [16, 32], routing="adaptive")
    for t in COMM_TYPES:
        assert a[f"{t}_s"] == pytest.approx(b[f"{t}_s"], rel=1e-9), t
