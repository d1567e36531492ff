"""``fabricsim --help`` answers without importing the simulator (timed in benchmarks/bench_cli_startup.py)."""
from __future__ import annotations

import os
import subprocess
import sys

from conftest import REPO

HEAVY = ("numpy", "pandas", "scipy", "networkx", "matplotlib", "pydantic", "pyarrow", "simpy", "yaml")


def _loaded_after(code):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    probe = f"{code}\nimport sys\nprint('LOADED:', *(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True).stdout
    return out.splitlines()[-1].split()[1:]


def test_importing_the_package_and_cli_loads_no_heavy_module():
    assert _loaded_after("import fabricsim, fabricsim.cli") == []


def test_help_loads_no_heavy_module():
    code = ("import sys\nfrom fabricsim.cli import main\nsys.argv = ['fabricsim', '--help']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass")
    assert _loaded_after(code) == []


def test_python_m_fabricsim_and_dash_h():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for flag in ("--help", "-h"):
        res = subprocess.run([sys.executable, "-m", "fabricsim", flag], env=env, capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        assert res.stdout.startswith("Usage: fabricsim"), res.stdout[:80]
        assert "run" in res.stdout and "compare" in res.stdout


def test_lazy_names_are_the_real_objects():
    import importlib

    import fabricsim
    from fabricsim.api import run
    assert fabricsim.run is run
    assert set(fabricsim.__all__) <= set(dir(fabricsim))
    for name in fabricsim.__all__:          # every advertised name resolves to its module's object
        if name != "__version__":
            obj = getattr(fabricsim, name)
            assert callable(obj), name
            assert obj is getattr(importlib.import_module(obj.__module__), obj.__name__), name


def test_fabricsim_compare_stays_the_function_whatever_is_imported_first():
    code = ("from fabricsim.compare import summarize\nimport fabricsim\n"
            "print('KIND:', type(fabricsim.compare).__name__, callable(fabricsim.compare.summarize))")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "KIND: function True"
