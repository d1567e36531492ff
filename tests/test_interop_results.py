"""ns-3 fct.txt export and nccl-tests tables from a results folder (fabricsim.interop)."""
from __future__ import annotations

import math

import pandas as pd
import pytest
from click.testing import CliRunner

import fabricsim
from fabricsim.analysis.load import load_results
from fabricsim.errors import ConfigError
from fabricsim.interop.cli import interop
from fabricsim.interop.nccl_table import _float_str, bus_factor, format_nccl_tables, nccl_rows
from fabricsim.interop.ns3_fct import fct_lines, node_ip
from fabricsim.traces import write_trace
from fabricsim.traces.collectives import compose, sequence

TOPO = {"hosts_per_leaf": 2, "leaves": 2, "spines": 2}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    d = tmp_path_factory.mktemp("interop")
    recs = sequence("allreduce", [0, 1, 2, 3], 64 * 1024, repeat=2)
    recs += sequence("all_gather", [0, 1, 2, 3], 32 * 1024, start_id=len(recs))
    write_trace(compose([recs]), d / "coll.csv")
    fabricsim.run({"name": "coll", "topology": TOPO, "traffic": {"pattern": "trace", "path": str(d / "coll.csv")}},
                  output_dir=d / "res")
    return d / "res"


# ---------------------------------------------------------------- ns-3 fct.txt

def test_node_ip_is_hpccs_node_id_to_ip():
    # third.cc: 0x0b000001 + (id / 256) * 0x00010000 + (id % 256) * 0x00000100
    assert node_ip(0) == 0x0B000001
    assert node_ip(1) == 0x0B000101
    assert node_ip(255) == 0x0B00FF01
    assert node_ip(300) == 0x0B012C01        # 300 = 1 * 256 + 44


def _msgs(rows):
    cols = ["message_id", "src", "dst", "size_bytes", "release_ps", "end_ps", "ideal_fct_ps", "completed"]
    return pd.DataFrame(rows, columns=cols)


def test_fct_lines_layout_rounding_ports_and_order():
    m = _msgs([
        (0, 0, 1, 1000, 1499, 10500, 2400, True),     # start 1 ns, end 11 ns -> fct 10, ideal 2 ns
        (1, 0, 1, 2000, 1500, 9000, 2500, True),      # start 2 ns (half up), end 9 -> fct 7, ideal 3
        (2, 1, 0, 3000, 0, None, 1000, False),        # incomplete: not written (ns-3 writes finished QPs)
        (3, 0, 1, 4000, 0, 20000, 20000, True),       # third flow of pair (0, 1): sport 10002
    ])
    assert fct_lines(m, dport=100) == [
        "0b000001 0b000101 10001 100 2000 2 7 3",     # finishes first
        "0b000001 0b000101 10000 100 1000 1 10 2",
        "0b000001 0b000101 10002 100 4000 0 20 20",
    ]


def test_fct_needs_the_ideal_column():
    m = _msgs([(0, 0, 1, 1000, 0, 10, 5, True)]).drop(columns=["ideal_fct_ps"])
    with pytest.raises(ConfigError, match="no ideal_fct_ps column"):
        fct_lines(m, source="res")


