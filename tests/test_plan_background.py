"""fabricsim plan, ``background:``: another job's traffic on the fabric while each pattern runs.

Expectations come from max-min sharing on small leaf-spine fabrics with one spine (one path per
pair, so no ECMP draw is involved): a link shared by one of our flows and one background flow
gives each half its rate, so our message takes twice as long; a background on links our pattern
does not use leaves its times as they were.
"""
from __future__ import annotations

import copy
import json

import pytest
from click.testing import CliRunner

from fabricsim.cli import main
from fabricsim.errors import ConfigError
from fabricsim.plan import background as bgmod
from fabricsim.plan import comm, runner
from fabricsim.plan.background import background_of
from fabricsim.plan.spec import COMM_TYPES, load_plan
from fabricsim.units import PS_PER_S, serialisation_ps

from conftest import parse_error_line
from test_plan import SMALL, _write

RATE = 400 * 10**9
#: 2 hosts per leaf, one spine: hosts 0, 1 on leaf 0, 2, 3 on leaf 1, ...; every link 400 Gb/s
LS = {"kind": "leaf_spine", "hosts_per_leaf": 2, "leaves": 4, "spines": 1,
      "host_link": {"rate": "400Gbps", "delay": "500ns"}, "fabric_link": {"rate": "400Gbps", "delay": "500ns"}}
#: a data-parallel job of 3 GPUs (0, 1 on leaf 0; 2 on leaf 1): its ring steps 1 -> 2 and 2 -> 0 cross the
#: spine, and GPU 3 (leaf 1, left to the other job) sends and receives over the same leaf-1 links
RING3 = dict(copy.deepcopy(SMALL), parallelism={"tp": 1, "pp": 1, "ep": 1},
             batch={"global_batch": 3, "seq_len": 2048}, clusters=[{"topology": LS, "gpus": 3}],
             fabric={"routing": "ecmp"})


def _sim(d=None):
    spec, src = load_plan(copy.deepcopy(d or RING3))
    _, built = runner.check(spec, src)
    return spec, src, next(iter(built.values()))


def _bg(b, job, **section):
    spec, src = load_plan(dict(copy.deepcopy(RING3), background=section))
    return background_of(spec, b.topology, job, src, "test")


# ---------------------------------------------------------------- against theory

def test_a_shared_bottleneck_halves_our_rate_so_the_time_doubles():
    spec, src, b = _sim()
    size = 16 << 20
    pat = comm.Pattern("messages", ((0, 2, size),))       # leaf 0 -> spine -> leaf 1
    sim = runner.PatternSimulator(spec, b, src)
    alone = sim.times(pat, "x")["all"]
    assert alone == pytest.approx(serialisation_ps(size, RATE) / PS_PER_S, rel=0.05)
    # the other job on GPUs 1 and 3: 1 -> 3 shares leaf 0's uplink and leaf 1's downlink with 0 -> 2
    bg = _bg(b, [0, 2], pattern="ring", gpus=[1, 3], message_size="1MiB")
    shared = sim.times(pat, "x", bg)["all"]
    assert shared == pytest.approx(2 * alone, rel=0.02)
    assert sim.simulations == 2                             # a pattern with a background has a key of its own


def test_a_half_loaded_background_stretches_by_one_and_a_half():
    """At load 0.5 the other flow sends a round (S at full rate: t) then idles t. Sharing our link its
    round takes 2t, so it is on 2/3 of the time; we get half the rate then and all of it otherwise:
    2/3 x 1/2 + 1/3 = 2/3 of the rate, 1.5 x the time."""
    spec, src, b = _sim()
    size = 16 << 20
    pat = comm.Pattern("messages", ((0, 2, size),))
    sim = runner.PatternSimulator(spec, b, src)
    alone = sim.times(pat, "x")["all"]
    bg = _bg(b, [0, 2], pattern="ring", gpus=[1, 3], message_size="1MiB", load=0.5)
    assert bg.gap_ps == bg.round_ps == serialisation_ps(1 << 20, RATE)
    assert sim.times(pat, "x", bg)["all"] == pytest.approx(1.5 * alone, rel=0.05)


