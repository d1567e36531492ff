"""Fluid max-min references (fabricsim.analysis.maxmin) against the textbook definition."""
import doctest

import pytest
from hypothesis import given, settings, strategies as st

from fabricsim.analysis import maxmin
from fabricsim.analysis.maxmin import fluid_completion, max_min_rates


def test_doctests():
    assert doctest.testmod(maxmin).failed == 0


def test_reference_vectors():
    # Bertsekas & Gallager: L1 (cap 1) {f1, f2}, L2 (cap 3) {f2, f3} -> 0.5, 0.5, 2.5
    assert max_min_rates([["L1"], ["L1", "L2"], ["L2"]], {"L1": 1, "L2": 3}) == pytest.approx([0.5, 0.5, 2.5])
    # parking lot: f0 on both links, f1 on L1, f2 on L2 (caps 1) -> 0.5 each
    assert max_min_rates([["L1", "L2"], ["L1"], ["L2"]], {"L1": 1, "L2": 1}) == pytest.approx([0.5] * 3)
    # a flow on no capacitated link is unconstrained
    assert max_min_rates([["X"]], {"L": 1}) == [float("inf")]


def test_fluid_completion_reshares_when_a_flow_ends():
    # two flows on one unit link: the short one ends at 2 (rate 1/2), the long one then runs alone
    assert fluid_completion([1, 3], [["L"], ["L"]], {"L": 1}) == pytest.approx([2, 4])
    # a late start: the first runs alone for 1 unit of time, then they share
    assert fluid_completion([2, 1], [["L"], ["L"]], {"L": 1}, starts=[0, 1]) == pytest.approx([3, 3])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=4), min_size=1, max_size=8),
       st.lists(st.floats(0.5, 10), min_size=6, max_size=6))
def test_max_min_definition(paths, caps):
    """Feasible, and every flow has a saturated bottleneck link on which its rate is the largest."""
    cap = {i: c for i, c in enumerate(caps)}
    rates = max_min_rates(paths, cap)
    load = {i: 0.0 for i in cap}
    for p, r in zip(paths, rates):
        for link in set(p):
            load[link] += r
    for link in cap:
        assert load[link] <= cap[link] * (1 + 1e-9)
    for p, r in zip(paths, rates):
        ok = False
        for link in set(p):
            if load[link] >= cap[link] * (1 - 1e-9):
                on = [rr for pp, rr in zip(paths, rates) if link in pp]
                if r >= max(on) * (1 - 1e-9):
                    ok = True
        assert ok, (p, r)
