"""Name -> class registries for swappable models (routing, receivers, CC, engines, patterns).

A new policy is one file that decorates its class with ``@REGISTRY.register("name")``;
the datapath never tests names. Unknown names produce a did-you-mean error.

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
from typing import Callable, Generic, TypeVar

T = TypeVar("T")


class UnknownName(KeyError):
    """Raised by :meth:`Registry.get`; its message lists what is allowed."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class Registry(Generic[T]):
    """A named family of implementations."""

    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, T] = {}

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
        try:
            return self._items[name]
        except KeyError:
            raise UnknownName(self.unknown_message(name)) from None

    def unknown_message(self, name: str) -> str:
        close = difflib.get_close_matches(str(name), self._items, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return f"unknown {self.kind} {name!r} (allowed: {', '.join(self.names())}){hint}"

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: str) -> bool:
        return name in self._items
