"""Slice 6 of the compiled core: completions handled in the core.

A message whose completion asks nothing of Python at once (not on a connection, no dependents, not a
PXN piece: "quiet", ``M_QUIET``) is not handed to Python when it completes: the core logs it (X.CL:
its row and time, the recorder's delivered total, the reorder log's length and copies of its
counters then) and the driver records it when the core next returns (``CompiledKernel._drain``), by
the engine's own ``message_done``, in the same order. The last message always reaches Python
(``G_QUIET_LEFT``). These tests pin what that must keep: the tables, summary and event count of heap;
the rows streamed while the run goes (``messages.partial.csv``), which read the counters as they
stood at each completion; rows made at completion by a recorder that does not rebuild them.
"""
from __future__ import annotations

import csv
import io
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_compiled_conn import _run  # noqa: E402
from test_compiled_core import _engine, _same_results  # noqa: E402
from test_kernel_equivalence import FABRIC  # noqa: E402

pytest.importorskip("numba")


def _a2a(**over):
    """Every host of the 8-host leaf-spine to every other, sprayed into 32 KiB buffers: drops,
    retransmissions and reordering, some of them after a message's own completion (12 of the 56
    messages' rows change after it)."""
    sc = {"name": "quiet", "topology": {**FABRIC, "buffer": {"mode": "per_port", "size": "32KiB"}},
          "traffic": {"pattern": "all_to_all", "message_size": "48KiB"}, "routing": {"policy": "spray"},
          # (timeouts short enough to fire spuriously: resends still arriving after their message's end)
          "receiver": {"model": "ddp", "rto_low": "6us", "rto_high": "6us"},
          "simulation": {"seed": 3, "time_limit": "20ms"}, "outputs": {"link_sample_interval": "1us"}}
    for k, v in over.items():
        sc[k] = {**sc[k], **v} if isinstance(v, dict) else v
    return sc


def _streamed(sc, kernel, path, rebuilt=True):
    """Run the engine with its rows streamed to ``path``; (engine, outcome, the streamed text, rows kept)."""
    from fabricsim.analysis.recorder import Recorder
    from fabricsim.api import prepare
    from fabricsim.engine.interface import ENGINES
    _loaded, sim = prepare({**sc, "simulation": {**sc["simulation"], "kernel": kernel}})
    s = sim.scenario
    rec = Recorder(s.outputs.latency_rel_error, s.outputs.timeseries_bin, stream_path=path)
    eng = ENGINES.get("packet")(sim, rec)
    if not rebuilt:
        rec._rebuilt = False            # a recorder that keeps each row as made at its message's end
    out = eng.run()
    rec.close()
    return eng, out, Path(path).read_text(), list(rec.rows)


def test_quiet_completions_give_heaps_tables():
    sc = _a2a()
    _same_results(_run(sc, "heap"), _run(sc, "compiled"))
    eng, _out = _engine(sc, "compiled")
    # every message but the last was recorded from the core's log
    assert eng.kernel.quiet_done == len(eng._rows) - 1 == 55


@pytest.mark.parametrize("rebuilt", [True, False])
def test_rows_made_at_completion_read_the_counters_as_they_stood(tmp_path, rebuilt):
    """The streamed rows (and, for a recorder that keeps rows as made, the kept ones) hold each
    message's counters and reorder histogram at its completion, as heap's do: some messages' counters
    change after their completion here (late retransmissions, duplicates), so reading them at the
    log's drain instead would differ."""
    sc = _a2a(outputs={"link_sample_interval": "off"})     # (no link samples: the log is read rarely)
    ea, _oa, text_a, rows_a = _streamed(sc, "heap", tmp_path / "a.csv", rebuilt)
    eb, _ob, text_b, rows_b = _streamed(sc, "compiled", tmp_path / "b.csv", rebuilt)
    assert eb.kernel.name == "compiled" and eb.kernel.quiet_done == len(eb._rows) - 1
    assert text_a == text_b
    assert rows_a == rows_b
    # the run does change counters after completions: the streamed rows are not the final ones
    buf = io.StringIO()
    w = csv.writer(buf)
    for st in ea.recorder._states:
        w.writerow(["" if v is None else v for v in ea.recorder._row(st)])
    streamed, at_end = text_a.splitlines()[1:], buf.getvalue().splitlines()
    assert len(streamed) == len(at_end) == 56
    assert sum(x != y for x, y in zip(streamed, at_end)) == 12


def test_messages_with_dependents_still_reach_python_at_once(tmp_path):
    """A trace with dependencies: the dependents are released at their dependency's completion (a
    message with dependents is not quiet), the others are logged; heap's tables either way."""
    rows = ["id,src,dst,size_bytes,start_ps,gap_ps,deps"]
    mid = 0
    for h in range(8):
        for k in range(3):
            deps = "" if k == 0 else str(mid - 1)
            rows.append(f"{mid},{h},{(h + 1 + 2 * k) % 8},{16384 * (k + 1)},0,{1000000 * k},{deps}")
            mid += 1
    (tmp_path / "deps.csv").write_text("\n".join(rows) + "\n")
    sc = _a2a()
    sc["traffic"] = {"pattern": "csv", "path": str(tmp_path / "deps.csv")}
    _same_results(_run(sc, "heap"), _run(sc, "compiled"))
    eng, _out = _engine(sc, "compiled")
    # the last of each chain has no dependents: quiet, but for the run's last completion
    assert eng.kernel.quiet_done == 7


