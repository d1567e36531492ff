"""Per-operation figures (fabricsim/analysis/collectives.py): nccl-tests algbw / busbw, the
per-operation lower bound, the per-kind summary and compare's per-operation columns."""
from __future__ import annotations

import dataclasses

import pytest

import fabricsim
from fabricsim.cli import main
from fabricsim.traces import write_trace
from fabricsim.traces.collectives import compose, ring_all_gather, ring_all_reduce
from fabricsim.traces.schema import Trace, check_trace

S = 4 * 64 * 4096            # 1 MiB buffer per rank: 4 chunks of 64 full MTU packets
RANKS = [0, 1, 2, 3]         # one leaf: every ring link is a host link used once per direction
WIRE = 4096 + 82             # MTU + RoCEv2 header
SER_PS = WIRE * 8 * 10**12 // (400 * 10**9)                    # 83 560 ps at 400 Gbit/s
# a chunk alone: host -> leaf (500 ns + 600 ns switch) -> host (500 ns), 64 store-and-forward packets
CHUNK_IDEAL_PS = 2 * SER_PS + 63 * SER_PS + 500_000 + 600_000 + 500_000


def tagged(records, kind, nbytes):
    return [dataclasses.replace(r, collective=kind, collective_bytes=nbytes) for r in records]


def scenario(path, routing="adaptive"):
    return {"name": "coll", "topology": {"kind": "leaf_spine", "hosts_per_leaf": 4, "leaves": 2, "spines": 2,
                                         "host_link": {"rate": "400Gbps", "delay": "500ns"},
                                         "fabric_link": {"rate": "400Gbps", "delay": "500ns"},
                                         "switch_latency": "600ns"},
            "traffic": {"pattern": "trace", "path": str(path)}, "routing": {"policy": routing},
            "simulation": {"seed": 1}}


def run(tmp_path, records, name="t.parquet"):
    path = write_trace(check_trace(Trace(list(records), "<test>")), tmp_path / name)
    return fabricsim.run(scenario(path))


@pytest.mark.parametrize("gen,kind,steps,bus", [(ring_all_reduce, "allreduce", 6, 2 * 3 / 4),
                                                (ring_all_gather, "all_gather", 3, 3 / 4)])
@pytest.mark.parametrize("give_bytes", [True, False])
def test_ring_collective_bandwidths_are_the_nccl_tests_ones(tmp_path, gen, kind, steps, bus, give_bytes):
    """4-rank ring on an idle leaf: algbw = S / t, busbw = algbw x 2 (n-1)/n (all-reduce) or
    (n-1)/n (all-gather), with S the buffer per rank whether the trace gives it or the table
    derives it from the bytes sent (2 (n-1) S or (n-1) S in all). The bound of the operation
    is its critical path, ``steps`` chunk times, and the run is within ACK interference of it."""
    r = run(tmp_path, tagged(gen(RANKS, S, op="x"), kind, S if give_bytes else 0))
    assert (r.messages["ideal_fct_ps"] == CHUNK_IDEAL_PS).all()
    row = r.collectives.set_index("op").loc["x"]
    t = int(row["time_ps"])
    assert row["collective"] == kind and row["ranks"] == 4
    assert row["collective_bytes"] == S
    assert row["algbw_bps"] == pytest.approx(S * 8e12 / t)
    assert row["busbw_bps"] == pytest.approx(S * 8e12 / t * bus)
    assert row["ideal_time_ps"] == steps * CHUNK_IDEAL_PS
    assert row["ideal_time_ps"] <= t < 1.05 * row["ideal_time_ps"]
    assert row["completion_time_ratio"] == pytest.approx(row["ideal_time_ps"] / t)
    agg = r.summary["collectives"]["by_kind"][kind]
    assert agg["operations"] == 1 and agg["collective"] == kind
    assert agg["busbw_mean_bps"] == pytest.approx(row["busbw_bps"])
    assert agg["ideal_time_mean_ps"] == row["ideal_time_ps"]


def test_untagged_operations_follow_the_documented_conventions(tmp_path):
    """No collective tag: phase dispatch -> all-to-all (S = bytes sent / (n - 1)); phase other ->
    busbw = algbw = bytes per rank / t. Summary keys: the phase for dispatch, else ``other``."""
    untag = dict(collective="", collective_bytes=0)     # the generators tag their records
    recs = [dataclasses.replace(r, **untag) for r in ring_all_reduce(RANKS, S, op="plain")]
    disp = [dataclasses.replace(r, id=r.id + 100, op="d", phase="dispatch", deps=(), **untag) for r in
            ring_all_gather([4, 5, 6, 7], S)[:4]]
    r = run(tmp_path, recs + disp)
    c = r.collectives.set_index("op")
    plain, d = c.loc["plain"], c.loc["d"]
    assert plain["collective"] == "" and plain["collective_bytes"] != plain["collective_bytes"]   # NaN
    assert plain["busbw_bps"] == plain["algbw_bps"] == pytest.approx(6 * S / 4 * 8e12 / plain["time_ps"])
    assert d["collective"] == "all_to_all"
    assert d["collective_bytes"] == pytest.approx(S / 3)          # S bytes sent in all by n = 4 ranks
    assert d["busbw_bps"] == pytest.approx(d["algbw_bps"] * 3 / 4)
    assert set(r.summary["collectives"]["by_kind"]) == {"other", "dispatch"}


def test_compare_gains_per_operation_columns_only_when_runs_have_them(tmp_path, runner):
    path = write_trace(compose([tagged(ring_all_reduce(RANKS, S, op="ar"), "allreduce", S)]), tmp_path / "ar.parquet")
    df = fabricsim.compare(scenario(path), vary={"routing": ["ecmp", "adaptive"]})
    for col in ("allreduce_time_us", "allreduce_algbw_gbps", "allreduce_busbw_gbps"):
        assert col in df.columns and df[col].notna().all()
    res = fabricsim.run(scenario(path, "ecmp"))
    row = res.collectives.iloc[0]
    ecmp = df.set_index("routing").loc["ecmp"]
    assert ecmp["allreduce_time_us"] == pytest.approx(row["time_ps"] / 1e6)
    assert ecmp["allreduce_busbw_gbps"] == pytest.approx(row["busbw_bps"] / 1e9)
    # named explicitly, and in the CLI's table
    df2 = fabricsim.compare(scenario(path), metrics=["completion_time_ratio", "allreduce_busbw_gbps"])
    assert list(df2.columns) == ["seed", "status", "reason", "completion_time_ratio", "allreduce_busbw_gbps"]
    import yaml
    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump(scenario(path)))
    out = runner.invoke(main, ["compare", str(sc), "--vary", "routing=ecmp,adaptive", "-o", str(tmp_path / "cmp")])
    assert out.exit_code == 0, out.output
    assert "allreduce_busbw_gbps" in out.output
