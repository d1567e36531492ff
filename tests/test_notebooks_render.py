"""Every notebook under notebooks/ executes and shows every figure it creates.

This is the test run's only execution of the notebooks (a cell that raises fails it). Checking
that no cell raises is not enough: a notebook whose figures silently vanish (a library switching
matplotlib to Agg on import) would pass that. Here
each notebook runs in a kernel with ``matplotlib.pyplot.figure`` counted (every pyplot figure,
including those of ``plt.subplots`` and of ``fabricsim.plot_*`` without an ``ax``), and the
number of ``image/png`` outputs must equal the number of figures created.
"""
from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))

_COUNT = """
import matplotlib.pyplot as _plt
_fabricsim_test_figures = [0]
_fabricsim_test_figure = _plt.figure
def _counted_figure(*a, **kw):
    _fabricsim_test_figures[0] += 1
    return _fabricsim_test_figure(*a, **kw)
_plt.figure = _counted_figure
"""
_REPORT = """
import json as _json, matplotlib as _mpl
print(_json.dumps({"figures": _fabricsim_test_figures[0], "backend": _mpl.get_backend()}))
"""


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 3


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_figure_a_notebook_creates_is_shown(path):
    nb = nbformat.read(path, as_version=4)
    n_cells = len(nb.cells)
    nb.cells.insert(0, nbformat.v4.new_code_cell(_COUNT))
    nb.cells.append(nbformat.v4.new_code_cell(_REPORT))
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    body = nb.cells[1:1 + n_cells]
    images = sum(1 for c in body if c.cell_type == "code" for o in c.get("outputs", [])
                 if "image/png" in o.get("data", {}))
    report = json.loads("".join(o.get("text", "") for o in nb.cells[-1].outputs if o.get("name") == "stdout"))
    assert report["figures"] > 0, f"{path.name} creates no figure"
    assert images == report["figures"], (f"{path.name}: {report['figures']} figures created, {images} shown "
                                         f"(backend at the end: {report['backend']})")
    assert "inline" in report["backend"], report["backend"]
