"""Shared fixtures: the repository layout, a small valid scenario, a file writer and a CLI runner."""
from __future__ import annotations

import os
import re
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

REPO = Path(__file__).resolve().parent.parent
# Every simulation the suite runs (in-process, through the CLI, in the notebooks' kernels, which
# inherit the environment) fails if its duration, or an operation's time, is below its lower bound
# (fabricsim/analysis/result.py, docs/metrics.md "The lower bound"): the bound must hold on every
# run, not only in its own tests.
os.environ["FABRICSIM_CHECK_BOUND"] = "1"

# tests/plugins holds an installed-looking plug-in (a dist-info with entry points): collecting it
# would put that folder on sys.path and register the plug-in in this process's registries, for
# every later test. tests/test_plugins.py puts it on the path of a subprocess only.
collect_ignore = ["plugins"]
SCENARIOS = REPO / "scenarios"
TOPOLOGIES = REPO / "topologies"
TRACES = REPO / "traces"

# A 4-host (2 leaves x 2 hosts, 2 spines) scenario that validates and runs in well under a second.
# Line numbers matter: tests that check reported lines count from here.
BASE_SCENARIO = """\
name: t
topology:
  kind: leaf_spine
  hosts_per_leaf: 2
  leaves: 2
  spines: 2
traffic:
  pattern: permutation
  message_size: 64KiB
routing:
  policy: ecmp
simulation:
  seed: 1
  time_limit: 1ms
"""


@pytest.fixture
def write(tmp_path):
    """``write(name, text)`` -> Path of a file written under tmp_path (text is dedented)."""

    def _write(name: str, text: str) -> Path:
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
        return p

    return _write


@pytest.fixture
def runner():
    return CliRunner()


def load_bench(name: str):
    """The module ``benchmarks/<name>.py``, loaded by path (benchmarks/ is not a package): for the
    smoke tests that run a benchmark's own ``main`` so that the script does not rot, and for the
    modules that benchmarks and tests share (benchmarks/flow_validation_cases.py). Registered in
    ``sys.modules`` under its name while it runs, as an import would (dataclasses look it up)."""
    import importlib.util
    import sys
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod



ERROR_RE = re.compile(r"^(?::(?P<line>\d+))?(?:: (?P<field>[^\s:]+))?: (?P<msg>.+)$")


def parse_error_line(text: str, source: str | Path) -> dict:
    """Split ``error: SOURCE[:LINE]: field.path: message`` (exactly one line) into its parts.

    Fails the calling test if the text is not one such line naming ``source``.
    """
    lines = text.splitlines()
    assert len(lines) == 1, f"expected exactly one line, got {len(lines)}: {text!r}"
    line = lines[0]
    prefix = f"error: {source}"
    assert line.startswith(prefix), f"{line!r} does not start with {prefix!r}"
    m = ERROR_RE.match(line[len(prefix):])
    assert m, f"cannot parse {line!r} as 'error: FILE[:LINE]: field: message'"
    d = m.groupdict()
    d["line"] = int(d["line"]) if d["line"] else None
    return d
