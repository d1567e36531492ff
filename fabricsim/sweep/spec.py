"""The sweep file: a base scenario, a grid of overrides and seeds, resolved into points.

A sweep file (YAML) has these fields::

    name: routing-vs-size            # optional: default the file's stem
    base: ../quickstart.yaml         # a scenario file (relative to the sweep file), or a mapping
    grid:                            # crossed: every combination of these values
      routing: [ecmp, spray, adaptive]         # a list of values (aliases as in compare)
      traffic.message_size: [64KiB, 1MiB]      # any dotted scenario path
      topology.spines: {from: 2, to: 8, step: 2}     # a range: 2, 4, 6, 8 (``to`` included)
      traffic.qps_per_message: {from: 1, to: 8, factor: 2}   # geometric: 1, 2, 4, 8
    zip:                             # optional: groups of keys varied together (equal lengths),
      - topology.leaves: [2, 4]      # each group one axis crossed with the grid
        topology.hosts_per_leaf: [8, 4]
    seeds: 3                         # a count (the base seed, +1, ...) or a list of seeds

Every point is the base scenario with one value of every axis applied (as ``--set`` would), for
each seed; points are ordered as ``itertools.product`` of the axes (grid keys in file order, then
the zip groups), seeds innermost -- the order of :func:`fabricsim.compare`.

>>> spec = parse_spec({"base": {"name": "d", "topology": {"hosts_per_leaf": 2, "leaves": 2, "spines": 2},
...                             "traffic": {"pattern": "permutation", "message_size": "64KiB"}},
...                    "grid": {"routing": ["ecmp", "spray"]}, "seeds": 2}, "<doc>")
>>> [(p.identity, p.seed) for p in spec.points()]
[({'routing': 'ecmp'}, 1), ({'routing': 'ecmp'}, 2), ({'routing': 'spray'}, 1), ({'routing': 'spray'}, 2)]
"""
from __future__ import annotations

import copy
import difflib
import hashlib
import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError

__all__ = ["SweepSpec", "Point", "Axis", "load_spec", "parse_spec", "point_hash", "FIELDS"]

#: the fields of a sweep file
FIELDS = ("name", "description", "base", "grid", "zip", "seeds")
#: a range of values: arithmetic (``step``) or geometric (``factor``), ``to`` included
RANGE_FIELDS = ("from", "to", "step", "factor")
#: most points a sweep may expand to (a typo in a range must not plan a billion runs)
MAX_POINTS = 1_000_000


def value_text(value) -> str:
    """A value as written in an override (``--set`` syntax, parsed back as YAML)."""
    return value if isinstance(value, str) else json.dumps(value)


@dataclass(frozen=True)
class Axis:
    """One axis of the sweep: one key (a grid entry) or several keys varied together (a zip group).

    ``where`` is the sweep-file field the axis comes from (``grid`` or ``zip[0]``);
    ``values[i]`` is the tuple of values of the axis's keys at position ``i``."""

    keys: tuple[str, ...]
    paths: tuple[str, ...]
    values: tuple[tuple, ...]
    where: str


@dataclass
class Point:
    """One run of the sweep: a combination of axis values and a seed."""

    identity: dict            # key as written in the sweep file -> value
    seed: int
    overrides: list           # ``path=value`` strings (``--set`` syntax)
    positions: tuple = ()     # index of the value on each axis
    point_id: str = ""        # :func:`point_hash` of the resolved scenario (set by the runner's check)


@dataclass
class SweepSpec:
    """A parsed sweep file (:func:`load_spec`)."""

    name: str
    source: str                       # the sweep file (or ``<dict>``)
    base: Any                         # the base scenario: an absolute path (str) or a mapping
    base_dir: str                     # where relative paths of an inline base resolve
    axes: list[Axis] = field(default_factory=list)
    seeds: list[int] | None = None    # explicit seeds (None: see seed_count)
    seed_count: int = 1               # without explicit seeds: the base seed, +1, ... (this many)
    description: str = ""
    root: Any = None                  # YAML node tree, for line numbers

    @property
    def keys(self) -> list[str]:
        """Identity columns: every axis key, in axis order."""
        return [k for a in self.axes for k in a.keys]

    def line_of(self, *path) -> int | None:
        """1-based line of the sweep-file entry at ``path`` (or of its deepest existing parent):
        the scenario loader's own lookup (config/scenario.py)."""
        from ..config.scenario import _node_line
        return _node_line(self.root, tuple(path))

    def error(self, message: str, *path) -> ConfigError:
        """A one-line ConfigError naming this file, the field at ``path`` and its line."""
        text = ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in path).replace(".[", "[")
        return ConfigError(message, source=self.source, field=text or None, line=self.line_of(*path))

    def points(self, base_seed: int = 1) -> list[Point]:
        """Every point, in the order of the module doc (``base_seed``: the base scenario's seed,
        used when the file gives a count of seeds or none)."""
        seeds = self.seeds if self.seeds is not None else [base_seed + i for i in range(self.seed_count)]
        out = []
        for combo in itertools.product(*(range(len(a.values)) for a in self.axes)):
            identity, overrides = {}, []
            for axis, i in zip(self.axes, combo):
                for key, path, value in zip(axis.keys, axis.paths, axis.values[i]):
                    identity[key] = value
                    overrides.append(f"{path}={value_text(value)}")
            for seed in seeds:
                out.append(Point(dict(identity), seed, list(overrides), tuple(combo)))
        return out