def test_a_background_on_other_links_leaves_the_times_unchanged():
    spec, src, b = _sim()
    sim = runner.PatternSimulator(spec, b, src)
    pat = comm.Pattern("messages", ((0, 1, 16 << 20), (1, 0, 8 << 20)))    # inside leaf 0
    for pattern in bgmod.PATTERNS:
        bg = _bg(b, [0, 1], pattern=pattern, gpus=[2, 3, 4, 5, 6, 7])
        assert sim.times(pat, "x", bg)["all"] == pytest.approx(sim.times(pat, "x")["all"], rel=1e-9), pattern


def test_plan_with_a_colliding_background_waits_twice_as_long_for_its_ring_steps():
    _, alone = plan_of(RING3)
    _, busy = plan_of(dict(RING3, background={"pattern": "permutation"}))
    _, half = plan_of(dict(RING3, background={"pattern": "permutation", "load": 0.5}))
    a, b, h = alone.rows[0], busy.rows[0], half.rows[0]
    assert (a["background_gpus"], b["background_gpus"], b["background_flows"]) == (0, 5, 5)
    for t in ("dp_reduce_scatter", "dp_all_gather"):
        # the step waits for the slowest ring message (1 -> 2 or 2 -> 0): it shares a leaf-1 link with
        # GPU 3's flow of the permutation (3 has no neighbour of its own job on leaf 1)
        assert b[f"{t}_s"] == pytest.approx(2 * a[f"{t}_s"], rel=0.03), t
        assert a[f"{t}_s"] < h[f"{t}_s"] < b[f"{t}_s"]
    for t in COMM_TYPES:
        assert b[f"{t}_s"] >= a[f"{t}_s"] * (1 - 1e-9)
    assert b["step_s"] > a["step_s"]
    # load 1: one continuous message per flow, long enough to outlast the pattern (which waits for it)
    assert all(p["background_flows"] == p["background_messages"] == 5 for p in busy.patterns)
    assert all(p["background_bytes"] / 5 * 8 / RATE > p["time_s"] for p in busy.patterns)
    assert all(p["background_messages"] > 10 for p in half.patterns)
    assert "permutation" in busy.assumptions["background"] and "none" in alone.assumptions["background"]
    assert not any("background" in x for x in busy.assumptions["not_modelled"])


def plan_of(d):
    spec, src = load_plan(copy.deepcopy(d))
    return spec, runner.run_plan(spec, src)


def test_plan_with_a_background_on_other_links_keeps_its_times():
    """SMALL at 16 GPUs on cluster_small_draw talks inside its two HGX nodes and over its own rail
    leaves' host links; the other job on the other two nodes adds nothing (exact flow engine: with
    grouping, the background's events move the engine's grouping windows, about 1 %)."""
    d = dict(copy.deepcopy(SMALL), clusters=[{"topology": "cluster_small_draw", "gpus": [16, 32]}],
             fabric={"routing": "adaptive", "flow": {"group": 0}})
    _, alone = plan_of(d)
    _, busy = plan_of(dict(d, background={"pattern": "all_to_all", "message_size": "1MiB", "load": 0.5}))
    for a, b in zip(alone.rows, busy.rows):
        for t in COMM_TYPES:     # up to the engine's whole picoseconds (rate changes at background events)
            assert b[f"{t}_s"] == pytest.approx(a[f"{t}_s"], rel=1e-6), t
    # at 32 GPUs the job has the whole cluster: no background there
    assert [r["background_gpus"] for r in busy.rows] == [16, 0]
    assert busy.assumptions["background_per_size"]["cluster_small_draw/32"] == "none"
    assert "all_to_all on 16 GPUs (240 flows)" in busy.assumptions["background_per_size"]["cluster_small_draw/16"]


# ---------------------------------------------------------------- GPUs and patterns

