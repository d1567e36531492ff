"""Faults during a run (issue 13): SIGTERM behaves like Ctrl-C, a second Ctrl-C still leaves the
tables and a final run.json, a crash leaves run.json 'failed' with the reason and the finished
messages on disk (one line, exit 1, no traceback); bad output paths are one line, exit 2, before
anything is written; absurd collective sizes are refused."""
from __future__ import annotations

import json
import signal

import pandas as pd
import pytest
import yaml

import fabricsim
from fabricsim.analysis.recorder import Recorder
from fabricsim.cli import main
from fabricsim.errors import SimulationError


def _scenario(write, tmp_path, engine="packet"):
    """Messages of growing size from hosts 0 and 1: they finish one after another."""
    rows = ["src,dst,size_bytes"] + [f"{i % 2},{2 + i % 6},{(i + 1) * 64 * 1024}" for i in range(16)]
    (tmp_path / "m.csv").write_text("\n".join(rows) + "\n")
    sc = {"name": "faults", "topology": {"kind": "leaf_spine", "hosts_per_leaf": 4, "leaves": 2, "spines": 2},
          "traffic": {"pattern": "csv", "path": str(tmp_path / "m.csv")},
          "simulation": {"seed": 1, "time_limit": "10ms", "engine": engine}}
    return write("faults.yaml", yaml.safe_dump(sc))


@pytest.fixture
def no_kill(monkeypatch):
    """SIGTERM outside fabricsim's own handling fails the test instead of killing pytest."""
    def refuse(signum, frame):
        raise RuntimeError(f"signal {signum} was not handled by the run")
    old = {signal.SIGTERM: signal.signal(signal.SIGTERM, refuse)}
    yield
    for s, h in old.items():
        signal.signal(s, h)


@pytest.fixture
def default_sigint():
    """Ctrl-C as a terminal's process has it: Python's default SIGINT handler for the test's duration
    (restored after). The second-Ctrl-C test failed twice under pytest-xdist (exit 0: the first
    Ctrl-C did nothing), never alone; an inherited SIG_IGN is one way to get that, so the test
    says what it found."""
    found = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield found
    signal.signal(signal.SIGINT, found)


def _signal_on_message(monkeypatch, after: int, signals):
    """Send ``signals`` (one per call, in turn) to this process once ``after`` messages ended. Raised
    in the calling thread: ``os.kill`` to the process may land in another thread (pytest-xdist's
    worker has one), and under load the run could end before the main thread handles it."""
    real = Recorder.on_message
    state = {"n": 0, "sent": 0}

    def on_message(self, st):
        real(self, st)
        state["n"] += 1
        if state["n"] >= after and state["sent"] < len(signals) and state["sent"] == 0:
            state["sent"] += 1
            signal.raise_signal(signals[0])   # to this thread: handled before the next line
    monkeypatch.setattr(Recorder, "on_message", on_message)
    return state


def _full_messages(path):
    return fabricsim.run(str(path)).messages.set_index("message_id")


def test_sigterm_ends_the_run_like_ctrl_c(no_kill, monkeypatch, write, runner, tmp_path):
    sc = _scenario(write, tmp_path)
    full = _full_messages(sc)
    _signal_on_message(monkeypatch, 3, [signal.SIGTERM])
    out = tmp_path / "o"
    r = runner.invoke(main, ["run", str(sc), "-o", str(out), "-q"])
    assert r.exit_code == 130, r.output
    assert json.loads((out / "run.json").read_text())["status"] == "interrupted"
    m = pd.read_csv(out / "messages.csv").set_index("message_id")
    done = m[m["completed"]]
    assert 3 <= len(done) < 16
    assert set(m.loc[~m["completed"], "incomplete_reason"]) == {"interrupted"}
    for col in ("end_ps", "fct_ps", "delivered_bytes"):
        assert (done[col] == full.loc[done.index, col].astype("int64")).all(), col


def test_a_second_ctrl_c_still_leaves_the_tables_and_a_final_status(no_kill, default_sigint, monkeypatch, write, runner,
                                                                    tmp_path):
    sc = _scenario(write, tmp_path)
    _signal_on_message(monkeypatch, 3, [signal.SIGINT])
    real_refresh = Recorder.refresh

    def refresh(self):             # the engine winding down after the first Ctrl-C: press it again
        signal.raise_signal(signal.SIGINT)
        real_refresh(self)
    monkeypatch.setattr(Recorder, "refresh", refresh)
    out = tmp_path / "o"
    r = runner.invoke(main, ["run", str(sc), "-o", str(out), "-q"])
    assert r.exit_code == 130, f"SIGINT handler before the test: {default_sigint!r}; stderr: {r.stderr!r}"
    assert json.loads((out / "run.json").read_text())["status"] == "interrupted"
    assert (out / "messages.parquet").is_file() and (out / "summary.json").is_file()
    assert "writing the results, please wait" in r.stderr


