"""Unit strings <-> integers in base units (bit/s, bytes, picoseconds)."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from fabricsim import units
from fabricsim.units import (exact_rate, exact_size, exact_time, format_rate, format_size, format_time,
                             parse_rate, parse_size, parse_time, serialisation_ps)

# values up to 10**30 base units: far beyond any real fabric, well inside units.MAX_VALUE
BIG = st.integers(min_value=0, max_value=10**30)


@pytest.mark.parametrize("text, expected", [
    ("400Gbps", 400 * 10**9), ("400 Gbps", 400 * 10**9), ("400gbps", 400 * 10**9), ("400Gb/s", 400 * 10**9),
    ("1.6Tbps", 1_600 * 10**9), ("100Mbps", 10**8), ("25kbps", 25_000), ("7bps", 7), ("1e3Gbps", 10**12),
    (800, 800), ("12", 12),
])
def test_parse_rate(text, expected):
    assert parse_rate(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("4KiB", 4096), ("4 KiB", 4096), ("1MiB", 2**20), ("2GiB", 2 * 2**30), ("1TiB", 2**40),
    ("4KB", 4000), ("4kB", 4000), ("1MB", 10**6), ("1GB", 10**9), ("82B", 82), ("1.5KiB", 1536),
    (4096, 4096), (4096.0, 4096), ("4096", 4096), ("0B", 0),
])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("600ns", 600_000), ("1.5us", 1_500_000), ("1.5µs", 1_500_000), ("10ms", 10**10), ("1s", 10**12),
    ("250ps", 250), ("0.5ns", 500), ("2e3ns", 2 * 10**6), (0, 0), ("0", 0), ("0s", 0),
])
def test_parse_time(text, expected):
    assert parse_time(text) == expected


# --- bits versus bytes -------------------------------------------------------------------


@pytest.mark.parametrize("text", ["4Kb", "1Mb", "8b", "1Gb"])
def test_sizes_in_bits_are_rejected(text):
    with pytest.raises(ValueError, match="not bits"):
        parse_size(text)


@pytest.mark.parametrize("text", ["400GB", "400GiB", "50MB"])
def test_rates_in_bytes_are_rejected(text):
    with pytest.raises(ValueError, match="unknown rate unit"):
        parse_rate(text)


def test_bits_and_bytes_differ_by_eight():
    # 1 KiB on a 8192 bit/s link takes exactly one second
    assert serialisation_ps(parse_size("1KiB"), parse_rate("8192bps")) == 10**12
    # a 4 KiB packet on 400G: 4096 * 8 / 400e9 s = 81.92 ns
    assert serialisation_ps(4096, 400 * 10**9) == 81_920


def test_serialisation_rounds_up():
    assert serialisation_ps(1, 3 * 10**12) == 3  # 8/3 ps -> 3 ps
    assert serialisation_ps(3, 8 * 10**12) == 3  # exact


# --- rejected input ----------------------------------------------------------------------


@pytest.mark.parametrize("parse, value", [
    (parse_size, "-4KiB"), (parse_size, -1), (parse_size, " -1B"), (parse_rate, "-400Gbps"), (parse_rate, -5),
    (parse_time, "-1us"), (parse_time, -3.0),
])
def test_negative_values_are_rejected(parse, value):
    with pytest.raises(ValueError, match="negative"):
        parse(value)


@pytest.mark.parametrize("parse, value, message", [
    (parse_time, 600, "needs a unit"), (parse_time, "600", "needs a unit"), (parse_time, 1.5, "needs a unit"),
    (parse_size, "4 parsecs", "unknown size unit 'parsecs'"), (parse_time, "3 fortnights", "unknown time unit"),
    (parse_size, "1.5B", "not a whole number"), (parse_time, "0.1ps", "not a whole number"),
    (parse_rate, "0.5bps", "not a whole number"), (parse_size, 4.5, "whole number"),
    (parse_size, "KiB", "cannot read"), (parse_size, "4 KiB B", "cannot read"), (parse_size, "", "cannot read"),
    (parse_size, True, "expected a size"), (parse_size, None, "expected a size"), (parse_size, [4], "expected a size"),
    (parse_size, float("inf"), "expected a size"), (parse_size, float("nan"), "expected a size"),
    (parse_size, "1e999999999B", "too large"),
])
def test_malformed_values_are_rejected(parse, value, message):
    with pytest.raises(ValueError, match=message):
        parse(value)


def test_unknown_unit_message_lists_units_as_written():
    with pytest.raises(ValueError) as ei:
        parse_size("4 parsecs")
    assert "(allowed: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)" in str(ei.value)
    with pytest.raises(ValueError) as ei:
        parse_time("4h")
    assert "(allowed: ps, ns, us, ms, s)" in str(ei.value)


def test_no_rounding_of_long_numbers():
    # Decimal's default 28-digit context would silently round this
    assert parse_time("1000000000000000000000000000001ps") == 10**30 + 1
    assert parse_size("1234567890123456789012345678.5KiB") == 1234567890123456789012345678 * 1024 + 512


# --- formatting --------------------------------------------------------------------------


@pytest.mark.parametrize("fmt, value, expected", [
    (exact_time, 600_000, "600ns"), (exact_time, 1_500_000, "1500ns"), (exact_time, 10**12, "1s"),
    (exact_time, 0, "0s"), (exact_time, 1, "1ps"), (exact_size, 4096, "4KiB"), (exact_size, 4000, "4000B"),
    (exact_size, 82, "82B"), (exact_size, 3 * 2**20, "3MiB"), (exact_size, 0, "0B"),
    (exact_rate, 400 * 10**9, "400Gbps"), (exact_rate, 1_600 * 10**9, "1600Gbps"), (exact_rate, 0, "0bps"),
    (format_time, 1_500_000, "1.5us"), (format_time, 0, "0s"), (format_time, 250, "250ps"),
    (format_rate, 4e11, "400Gbps"), (format_rate, 6.4e12, "6.4Tbps"), (format_size, 4096, "4KiB"),
    (format_size, 1536, "1.5KiB"), (format_size, 0, "0B"),
])
def test_formatting(fmt, value, expected):
    assert fmt(value) == expected


@given(BIG)
def test_exact_time_round_trips(ps):
    assert parse_time(exact_time(ps)) == ps


@given(BIG)
def test_exact_size_round_trips(nbytes):
    assert parse_size(exact_size(nbytes)) == nbytes


@given(BIG)
def test_exact_rate_round_trips(bps):
    assert parse_rate(exact_rate(bps)) == bps


@given(st.integers(min_value=1, max_value=10**15))
def test_exact_uses_the_largest_exact_unit(n):
    s = exact_size(n)
    number = int(s.rstrip("BKMGTi"))
    unit = s[len(str(number)):]
    scale = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}[unit]
    assert number * scale == n
    bigger = [v for v in (2**10, 2**20, 2**30, 2**40) if v > scale]
    assert all(n % v != 0 for v in bigger)


@given(st.integers(min_value=1, max_value=10**16))
def test_format_time_is_close(ps):
    # short form keeps 4 significant digits
    parsed = parse_time_loose(format_time(ps))
    assert abs(parsed - ps) <= ps * 5e-4


def parse_time_loose(text: str) -> float:
    """format_time output may round to a fraction of a picosecond; read it as a float."""
    for name, scale in (("ps", 1), ("ns", 10**3), ("us", 10**6), ("ms", 10**9), ("s", 10**12)):
        if text.endswith(name) and text[: -len(name)].replace(".", "").replace("e+", "").isdigit():
            return float(text[: -len(name)]) * scale
    raise AssertionError(text)


def test_module_doctest_examples():
    assert units.parse_rate("800Gbps") == 800_000_000_000
    assert units.format_time(1500000) == "1.5us"