def test_the_core_returns_to_python_once_per_batch_not_per_message(tmp_path):
    """Releases at the same time are handed to Python together and quiet completions are logged: a
    56-message all-to-all (every message released at 0, no link samples) returns from the core a few
    times, not twice per message; with the messages posted 1 us apart (one release per time), once
    per release."""
    from fabricsim.analysis.recorder import Recorder
    from fabricsim.api import prepare
    from fabricsim.engine.interface import ENGINES

    def returns(sc):
        _loaded, sim = prepare({**sc, "simulation": {**sc["simulation"], "kernel": "compiled"}})
        eng = ENGINES.get("packet")(sim, Recorder())
        k = eng.kernel
        run, n = k._fn["run"], [0]

        def counted(X, until):
            n[0] += 1
            return run(X, until)
        k._fn["run"] = counted
        out = eng.run()
        assert out.status == "complete"
        return n[0], k.quiet_done

    sc = _a2a(outputs={"link_sample_interval": "off"})
    calls, quiet = returns(sc)
    assert quiet == 55 and calls <= 3          # the releases, the last completion, the end
    # a trace releasing one message per microsecond: no two releases at one time
    rows = ["id,src,dst,size_bytes,start_ps,gap_ps,deps"]
    for i in range(16):
        rows.append(f"{i},{i % 8},{(i + 3) % 8},16384,{i * 1_000_000},0,")
    (tmp_path / "staggered.csv").write_text("\n".join(rows) + "\n")
    sc["traffic"] = {"pattern": "csv", "path": str(tmp_path / "staggered.csv")}
    calls, quiet = returns(sc)
    assert quiet == 15 and 16 <= calls <= 18


def test_compiled_queue_pairs_hold_no_psn_queues():
    """On the compiled kernel the sender's PSN queues and sets live in the core's arrays: its queue
    pairs are made without their own (about 2 KB each, 2 GB on a 1,024-GPU all-to-all); on heap
    they have them. The tables are heap's either way (the tests above)."""
    sc = _a2a(outputs={"link_sample_interval": "off"})
    eh, _ = _engine(sc, "heap")
    ec, _ = _engine(sc, "compiled")
    qh = [qp for st in eh._rows for qp in st.qps]
    qc = [qp for st in ec._rows for qp in st.qps]
    assert len(qh) == len(qc) == 56
    assert all(qp.rtx is not None and qp.outstanding is not None and qp.sacked is not None for qp in qh)
    assert all(qp.rtx is None and qp.outstanding is None and qp.sacked is None and qp.lost is None
               and qp.resent is None for qp in qc)


def test_an_interrupted_compiled_run_keeps_what_heaps_keeps(tmp_path):
    """Ctrl-C at the first progress report (65,536 events in): the compiled run stops at the same
    event as heap's and reports the same messages, the logged completions included (recorded before
    the interruption is raised), with the same streamed rows."""
    from fabricsim.analysis.recorder import Recorder
    from fabricsim.analysis.result import build_result
    from fabricsim.api import prepare
    from fabricsim.engine.interface import ENGINES

    rows = ["src,dst,size_bytes"] + [f"{h},{(h + k) % 8},{size}" for h in range(8)
                                      for k, size in ((1, 16384), (2, 65536), (3, 8 << 20))]
    (tmp_path / "mixed.csv").write_text("\n".join(rows) + "\n")
    sc = _a2a(outputs={"link_sample_interval": "off"})
    sc["traffic"] = {"pattern": "csv", "path": str(tmp_path / "mixed.csv")}
    out = {}
    for kernel in ("heap", "compiled"):
        _loaded, sim = prepare({**sc, "simulation": {**sc["simulation"], "kernel": kernel}})
        rec = Recorder(stream_path=tmp_path / f"{kernel}.csv")
        eng = ENGINES.get("packet")(sim, rec)

        def progress(now):
            raise KeyboardInterrupt
        outcome = eng.run(progress=progress)
        rec.close()
        assert outcome.status == "interrupted" and outcome.events == 65_536
        out[kernel] = (build_result(sim, rec, outcome, 1.0, "test"), (tmp_path / f"{kernel}.csv").read_text(), eng)
    (a, text_a, _), (b, text_b, eng) = out["heap"], out["compiled"]
    assert eng.kernel.name == "compiled" and eng.kernel.quiet_done > 0
    completed = int(a.messages["completed"].sum())
    assert 0 < completed < 24 and int(b.messages["completed"].sum()) == completed
    assert a.messages.equals(b.messages) and a.links.equals(b.links)
    # (every message is streamed: the completed ones as they ended, the rest at the interruption)
    assert text_a == text_b and len(text_a.splitlines()) == 24 + 1