@pytest.mark.parametrize("exc", [SimulationError("injected engine failure"), ZeroDivisionError("injected bug")])
def test_a_crash_leaves_run_json_failed_and_the_finished_messages(exc, monkeypatch, write, runner, tmp_path):
    sc = _scenario(write, tmp_path)
    real = Recorder.on_message
    n = {"k": 0}

    def on_message(self, st):
        n["k"] += 1
        if n["k"] == 4:
            raise exc
        real(self, st)
    monkeypatch.setattr(Recorder, "on_message", on_message)
    out = tmp_path / "o"
    r = runner.invoke(main, ["run", str(sc), "-o", str(out), "-q"])
    assert r.exit_code == 1, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "injected" in lines[0], r.stderr
    assert "Traceback" not in r.output and r.exception is None or isinstance(r.exception, SystemExit)
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "failed" and "injected" in run["reason"]
    assert run["messages_ended"] == 3 and run["messages_file"] == "messages.partial.csv"
    streamed = pd.read_csv(out / "messages.partial.csv")
    assert len(streamed) == 3 and streamed["completed"].all()


def test_the_api_raises_a_simulation_error_for_an_unexpected_exception(monkeypatch, tmp_path):
    def boom(self, st):
        raise KeyError("x")
    monkeypatch.setattr(Recorder, "on_message", boom)
    with pytest.raises(SimulationError, match="internal error: KeyError"):
        fabricsim.run({"name": "t", "topology": {"hosts_per_leaf": 2, "leaves": 2, "spines": 2},
                       "traffic": {"pattern": "permutation", "message_size": "64KiB"}}, output_dir=tmp_path / "r")
    assert json.loads((tmp_path / "r" / "run.json").read_text())["status"] == "failed"


def _one_error_line(r, *words):
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for w in words:
        assert w in lines[0], lines[0]


def test_output_below_a_file_is_one_line_and_nothing_is_written(write, runner, tmp_path):
    sc = _scenario(write, tmp_path)
    (tmp_path / "afile").write_text("x")
    r = runner.invoke(main, ["run", str(sc), "-o", str(tmp_path / "afile" / "sub"), "-q"])
    _one_error_line(r, "--output", "is a file")


def test_report_html_that_is_a_folder_is_refused_before_the_run(write, runner, tmp_path):
    sc = _scenario(write, tmp_path)
    out = tmp_path / "o"
    (out / "report.html").mkdir(parents=True)
    r = runner.invoke(main, ["run", str(sc), "-o", str(out), "-q", "--report"])
    _one_error_line(r, "report.html", "is a folder")
    assert sorted(p.name for p in out.iterdir()) == ["report.html"]
    # the report command too, before writing anything
    good = tmp_path / "g"
    assert runner.invoke(main, ["run", str(sc), "-o", str(good), "-q"]).exit_code == 0
    (good / "report.html").mkdir()
    _one_error_line(runner.invoke(main, ["report", str(good)]), "report.html", "is a folder")
    (tmp_path / "afile").write_text("x")
    r = runner.invoke(main, ["report", str(good), "-o", str(tmp_path / "afile" / "r.html")])
    _one_error_line(r, "--output", "is a file")


def test_trace_outputs_that_are_folders_are_refused_before_writing(runner, tmp_path):
    d = tmp_path / "t.parquet"
    d.mkdir()
    r = runner.invoke(main, ["trace", "moe", "-o", str(d), "--gpus", "16", "--ep-size", "16"])
    _one_error_line(r, "--output", "is a folder")
    r = runner.invoke(main, ["trace", "collective", "-o", str(d), "--kind", "allreduce", "--ranks", "0-7",
                             "--size", "1MiB"])
    _one_error_line(r, "--output", "is a folder")
    assert list(d.iterdir()) == []


@pytest.mark.parametrize("args, words", [
    (["--kind", "allreduce", "--ranks", "0-99999999"], ["--ranks", "1,048,576"]),
    (["--kind", "all_to_all", "--ranks", "0-9999"], ["--ranks", "20,000,000"]),
    (["--kind", "allreduce", "--ranks", "0-7", "--channels", "99999999"], ["20,000,000"]),
])
def test_absurd_collective_sizes_are_refused(args, words, runner, tmp_path):
    out = tmp_path / "c.parquet"
    r = runner.invoke(main, ["trace", "collective", "-o", str(out), "--size", "1GiB", *args])
    _one_error_line(r, *words)
    assert not out.exists()