def point_hash(resolved: dict) -> str:
    """16 hex digits naming a resolved point (``Scenario.model_dump(mode="json")`` with every
    override and the seed applied), the same serialisation as
    :func:`fabricsim.analysis.writer.scenario_hash` but longer (a sweep may hold many thousands of
    points; 8 digits would collide) and salted with the fabricsim version (a new simulator runs
    the points again).

    >>> point_hash({"name": "a"}) == point_hash({"name": "a"}), len(point_hash({"name": "a"}))
    (True, 16)
    """
    from .. import __version__
    text = json.dumps({"fabricsim": __version__, "scenario": resolved}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def load_spec(path: str | Path) -> SweepSpec:
    """Read and check a sweep file (its structure; :func:`fabricsim.sweep.runner.check` validates
    every point as a scenario). Raises a one-line :class:`ConfigError` naming file, field and line."""
    from ..config.scenario import load_yaml
    data, root = load_yaml(path)
    p = Path(path)
    spec = parse_spec(data, str(path), base_dir=p.resolve().parent, root=root, default_name=p.stem)
    return spec


def _allowed(name, allowed) -> str:
    close = difflib.get_close_matches(str(name), allowed, n=1)
    return f"(allowed: {', '.join(allowed)})" + (f"; did you mean {close[0]!r}?" if close else "")


def parse_spec(data, source: str = "<dict>", base_dir: str | Path | None = None, root=None,
               default_name: str = "sweep") -> SweepSpec:
    """A sweep from its mapping (``source`` names it in errors; ``base_dir``: where a base path
    and an inline base's relative paths resolve, default the current folder)."""
    base_dir = Path(base_dir) if base_dir is not None else Path.cwd()
    spec = SweepSpec(name=default_name, source=source, base=None, base_dir=str(base_dir), root=root)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"a sweep file is a mapping of {', '.join(FIELDS)}", source=source, line=1)
    for k in data:
        if k not in FIELDS:
            raise spec.error(f"unknown field {_allowed(k, FIELDS)}", k)
    name = data.get("name", default_name)
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise spec.error(f"{name!r} (allowed: letters, digits, '.', '_' and '-')", "name")
    spec.name = name
    spec.description = str(data.get("description", "") or "")
    base = data.get("base")
    if base is None:
        raise spec.error("missing (allowed: a scenario file relative to the sweep file, or a scenario mapping)",
                         "base")
    if isinstance(base, str):
        bp = Path(base)
        bp = bp if bp.is_absolute() else base_dir / bp
        if not bp.is_file():
            raise spec.error(f"{base}: scenario file not found (looked for {bp}; allowed: a path relative to the "
                             f"sweep file, or a scenario mapping)", "base")
        spec.base = str(bp)
    elif isinstance(base, dict):
        spec.base = copy.deepcopy(base)
    else:
        raise spec.error(f"{base!r} (allowed: a scenario file relative to the sweep file, or a scenario mapping)",
                         "base")
    spec.axes = _axes(spec, data.get("grid"), data.get("zip"))
    spec.seeds, spec.seed_count = _seeds(spec, data.get("seeds"))
    n = len(spec.seeds) if spec.seeds is not None else spec.seed_count
    for a in spec.axes:
        n *= len(a.values)
    if n > MAX_POINTS:
        raise spec.error(f"the sweep expands to {n:,} points (allowed: at most {MAX_POINTS:,})", "grid")
    return spec


def _path_of(spec: SweepSpec, key, *where) -> str:
    from ..compare import ALIASES
    if not isinstance(key, str) or not key or any(not p for p in key.split(".")):
        raise spec.error(f"{key!r}: empty key in the field path (allowed: a dotted scenario path such as "
                         f"routing.policy, or an alias: {', '.join(ALIASES)})", *where)
    path = ALIASES.get(key, key)
    if path == "simulation.seed":
        raise spec.error("vary the seed with the seeds field (allowed: any other scenario field)", *where)
    if key in ("seed", "status", "reason", "point_id"):
        raise spec.error(f"{key!r} names a result column (allowed: a dotted scenario path)", *where)
    return path