def test_background_gpus_unused_fraction_and_explicit():
    spec, src, b = _sim()
    job = [0, 1, 2]
    assert _bg(b, job).pairs and {g for p in _bg(b, job).pairs for g in p} == {3, 4, 5, 6, 7}
    assert {g for p in _bg(b, job, fraction=0.4).pairs for g in p} == {3, 4}
    assert {g for p in _bg(b, job, gpus=2).pairs for g in p} == {6, 7}        # the last 2
    assert _bg(b, list(range(7))) is None                                   # 1 GPU left: no other job
    ring = _bg(b, job, pattern="ring", gpus=[3, 5, 7]).pairs
    assert ring == ((3, 5), (5, 7), (7, 3))
    a2a = _bg(b, job, pattern="all_to_all", gpus=[3, 5, 7])
    assert len(a2a.pairs) == 6
    # a round of all-to-all: 2 messages out of each GPU at its 400 Gb/s NIC
    assert a2a.round_ps == serialisation_ps(2 * a2a.size_bytes, RATE)
    perm = _bg(b, job).pairs
    assert sorted(s for s, _ in perm) == sorted(d for _, d in perm) == [3, 4, 5, 6, 7]
    assert all(s != d for s, d in perm)
    assert perm == _bg(b, job).pairs                                         # drawn from the seed


def test_too_many_background_flows_are_refused(monkeypatch):
    monkeypatch.setattr(bgmod, "MAX_FLOWS", 10)
    spec, src = load_plan(dict(copy.deepcopy(RING3), background={"pattern": "all_to_all"}))
    with pytest.raises(ConfigError) as e:
        runner.check(spec, src)
    assert e.value.field == "background.pattern" and "20 flows" in e.value.message


BAD = [
    ({"background": {"pattern": "permutatoin"}}, "background.pattern"),
    ({"background": {"bogus": 1}}, "background.bogus"),
    ({"background": {"gpus": 1}}, "background.gpus"),
    ({"background": {"gpus": "all"}}, "background.gpus"),
    ({"background": {"gpus": [3, 3]}}, "background.gpus"),
    ({"background": {"gpus": 4, "fraction": 0.5}}, "background.fraction"),
    ({"background": {"gpus": [0, 5]}}, "background.gpus"),          # GPU 0 is the job's
    ({"background": {"gpus": [5, 99]}}, "background.gpus"),         # not on the topology
    ({"background": {"gpus": 8}}, "background.gpus"),               # the last 8 include the job's
    ({"background": {"message_size": "big"}}, "background.message_size"),
    ({"background": {"message_size": 10**30}}, "background.message_size"),   # once a traceback
    ({"background": {"gpus": 1000}}, "background.gpus"),            # more than the topology has
    ({"background": {"load": 0}}, "background.load"),
    ({"background": {"load": 1.5}}, "background.load"),
    ({"background": {"fraction": 2}}, "background.fraction"),
    ({"fabric": {"routing": "ecmp", "flow": {"group": 5}}}, "fabric.flow.group"),
]


@pytest.mark.parametrize("change,field", BAD, ids=[f"{f}-{i}" for i, (_, f) in enumerate(BAD)])
def test_bad_background_exit_2_naming_the_field(tmp_path, change, field):
    p = _write(tmp_path, dict(copy.deepcopy(RING3), **change))
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["plan", str(p), "-o", str(out)])
    assert res.exit_code == 2, res.output
    err = parse_error_line(res.stderr, p)
    assert err["field"] == field, res.stderr
    assert err["line"] is not None, res.stderr
    assert not out.exists()


def test_cli_records_the_background(tmp_path):
    p = _write(tmp_path, dict(copy.deepcopy(RING3), background={"pattern": "ring", "load": 0.5}))
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["plan", str(p), "-o", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "plan.json").read_text())
    assert "ring" in doc["assumptions"]["background"] and doc["rows"][0]["background_gpus"] == 5
    import pandas as pd
    assert (pd.read_csv(out / "patterns.csv")["background_flows"] == 5).all()
    assert "background" in pd.read_csv(out / "plan.csv").columns
