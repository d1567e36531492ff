"""Sections that name a model from a registry plus that model's own parameters.

``routing: {policy: flowlet, gap: 5us}`` -> the flowlet policy's ``Params`` model validates
``gap``. Unknown policy names and unknown parameters are rejected with the field named.
"""
from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, model_serializer, model_validator


class PolicySection(BaseModel):
    """Base: one ``name_field`` choosing from ``registry()``; all other keys are that model's params."""

    model_config = ConfigDict(extra="allow")
    name_field: ClassVar[str] = "policy"
    default_name: ClassVar[str] = ""

    name: str = ""
    params: Any = None

    #: "module:NAME" of the registry the name is looked up in (imported lazily: no cycles)
    registry_ref: ClassVar[str] = ""

    @classmethod
    def registry(cls):
        import importlib
        module, name = cls.registry_ref.split(":")
        return getattr(importlib.import_module(module), name)

    @model_validator(mode="before")
    @classmethod
    def _split(cls, data):
        if data is None:
            data = {}
        if isinstance(data, str):
            data = {cls.name_field: data}
        if not isinstance(data, dict):
            raise ValueError(f"expected a mapping with '{cls.name_field}', got {data!r}")
        data = dict(data)
        if "name" in data or "params" in data:
            if set(data) <= {"name", "params"}:  # already split (round trip)
                data = {cls.name_field: data.get("name"), **(data.get("params") or {})}
        name = data.pop(cls.name_field, cls.default_name)
        reg = cls.registry()
        if not isinstance(name, str) or name not in reg:
            raise ValueError(f"{cls.name_field}: " + reg.unknown_message(name))
        impl = reg.get(name)
        params_model = getattr(impl, "Params", None)
        if params_model is None:
            if data:
                raise ValueError(cls._no_params_message(str(next(iter(data))), name, reg))
            params = None
        else:
            params = params_model.model_validate(data)
        return {"name": name, "params": params}

    @classmethod
    def _no_params_message(cls, key: str, name: str, reg) -> str:
        """``key: unknown field ...`` for a parameter given to a model that takes none: a likely
        misspelling of the name field, and which registered models do take ``key``."""
        import difflib
        hint = ""
        if difflib.get_close_matches(key, [cls.name_field], n=1):
            hint = f"; did you mean {cls.name_field!r}?"
        takers = [n for n in reg.names()
                  if key in (getattr(getattr(reg.get(n), "Params", None), "model_fields", None) or {})]
        taken = f"; {key} is a parameter of {', '.join(takers)}" if takers else ""
        return (f"{key}: unknown field (allowed: {cls.name_field}; {cls.name_field} {name!r} takes no "
                f"parameters{taken}){hint}")

    @model_serializer(mode="plain")
    def _ser(self):
        out = {self.name_field: self.name}
        if self.params is not None:
            out.update(self.params.model_dump(mode="json"))
        return out


class RoutingSection(PolicySection):
    """``routing``: the switch forwarding policy among equal-cost egress ports."""

    name_field: ClassVar[str] = "policy"
    default_name: ClassVar[str] = "ecmp"
    registry_ref: ClassVar[str] = "fabricsim.routing:ROUTING"


class ReceiverSection(PolicySection):
    """``receiver``: the destination NIC's receive path."""

    name_field: ClassVar[str] = "model"
    default_name: ClassVar[str] = "ddp"
    registry_ref: ClassVar[str] = "fabricsim.receiver:RECEIVERS"


class CongestionControlSection(PolicySection):
    """``congestion_control``: the sender's rate/window control algorithm."""

    name_field: ClassVar[str] = "algorithm"
    default_name: ClassVar[str] = "none"
    registry_ref: ClassVar[str] = "fabricsim.cc:CC"


class NicSection(PolicySection):
    """``nic``: how a message is split over a host's ports (planes, NVLink links)."""

    name_field: ClassVar[str] = "plane_split"
    default_name: ClassVar[str] = "per_packet"
    registry_ref: ClassVar[str] = "fabricsim.planes:SPLITS"
