"""How a run ended is said on the summary line, in summary.json and in the exit code (issue 13):
a run stopped by simulation.time_limit, or one whose messages failed, is not 'complete' and does
not exit 0; its figures say they cover the completed messages only."""
from __future__ import annotations

import json

import pytest

import fabricsim
from fabricsim.cli import main
from tests.conftest import BASE_SCENARIO


@pytest.mark.parametrize("engine", ["packet", "flow"])
def test_a_time_limited_run_says_so_and_exits_3(write, runner, tmp_path, engine):
    scenario = write("scenario.yaml", BASE_SCENARIO)
    out = tmp_path / "o"
    res = runner.invoke(main, ["run", str(scenario), "-o", str(out), "--set", "simulation.time_limit=1us",
                               "--set", f"simulation.engine={engine}"])
    assert res.exit_code == 3, res.output
    first = res.stdout.splitlines()[0]
    assert "TIME_LIMIT" in first and "4 of 4 messages not completed" in first, first
    assert "completed messages only" in res.stdout
    assert "INCOMPLETE RUN" in res.stdout
    assert "warning: run incomplete" in res.stderr
    s = json.loads((out / "summary.json").read_text())
    assert s["status"] == s["run"]["status"] == "time_limit"
    assert s["incomplete"]["messages_not_completed"] == 4
    assert s["incomplete"]["by_reason"] == {"time_limit": 4}
    assert json.loads((out / "run.json").read_text())["status"] == "time_limit"


def test_a_complete_run_exits_0_and_carries_the_results_format(write, runner, tmp_path):
    scenario = write("scenario.yaml", BASE_SCENARIO)
    out = tmp_path / "o"
    res = runner.invoke(main, ["run", str(scenario), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "status complete" in res.stdout.splitlines()[0]
    assert "completed messages only" not in res.stdout
    s = json.loads((out / "summary.json").read_text())
    assert s["status"] == "complete" and "incomplete" not in s
    assert s["results_format"] == 1


def test_failed_messages_make_the_run_incomplete_failed_and_exit_3(write, runner, tmp_path):
    """retry_limit 0 and a tiny buffer under incast: queue pairs give up (retry_exceeded)."""
    import yaml
    sc = {"name": "failing",
          "topology": {"kind": "leaf_spine", "hosts_per_leaf": 4, "leaves": 2, "spines": 4,
                       "buffer": {"size": "24KiB"}},
          "traffic": {"pattern": "incast", "senders": 7, "receiver": 0, "message_size": "256KiB"},
          "receiver": {"model": "ddp", "retry_limit": 0, "rto_low": "5us", "rto_high": "5us"},
          "simulation": {"seed": 3, "time_limit": "2ms"}}
    scenario = write("scenario.yaml", yaml.safe_dump(sc))
    out = tmp_path / "o"
    res = runner.invoke(main, ["run", str(scenario), "-o", str(out), "-q"])
    s = json.loads((out / "summary.json").read_text())
    assert s["messages"]["incomplete"] > 0, s["messages"]
    assert s["status"] == "incomplete_failed"
    assert res.exit_code == 3, res.output


def test_the_exit_codes_are_documented_in_help(runner):
    for args in (["--help"], ["run", "--help"]):
        text = " ".join(runner.invoke(main, args).stdout.split())
        assert "Exit codes" in text and "3 the run ended with messages not completed" in text
        assert "130 interrupted" in text


def test_the_api_status_counts_failed_messages_in_the_flow_engine_too():
    """A flow-engine run whose every message ended but some failed is not 'complete'."""
    from fabricsim.analysis.status import run_status
    assert run_status("complete", 1) == "incomplete_failed"
    res = fabricsim.run({"name": "t", "topology": {"hosts_per_leaf": 2, "leaves": 2, "spines": 2},
                         "traffic": {"pattern": "permutation", "message_size": "64KiB"},
                         "simulation": {"engine": "flow", "time_limit": "1us"}})
    assert res.summary["status"] == "time_limit"
    assert res.headline()["status"] == "time_limit" and "status=time_limit" in repr(res)
