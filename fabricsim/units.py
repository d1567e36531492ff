"""Human unit strings at the edge, integers inside.

Inside fabricsim every quantity is an integer in an SI base unit: rates in bit/s,
sizes in bytes, times in picoseconds. This module turns strings such as ``"800Gbps"``,
``"4KiB"`` or ``"1.5us"`` into those integers and formats them back.

>>> parse_rate("800Gbps")
800000000000
>>> parse_size("4KiB")
4096
>>> parse_time("1.5us")
1500000
>>> format_time(1500000)
'1.5us'
"""
from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation, localcontext

#: the largest integer any size, time or rate holds inside fabricsim (int64 columns and counters)
INT64_MAX = 2**63 - 1

_NUM = r"([0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)"
_RE = re.compile(r"^\s*" + _NUM + r"\s*([A-Za-z/\u00b5\u03bc]*)\s*$")

RATE_UNITS = {
    "bps": 1, "b/s": 1,
    "kbps": 10**3, "kb/s": 10**3,
    "mbps": 10**6, "mb/s": 10**6,
    "gbps": 10**9, "gb/s": 10**9, "g": 10**9,
    "tbps": 10**12, "tb/s": 10**12,
}
SIZE_UNITS = {
    "b": 1, "": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
TIME_UNITS = {
    "ps": 1, "ns": 10**3, "us": 10**6, "\u00b5s": 10**6, "\u03bcs": 10**6, "ms": 10**9, "s": 10**12,
}

PS_PER_S = 10**12

#: how each kind's units are spelled in error messages
_DISPLAY = {
    "rate": "bps, kbps, Mbps, Gbps, Tbps (or b/s, kb/s, ...)",
    "size": "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB",
    "time": "ps, ns, us, ms, s",
}
#: the base unit of each kind, as error messages and the JSON Schema (``x-unit``) name it
BASE_UNIT = {"rate": "bit/s", "size": "bytes", "time": "ps"}
#: largest accepted magnitude in base units (guards against '1e999999999B')
MAX_VALUE = 10**40


def _parse(value, units: dict[str, int], kind: str, allow_bare: bool, example: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"expected a {kind} such as {example!r}, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"expected a {kind} such as {example!r}, got {value!r}")
    if isinstance(value, (int, float)) and value < 0:
        raise ValueError(f"{value!r}: a {kind} must not be negative")
    if isinstance(value, int):
        if not allow_bare:
            raise ValueError(f"a {kind} needs a unit, such as {example!r}; got bare number {value}")
        return value
    if isinstance(value, float):
        if not allow_bare:
            raise ValueError(f"a {kind} needs a unit, such as {example!r}; got bare number {value}")
        if value != int(value):
            raise ValueError(f"a bare {kind} must be a whole number, got {value}")
        return int(value)
    if not isinstance(value, str):
        raise ValueError(f"expected a {kind} such as {example!r}, got {value!r}")
    if value.strip().startswith("-"):
        raise ValueError(f"{value!r}: a {kind} must not be negative")
    m = _RE.match(value)
    if not m:
        raise ValueError(f"cannot read {value!r} as a {kind}; write e.g. {example!r}")
    number, unit = m.group(1), m.group(2)
    key = unit.lower() if unit != "B" else "b"
    if kind == "size":
        # sizes are case-sensitive about b (bit) vs B (byte): only bytes are accepted
        if unit and unit[-1] == "b" and unit.lower() not in ("kib", "mib", "gib", "tib"):
            raise ValueError(f"{value!r}: sizes are in bytes (B, KB, KiB, MiB...), not bits")
        key = unit.lower()
    if not unit and allow_bare:
        key, units = "", {"": 1}  # a bare number is in base units
    if key not in units:
        if not unit and not allow_bare:
            raise ValueError(f"a {kind} needs a unit, such as {example!r}; got {value!r}")
        raise ValueError(f"unknown {kind} unit {unit!r} in {value!r} (allowed: {_DISPLAY[kind]})")
    try:
        dec = Decimal(number)
        if dec and dec.adjusted() > 60:
            raise ValueError(f"{value!r} is too large for a {kind}")
        with localcontext() as ctx:  # exact: no rounding to the default 28 digits
            ctx.prec = len(number) + 80
            exact = dec * units[key]
    except InvalidOperation as exc:  # pragma: no cover - regex prevents it
        raise ValueError(f"cannot read {value!r} as a {kind}") from exc
    if exact > MAX_VALUE:
        raise ValueError(f"{value!r} is too large for a {kind} (allowed: up to {MAX_VALUE:.0e} base units)")
    if exact != exact.to_integral_value():
        raise ValueError(f"{value!r} is not a whole number of {'bytes' if kind == 'size' else 'base units'}"
                         f" ({exact})")
    return int(exact)


def _spelling(unit: str, kind: str) -> str:
    """A regular expression (no flags: JSON Schema patterns have none) matching ``unit`` as
    :func:`_parse` accepts it: any letter case, except that a size's final ``b`` is ``B`` (bytes)
    unless the unit is binary (``KiB`` or ``Kib``)."""
    out = ""
    for i, ch in enumerate(unit):
        last_b = kind == "size" and i == len(unit) - 1 and ch == "b" and not unit.endswith("ib")
        if last_b:
            out += "B"
        elif ch.isalpha() and ch.lower() != ch.upper():
            out += f"[{ch.lower()}{ch.upper()}]"
        else:
            out += re.escape(ch)
    return out


def unit_pattern(kind: str) -> str:
    """The regular expression of a unit string of ``kind`` ("rate", "size" or "time") that the
    parsers accept (their syntax; the value's range is checked by the parser).

    >>> import re
    >>> bool(re.match(unit_pattern("rate"), "800Gbps")), bool(re.match(unit_pattern("size"), "4Kb"))
    (True, False)
    >>> bool(re.match(unit_pattern("time"), "1.5us")), bool(re.match(unit_pattern("time"), "15"))
    (True, False)
    """
    table = {"rate": RATE_UNITS, "size": SIZE_UNITS, "time": TIME_UNITS}[kind]
    spelled = sorted({_spelling(u, kind) for u in table if u}, key=len, reverse=True)
    unit = "(?:" + "|".join(spelled) + ")"
    if kind == "time":   # a unit is required, except for a bare zero
        body = f"(?:{_NUM}\\s*{unit}|0+(?:\\.0*)?)"
    else:                # a bare number is in base units
        body = f"{_NUM}\\s*{unit}?"
    return f"^\\s*{body}\\s*$"


def parse_rate(value) -> int:
    """Rate string -> bit/s (``"400Gbps"`` -> 400_000_000_000). Bare numbers are bit/s."""
    return _parse(value, RATE_UNITS, "rate", True, "400Gbps")


def parse_size(value) -> int:
    """Size string -> bytes (``"4KiB"`` -> 4096, ``"1MB"`` -> 1_000_000). Bare numbers are bytes."""
    return _parse(value, SIZE_UNITS, "size", True, "4KiB")


def parse_time(value) -> int:
    """Time string -> picoseconds (``"600ns"`` -> 600_000). A unit is required (bare 0 allowed)."""
    if value == 0 and not isinstance(value, bool):
        return 0
    if isinstance(value, str):
        m = _RE.match(value)
        if m and not m.group(2) and Decimal(m.group(1)) == 0:  # "0" needs no unit either
            return 0
    return _parse(value, TIME_UNITS, "time", False, "600ns")


def serialisation_ps(size_bytes: int, rate_bps: int) -> int:
    """Time to put ``size_bytes`` on a link of ``rate_bps``, rounded up to a whole picosecond."""
    return -((-size_bytes * 8 * PS_PER_S) // rate_bps)


def _fmt(value: float, units: list[tuple[str, int]]) -> str:
    for name, scale in units:
        if abs(value) >= scale:
            q = value / scale
            return f"{q:.4g}{name}"
    return f"{value:g}{units[-1][0]}"


def format_time(ps: float) -> str:
    """Picoseconds -> short human string (``1500000`` -> ``'1.5us'``)."""
    if ps == 0:
        return "0s"
    return _fmt(ps, [("s", 10**12), ("ms", 10**9), ("us", 10**6), ("ns", 10**3), ("ps", 1)])


def format_rate(bps: float) -> str:
    """bit/s -> short human string (``4e11`` -> ``'400Gbps'``)."""
    if bps == 0:
        return "0bps"
    return _fmt(bps, [("Tbps", 10**12), ("Gbps", 10**9), ("Mbps", 10**6), ("kbps", 10**3), ("bps", 1)])


def format_size(nbytes: float) -> str:
    """bytes -> short human string in binary units (``4096`` -> ``'4KiB'``)."""
    if nbytes == 0:
        return "0B"
    return _fmt(nbytes, [("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10), ("B", 1)])


def _exact(value: int, units: list[tuple[str, int]]) -> str:
    for name, scale in units:
        if value % scale == 0 and value >= scale:
            return f"{value // scale}{name}"
    return f"{value}{units[-1][0]}"


def exact_time(ps: int) -> str:
    """Picoseconds -> the largest unit that represents it exactly (``600000`` -> ``'600ns'``)."""
    return "0s" if ps == 0 else _exact(ps, [("s", 10**12), ("ms", 10**9), ("us", 10**6), ("ns", 10**3), ("ps", 1)])


def exact_rate(bps: int) -> str:
    """bit/s -> exact human string (``400_000_000_000`` -> ``'400Gbps'``)."""
    return "0bps" if bps == 0 else _exact(bps, [("Tbps", 10**12), ("Gbps", 10**9), ("Mbps", 10**6), ("kbps", 10**3), ("bps", 1)])


def exact_size(nbytes: int) -> str:
    """bytes -> exact human string (``4096`` -> ``'4KiB'``, ``82`` -> ``'82B'``)."""
    return "0B" if nbytes == 0 else _exact(nbytes, [("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10), ("B", 1)])
