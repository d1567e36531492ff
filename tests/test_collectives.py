"""Per-operation figures from traces with an op column."""
from __future__ import annotations

import pandas as pd
import pytest

import fabricsim


def trace(tmp_path, rows):
    p = tmp_path / "t.csv"
    p.write_text("id,src,dst,size_bytes,op,phase,layer,microbatch,deps,gap_ps,start_ps\n" + "\n".join(rows) + "\n")
    return p


def scenario(path):
    return {"name": "coll", "topology": {"hosts_per_leaf": 2, "leaves": 2, "spines": 2},
            "traffic": {"pattern": "trace", "path": str(path)}, "routing": {"policy": "adaptive"}}


def test_algorithm_and_bus_bandwidth_follow_their_definitions(tmp_path):
    S = 2**20
    path = trace(tmp_path, [f"0,0,2,{S},x,dispatch,0,0,,0,0", f"1,2,0,{S},x,dispatch,0,0,,0,0",
                            f"2,1,3,{S},y,combine,0,0,0;1,1000000,0"])
    res = fabricsim.run(scenario(path))
    c = res.collectives.set_index("op")
    m = res.messages.set_index("message_id")
    x = c.loc["x"]
    assert x["ranks"] == 2 and x["messages"] == 2 and x["size_bytes"] == 2 * S
    t = max(m.loc[0, "end_ps"], m.loc[1, "end_ps"]) - min(m.loc[0, "release_ps"], m.loc[1, "release_ps"])
    assert x["time_ps"] == t
    # an untagged dispatch follows the nccl-tests all-to-all convention: each of the n = 2 ranks
    # sends S to the other, so its buffer (own chunk included) is 2 S: algbw = 2 S / t and
    # busbw = algbw (n - 1) / n = S / t, the bytes a rank sends over the time (before v2 the table
    # divided the bytes by n for algbw and had busbw = algbw / 2, half the nccl-tests figures)
    assert x["collective"] == "all_to_all" and x["collective_bytes"] == 2 * S
    assert x["algbw_bps"] == pytest.approx(2 * S * 8e12 / t)
    assert x["busbw_bps"] == pytest.approx(S * 8e12 / t)
    # op y starts 1us after x's last message finished (its dependencies) and is one message
    y = c.loc["y"]
    assert y["first_release_ps"] == max(m.loc[0, "end_ps"], m.loc[1, "end_ps"]) + 1_000_000
    assert y["slowest_message_id"] == 2 and y["slowest_fct_ps"] == m.loc[2, "fct_ps"]
    # the messages table carries the trace's tags
    assert list(res.messages["phase"]) == ["dispatch", "dispatch", "combine"]
    assert res.summary["collectives"]["operations"] == 2


def test_collectives_table_is_written_only_for_traces(tmp_path):
    path = trace(tmp_path, ["0,0,2,4096,x,other,0,0,,0,0"])
    out = tmp_path / "out"
    fabricsim.run(scenario(path), output_dir=out)
    assert pd.read_parquet(out / "collectives.parquet")["op"].tolist() == ["x"]
    plain = tmp_path / "plain"
    res = fabricsim.run({"name": "p", "traffic": {"pattern": "permutation", "message_size": "64KiB"}}, output_dir=plain)
    assert not (plain / "collectives.parquet").exists()
    assert len(res.collectives) == 0 and "op" not in res.messages.columns


def test_tag_columns_are_the_columns_pandas_infers_from_the_tags():
    """add_tag_columns builds a column of strings or ints (and None) from its distinct values;
    every other mix of tags (NaN beside None, 1 and 1.0, -0.0 and 0.0, True and 1, lists) gives
    the column pandas infers from the list itself, values and types kept."""
    import numpy as np
    import pandas as pd

    from fabricsim.analysis.collectives import _gather
    lst = np.empty(2, dtype=object)
    lst[0], lst[1] = [1], [1]
    for values in (["a", "b", None, "a"], [3, None, 4, 3], [1, 2, 3], [None, None], ["a", "b", np.nan, 7],
                   [1, 1.0, 2, 2], [0.0, -0.0, 1.0, 1.0], [True, 1, 0, None], ["x", np.str_("x")], lst):
        v = values if isinstance(values, np.ndarray) else np.array(values + [None], dtype=object)[:-1]
        for rows in (np.arange(len(v))[::-1], np.arange(len(v))[1:]):
            want, got = pd.Series(v[rows].tolist()), _gather(v, rows)
            assert got.dtype == want.dtype and got.equals(want), values
            assert [type(x) for x in got] == [type(x) for x in want], values
            assert [str(x) for x in got] == [str(x) for x in want], values      # -0.0 stays -0.0
