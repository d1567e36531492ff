"""The topology presets shipped with fabricsim, found by name from any directory.

A preset is a topology YAML file installed with the package (``fabricsim/topology/presets/``;
the checkout's top-level ``topologies/`` is the same folder). A scenario refers to one by name::

    topology: {preset: gb300_2048_4x200g}

and ``fabricsim topo list`` prints them with their one-line descriptions.

>>> "gb300_8192_4x200g" in preset_names()
True
>>> preset_path("gb300_8192_4x200g").name
'gb300_8192_4x200g.yaml'
"""
from __future__ import annotations

import difflib
from importlib import resources
from pathlib import Path

__all__ = ["preset_names", "preset_path", "preset_description", "preset_summary", "unknown_preset_message"]

_SUFFIX = ".yaml"


def _folder() -> Path:
    # the package is installed as files (setuptools package data), so the folder is a real path
    return Path(str(resources.files("fabricsim.topology") / "presets"))


def preset_names() -> list[str]:
    """Every shipped preset, sorted."""
    return sorted(p.name[:-len(_SUFFIX)] for p in _folder().iterdir() if p.name.endswith(_SUFFIX))


def unknown_preset_message(name: object) -> str:
    """What to tell a user who asked for a preset that does not exist (allowed names, a close match)."""
    names = preset_names()
    close = difflib.get_close_matches(str(name), names, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown topology preset {name!r} (allowed: {', '.join(names)}){hint}"


def preset_path(name: str) -> Path:
    """The file of preset ``name``; ``KeyError`` with :func:`unknown_preset_message` if there is none."""
    if not isinstance(name, str) or name not in preset_names():
        raise KeyError(unknown_preset_message(name))
    return _folder() / f"{name}{_SUFFIX}"


def preset_description(name: str) -> str:
    """The preset's leading comment block joined into one line (what ``topo list`` prints)."""
    lines = []
    for line in preset_path(name).read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    return " ".join(x for x in lines if x)


def preset_summary(name: str) -> str:
    """The first sentence of :func:`preset_description` (one line of ``fabricsim topo list``).

    >>> preset_summary("leaf_spine_128x400g")
    '128 GPUs on a non-blocking two-tier leaf-spine: 8 leaves x 16 hosts, 16 spines, 400G links.'
    """
    import re
    text = preset_description(name)
    return re.split(r"(?<=[.;])\s+(?=[A-Z(])", text, maxsplit=1)[0]

