"""The package's layers, checked from the source: no import circle among fabricsim's modules at
module level (imports inside functions are how a layer reaches up lazily, and are not counted), and
the flow layer (fabricsim/flows/) imports nothing of fabricsim outside itself (docs/architecture.md:
the ground floor every engine shares)."""
from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

PKG = Path(__file__).resolve().parents[1] / "fabricsim"


def _module(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _top_level_imports(path: Path) -> set[str]:
    """fabricsim modules imported by the statements at the top of ``path`` (not inside a def; inside
    ``if``/``try`` at the top they count)."""
    tree = ast.parse(path.read_text(), str(path))
    me = _module(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out = set()

    def visit(nodes):
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if isinstance(node, ast.ClassDef):
                    visit(node.body)        # a class body runs at import
                continue
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names if a.name.split(".")[0] == "fabricsim")
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[:len(base) - (node.level - 1)]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                if mod.split(".")[0] != "fabricsim":
                    continue
                out.add(mod)
                for a in node.names:            # "from . import x" may name a submodule
                    out.add(f"{mod}.{a.name}")
            elif isinstance(node, (ast.If, ast.Try)):
                visit(node.body)
                visit(getattr(node, "orelse", []))
                for h in getattr(node, "handlers", []):
                    visit(h.body)
                visit(getattr(node, "finalbody", []))
    visit(tree.body)
    return out


def _graph() -> nx.DiGraph:
    files = {_module(p): p for p in PKG.rglob("*.py")}
    g = nx.DiGraph()
    g.add_nodes_from(files)
    for mod, path in files.items():
        for target in _top_level_imports(path):
            # a name that is not a module (a class imported from a package) counts as its package
            while target and target not in files:
                target = target.rpartition(".")[0]
            if target and target != mod and not mod.startswith(target + ".") and target != "fabricsim":
                g.add_edge(mod, target)
    return g


def test_no_import_circle_at_module_level():
    g = _graph()
    assert g.number_of_nodes() > 100 and g.number_of_edges() > 100
    cycles = list(nx.simple_cycles(g))
    assert cycles == [], cycles[:5]


def test_the_flow_layer_imports_only_itself():
    g = _graph()
    outside = sorted((a, b) for a, b in g.edges if a.startswith("fabricsim.flows")
                     and not b.startswith("fabricsim.flows"))
    assert outside == []


def test_the_checker_sees_a_planted_circle(tmp_path, monkeypatch):
    """The graph is built from the source, so a circle written into it is found."""
    pkg = tmp_path / "fabricsim"
    (pkg / "flows").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "flows" / "__init__.py").write_text("")
    (pkg / "flows" / "a.py").write_text("from . import b\n")
    (pkg / "flows" / "b.py").write_text("from .a import x\nfrom ..engine import y\n")
    (pkg / "engine.py").write_text("from .flows import a\n")
    monkeypatch.setattr(__import__(__name__), "PKG", pkg)
    g = _graph()
    assert ["fabricsim.flows.a", "fabricsim.flows.b"] in [sorted(c) for c in nx.simple_cycles(g)]
    assert ("fabricsim.flows.b", "fabricsim.engine") in g.edges