def test_fct_export_of_a_results_folder(results, tmp_path):
    r = CliRunner().invoke(interop, ["fct-export", str(results), str(tmp_path / "fct.txt")])
    assert r.exit_code == 0, r.output
    msgs = load_results(results).messages
    lines = (tmp_path / "fct.txt").read_text().splitlines()
    assert len(lines) == int(msgs["completed"].sum()) == len(msgs)
    by_id = msgs.set_index("message_id")
    ends = []
    for line in lines:
        sip, dip, sport, dport, size, start, fct, ideal = line.split()
        src, dst = (int(sip, 16) >> 8) & 0xFFFF, (int(dip, 16) >> 8) & 0xFFFF    # HPCC's ip_to_node_id
        assert int(dport) == 100 and int(sport) >= 10000
        cand = by_id[(by_id["src"] == src) & (by_id["dst"] == dst) & (by_id["size_bytes"] == int(size))]
        hit = cand[(cand["release_ps"] + 500) // 1000 == int(start)]
        assert len(hit) >= 1
        end_ns = int(start) + int(fct)
        assert any(abs(e / 1000 - end_ns) <= 0.5 for e in hit["end_ps"])
        assert any(abs(i / 1000 - int(ideal)) <= 0.5 for i in hit["ideal_fct_ps"])
        ends.append(end_ns)
    assert ends == sorted(ends)


def test_fct_export_of_a_folder_that_is_not_results(tmp_path):
    r = CliRunner().invoke(interop, ["fct-export", str(tmp_path), str(tmp_path / "fct.txt")])
    assert r.exit_code == 2 and r.output.startswith("error: ") and r.output.count("\n") == 1
    assert not (tmp_path / "fct.txt").exists()


# ---------------------------------------------------------------- nccl-tests tables

@pytest.mark.parametrize("kind,n,factor", [
    # nccl-tests doc/PERFORMANCE.md "Summary": AllReduce 2(n-1)/n, ReduceScatter, AllGather and
    # AlltoAll (n-1)/n, Broadcast 1; src/sendrecv.cu factor 1
    ("allreduce", 8, 14 / 8), ("allreduce", 2, 1.0), ("allreduce", 16, 30 / 16),
    ("reduce_scatter", 8, 7 / 8), ("all_gather", 8, 7 / 8), ("all_gather", 2, 0.5),
    ("all_to_all", 8, 7 / 8), ("all_to_all", 64, 63 / 64), ("broadcast", 8, 1.0), ("sendrecv", 8, 1.0),
])
def test_bus_factors_are_nccl_tests(kind, n, factor):
    assert bus_factor(kind, n) == pytest.approx(factor, rel=1e-15)


def _coll(rows):
    return pd.DataFrame(rows, columns=["op", "collective", "ranks", "collective_bytes", "time_ps"])


def test_rows_hand_computed():
    # S = 1e6 B in t = 100 us: algbw = S / t = 10 GB/s (1e9 B/s), busbw = 10 x factor
    rows = nccl_rows(_coll([("ar", "allreduce", 4, 1e6, 100_000_000), ("ag", "all_gather", 4, 1e6, 100_000_000),
                            ("a2a", "all_to_all", 8, 1e6, 50_000_000), ("sr", "sendrecv", 2, 1e6, 100_000_000),
                            ("x", "", 4, 1e6, 1), ("late", "allreduce", 4, 1e6, None)]))
    assert rows["op"].tolist() == ["ar", "ag", "a2a", "sr"]     # unknown kind / incomplete left out
    assert rows["time_us"].tolist() == [100.0, 100.0, 50.0, 100.0]
    assert rows["algbw_GBps"].tolist() == pytest.approx([10.0, 10.0, 20.0, 10.0])
    assert rows["busbw_GBps"].tolist() == pytest.approx([15.0, 7.5, 17.5, 10.0])
    # count: all of S for all-reduce and send/recv, per rank for all-gather / all-to-all (float: 4 B)
    assert rows["count"].tolist() == [250000, 62500, 31250, 250000]
    assert rows["redop"].tolist() == ["sum", "none", "none", "none"]
    assert nccl_rows(_coll([("ar", "allreduce", 4, 1e6, 10**8)]), dtype="half")["count"].tolist() == [500000]


def test_text_layout_is_nccl_tests():
    rows = nccl_rows(_coll([("ag", "all_gather", 4, 1e6, 100_000_000)]))
    text = format_nccl_tables(rows, title="r")
    lines = text.splitlines()
    assert lines[3].split() == ["#", "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                                "time", "algbw", "busbw", "#wrong"]
    assert lines[5] == "     1000000         62500     float    none      -1   100.00   10.00    7.50    N/A"
    assert lines[6] == "# Avg bus bandwidth    : 7.5"
    # nccl-tests getFloatStr: 2 decimals, else 1, else 0, else an exponent
    assert [_float_str(v, 6) for v in (1.234, 1234.5678, 123456.7, 12345678.0)] == ["  1.23", "1234.6", "123457", " 1e+07"]


def test_nccl_table_of_a_results_folder_matches_the_collectives_table(results):
    r = CliRunner().invoke(interop, ["nccl-table", str(results), "--csv"])
    assert r.exit_code == 0, r.output
    from io import StringIO
    rows = pd.read_csv(StringIO(r.output))
    coll = load_results(results).collectives.set_index("op")
    assert rows["op"].tolist() == ["allreduce.0", "allreduce.1", "all_gather"]
    for row in rows.itertuples():
        c = coll.loc[row.op]
        assert row.busbw_GBps == pytest.approx(c["busbw_bps"] / 8e9, rel=1e-12)
        assert row.algbw_GBps == pytest.approx(c["algbw_bps"] / 8e9, rel=1e-12)
        assert row.time_us == pytest.approx(c["time_ps"] / 1e6)
        assert row.busbw_GBps / row.algbw_GBps == pytest.approx(1.5 if row.collective == "allreduce" else 0.75)
    text = CliRunner().invoke(interop, ["nccl-table", str(results)]).output
    assert "all_reduce_perf equivalent, 4 ranks" in text and "all_gather_perf equivalent, 4 ranks" in text
    assert not math.isnan(float(text.split("Avg bus bandwidth    : ")[1].split()[0]))
    r = CliRunner().invoke(interop, ["nccl-table", str(results), "--dtype", "float7"])
    assert r.exit_code == 2 and "dtype: got 'float7' (allowed: int8," in r.output


def test_nccl_table_without_collectives_exits_2(tmp_path):
    fabricsim.run({"name": "p", "topology": TOPO, "traffic": {"pattern": "permutation", "message_size": "16KiB"}},
                  output_dir=tmp_path / "res")
    r = CliRunner().invoke(interop, ["nccl-table", str(tmp_path / "res")])
    assert r.exit_code == 2 and r.output.startswith("error: ") and r.output.count("\n") == 1


def test_module_doctests():
    import doctest

    from fabricsim.interop import nccl_table, ns3_fct
    for mod in (nccl_table, ns3_fct):
        res = doctest.testmod(mod)
        assert res.attempted > 0 and res.failed == 0
