"""The flow engine's step arithmetic: the compiled twins return the numpy reference's arrays bit
for bit (fabricsim/flows/advance.py)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fabricsim.flows import advance as ref

compiled = pytest.importorskip("fabricsim.flows.advance_compiled")


def _rows(seed: int, n: int):
    rng = np.random.default_rng(seed)
    on = rng.random(n) < 0.7
    r = rng.choice([0.0, np.nan, np.inf, 1e-3, 7.0, 1e9], size=n) * rng.random(n)
    r[on & (rng.random(n) < 0.1)] = 0.0
    rem = np.where(rng.random(n) < 0.2, rng.choice([0.0, -0.0], size=n), rng.random(n) * 1e6)
    rem[~on & (rng.random(n) < 0.3)] = np.nan
    t0 = rng.random(n) * 1e6
    return on, r, rem, t0, rng.random(n), rng.random(n) * 1e4


def _same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 300), widen=st.booleans(),
       q=st.sampled_from([0.0, 0.01, 0.5, 1.0]))
def test_compiled_step_equals_the_numpy_reference(seed, n, widen, q):
    on, r, rem, t0, good, tail = _rows(seed, n)
    # (finish times from positive zeros: numpy's min of -0.0 and 0.0 depends on its vector order,
    # and the engine never holds a negative zero; the step below is given both)
    pos = np.where(rem == 0, 0.0, rem)
    tf_a, dt_a, t_a = ref.finish_times(on, r, pos, t0)
    tf_b, dt_b, t_b = compiled.finish_times(on, r, pos, t0)
    assert _same(tf_a, tf_b) and _same(dt_a, dt_b) and _same(t_a, t_b)
    finite = tf_a[np.isfinite(tf_a)]
    horizon = float(np.quantile(finite, q)) if len(finite) else 1.0
    step = horizon * 0.5
    a = ref.advance(tf_a, on, r, rem, good, tail, horizon, step, widen)
    b = compiled.advance(tf_b, on, r, rem, good, tail, horizon, step, widen)
    for x, y in zip(a, b):
        assert _same(x, y)


def test_the_reference_finishes_rows_within_the_horizon_and_moves_the_others():
    on = np.array([True, True, True, False])
    r = np.array([1.0, 2.0, 0.0, 5.0])
    rem = np.array([1.0, 10.0, 3.0, 0.0])
    tf, dt, t0 = ref.finish_times(on, r, rem, np.array([4.0, 2.0, 9.0, 0.0]))
    assert tf.tolist() == [1.0, 5.0, np.inf, np.inf] and dt == 1.0 and t0 == 2.0
    for mod in (ref, compiled):
        a = mod.advance(tf, on, r, rem, np.full(4, 0.5), np.full(4, 2.0), 1.0, 0.5, True)
        # row 0 finishes (the step widens to its finish, 1.0); row 1 moves 2 x 1.0
        assert a.step == 1.0 and a.done.tolist() == [0]
        assert a.rem.tolist() == [0.0, 8.0, 3.0, 0.0]
        assert a.good.tolist() == [0.5, 1.0, 0.0] and a.lagged.tolist() == [1.0, 2.0, 0.0]


def test_the_engine_gives_the_same_results_with_the_reference_steps(monkeypatch):
    """The flow engine's loop with the compiled solver calls the compiled twins; with the numpy
    reference put in their place, every table and figure is the same (an all-to-all on an
    oversubscribed leaf-spine whose ECMP collisions give the flows different rates: tens of steps,
    grouping windows)."""
    import json

    import fabricsim
    sc = {"name": "steps", "topology": {"kind": "leaf_spine", "hosts_per_leaf": 4, "leaves": 4, "spines": 3},
          "traffic": {"pattern": "all_to_all", "message_size": "48KiB"}, "routing": {"policy": "ecmp"},
          "simulation": {"engine": "flow", "flow": {"solver": "compiled"}}}
    a = fabricsim.run(sc)
    monkeypatch.setattr(compiled, "finish_times", ref.finish_times)
    monkeypatch.setattr(compiled, "advance", ref.advance)
    b = fabricsim.run(sc)
    assert a.summary["run"]["flow_steps"] > 10
    for x, y in ((a.summary, b.summary),):
        for s in (x, y):
            s["run"].pop("wall_time_s"), s["run"].pop("events_per_s"), s["run"].pop("packet_hops_per_s")
        assert json.dumps(x, sort_keys=True, default=str) == json.dumps(y, sort_keys=True, default=str)
    assert a.messages.equals(b.messages) and a.links.equals(b.links) and a.goodput.equals(b.goodput)
