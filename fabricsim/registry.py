"""Name -> class registries for swappable models (routing, receivers, CC, engines, patterns).

A new policy is one file that decorates its class with ``@REGISTRY.register("name")``;
the datapath never tests names. Unknown names produce a did-you-mean error.

Third-party packages add models without touching fabricsim, through entry points: a registry
made with ``Registry(kind, group="fabricsim.routing")`` loads, on first use, every entry point
of that group, registering the loaded object under the entry point's name (unless loading the
module registered it already, through the decorator). The groups (docs/architecture.md,
"Plug-ins"): ``fabricsim.routing``, ``fabricsim.cc``, ``fabricsim.receivers``,
``fabricsim.plane_splits``, ``fabricsim.engines``, ``fabricsim.profiles`` and
``fabricsim.topologies`` (traffic patterns are not pluggable: each has its own config model). In a plug-in's pyproject.toml::

    [project.entry-points."fabricsim.routing"]
    first_port = "my_policies:FirstPort"

A plug-in that fails to import does not break fabricsim: its name is missing, and asking for it
says why.

>>> r = Registry("routing policy")
>>> @r.register("ecmp")
... class Ecmp: pass
>>> r.get("ecmp") is Ecmp
True
>>> r.names()
['ecmp']
"""
from __future__ import annotations

import difflib
from importlib import metadata
from typing import Callable, Generic, TypeVar

T = TypeVar("T")


class PluginWarning(UserWarning):
    """A plug-in's entry point was ignored (its name is taken)."""


class UnknownName(KeyError):
    """Raised by :meth:`Registry.get`; its message lists what is allowed."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class Registry(Generic[T]):
    """A named family of implementations."""

    def __init__(self, kind: str, group: str | None = None):
        self.kind = kind
        #: the entry-point group plug-ins of this family register under (None: no plug-ins)
        self.group = group
        self._items: dict[str, T] = {}
        self._discovered = group is None
        self._broken: dict[str, str] = {}      # plug-in name -> why it could not be loaded
        self._accepts: tuple = (None, "")      # what a plug-in must be (see accepts())

    def accepts(self, check, what: str) -> None:
        """Declare what a plug-in of this family must be: ``check`` a base class (a subclass or an
        instance of it passes) or a predicate; ``what`` names it in the message of one that is not."""
        self._accepts = (check, what)

    def _conforms(self, obj) -> bool:
        check, _ = self._accepts
        if check is None:
            return True
        if isinstance(check, type):
            return (isinstance(obj, type) and issubclass(obj, check)) or isinstance(obj, check)
        return bool(check(obj))

    def discover(self) -> None:
        """Load this family's plug-ins (entry points of :attr:`group`), once; later calls do nothing."""
        if self._discovered:
            return
        self._discovered = True
        import warnings
        for ep in metadata.entry_points(group=self.group):
            if ep.name in self._items:
                # a built-in (or an earlier plug-in) keeps its name; say so once
                warnings.warn(f"{self.kind} plug-in {ep.name!r} ({ep.value}) ignored: the name is taken",
                              PluginWarning, stacklevel=2)
                continue
            try:
                obj = ep.load()
            except Exception as exc:  # noqa: BLE001 - a broken plug-in must not break the others
                self._broken[ep.name] = f"{ep.value}: {type(exc).__name__}: {exc}"
                continue
            if ep.name in self._items:          # importing it registered it (the decorator)
                obj = self._items[ep.name]
            if not self._conforms(obj):
                self._items.pop(ep.name, None)
                self._broken[ep.name] = f"{ep.value}: {obj!r} is not {self._accepts[1]}"
                continue
            if ep.name not in self._items:
                self.register(ep.name)(obj)

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} registered twice")
            self._items[name] = obj
            try:
                obj.registry_name = name  # type: ignore[attr-defined]
            except (AttributeError, TypeError):  # pragma: no cover - builtins
                pass
            return obj
        return deco

    def get(self, name: str) -> T:
        self.discover()
        try:
            return self._items[name]
        except KeyError:
            raise UnknownName(self.unknown_message(name)) from None

    def unknown_message(self, name: str) -> str:
        self.discover()
        if isinstance(name, str) and name in self._broken:
            return f"{self.kind} {name!r} is a plug-in that failed to load ({self._broken[name]})"
        close = difflib.get_close_matches(str(name), self._items, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return f"unknown {self.kind} {name!r} (allowed: {', '.join(self.names())}){hint}"

    def names(self) -> list[str]:
        self.discover()
        return sorted(self._items)

    def __contains__(self, name: str) -> bool:
        self.discover()
        return name in self._items