def _values(spec: SweepSpec, raw, *where) -> list:
    """A list of values, or a range mapping expanded."""
    if isinstance(raw, dict):
        for k in raw:
            if k not in RANGE_FIELDS:
                raise spec.error(f"unknown range field {k!r} {_allowed(k, RANGE_FIELDS)}", *where, k)
        for k in ("from", "to"):
            if k not in raw:
                raise spec.error(f"a range needs from, to and one of step or factor (missing {k})", *where)
        if ("step" in raw) == ("factor" in raw):
            raise spec.error("a range needs exactly one of step (arithmetic) or factor (geometric)", *where)
        nums = {k: raw[k] for k in raw}
        for k, v in nums.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise spec.error(f"{v!r} (allowed: a number)", *where, k)
        lo, hi = nums["from"], nums["to"]
        if hi < lo:
            raise spec.error(f"to {hi} is below from {lo} (allowed: to >= from)", *where, "to")
        out = []
        if "step" in nums:
            step = nums["step"]
            if step <= 0:
                raise spec.error(f"{step} (allowed: a positive step)", *where, "step")
            i = 0
            while True:
                v = lo + i * step
                if v > hi + abs(step) * 1e-9 or len(out) > MAX_POINTS:
                    break
                out.append(round(v, 12) if isinstance(v, float) else v)
                i += 1
        else:
            factor = nums["factor"]
            if factor <= 1 or lo <= 0:
                raise spec.error(f"factor {factor} from {lo} (allowed: factor > 1 and from > 0)", *where, "factor")
            v = lo
            while v <= hi * (1 + 1e-12) and len(out) <= MAX_POINTS:
                out.append(round(v, 12) if isinstance(v, float) else v)
                v = v * factor
        if len(out) > MAX_POINTS:
            raise spec.error(f"the range has more than {MAX_POINTS:,} values", *where)
        return out
    if not isinstance(raw, list) or not raw:
        raise spec.error(f"{raw!r} (allowed: a non-empty list of values, or a range "
                         f"{{from: A, to: B, step: S}} / {{from: A, to: B, factor: F}})", *where)
    texts = [value_text(v) for v in raw]
    dup = next((t for i, t in enumerate(texts) if t in texts[:i]), None)
    if dup is not None:
        raise spec.error(f"value {dup} is given twice (allowed: distinct values)", *where)
    return list(raw)


def _axes(spec: SweepSpec, grid, zipped) -> list[Axis]:
    axes: list[Axis] = []
    seen: dict[str, str] = {}

    def claim(path, where):
        if path in seen:
            raise spec.error(f"{path} is varied twice (also in {seen[path]})", *where)
        seen[path] = ".".join(str(w) for w in where)

    if grid is not None:
        if not isinstance(grid, dict):
            raise spec.error("allowed: a mapping of scenario paths to lists of values", "grid")
        for key, raw in grid.items():
            path = _path_of(spec, key, "grid", key)
            claim(path, ("grid", key))
            vals = _values(spec, raw, "grid", key)
            axes.append(Axis((key,), (path,), tuple((v,) for v in vals), "grid"))
    if zipped is not None:
        if isinstance(zipped, dict):
            zipped = [zipped]
        if not isinstance(zipped, list):
            raise spec.error("allowed: a list of groups, each a mapping of scenario paths to equal-length lists",
                             "zip")
        for g, group in enumerate(zipped):
            if not isinstance(group, dict) or not group:
                raise spec.error("allowed: a mapping of scenario paths to equal-length lists", "zip", g)
            keys, paths, cols = [], [], []
            for key, raw in group.items():
                path = _path_of(spec, key, "zip", g, key)
                claim(path, ("zip", g, key))
                if key in [k for a in axes for k in a.keys]:
                    raise spec.error(f"{key!r} is varied twice", "zip", g, key)
                keys.append(key)
                paths.append(path)
                cols.append(_values(spec, raw, "zip", g, key))
            n = len(cols[0])
            for key, col in zip(keys, cols):
                if len(col) != n:
                    raise spec.error(f"{len(col)} values where {keys[0]} has {n} (allowed: equal lengths in a "
                                     f"zip group)", "zip", g, key)
            axes.append(Axis(tuple(keys), tuple(paths), tuple(zip(*cols)), f"zip[{g}]"))
    return axes


def _seeds(spec: SweepSpec, seeds) -> tuple[list[int] | None, int]:
    if seeds is None:
        return None, 1
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        if seeds < 1:
            raise spec.error(f"{seeds} (allowed: a count of 1 or more, or a list of non-negative integers)", "seeds")
        return None, seeds
    if (not isinstance(seeds, list) or not seeds
            or any(not isinstance(s, int) or isinstance(s, bool) or s < 0 for s in seeds)):
        raise spec.error(f"{seeds!r} (allowed: a count of 1 or more, or a list of non-negative integers)", "seeds")
    if len(set(seeds)) != len(seeds):
        raise spec.error(f"{seeds!r}: a seed is given twice (allowed: distinct seeds)", "seeds")
    return list(seeds), len(seeds)

