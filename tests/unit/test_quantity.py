from fractions import Fraction

import pytest

from ksched.engine.quantity import canonical, parse_quantity
from ksched.errors import QuantityError

CASES = [
    ("millicores", "250m", "cpu", 250),
    ("whole cpu", "2", "cpu", 2000),
    ("decimal cpu", "1.5", "cpu", 1500),
    ("sub-millicore rounds up", "0.0001", "cpu", 1),
    ("binary memory", "1Gi", "memory", 2**30),
    ("decimal memory", "1G", "memory", 10**9),
    ("kilo", "3k", "memory", 3000),
    ("exponent", "1e3", "memory", 1000),
    ("negative exponent", "12e-1", "memory", 2),
    ("decimal with suffix", "1.5Mi", "memory", 1572864),
    ("peta", "1Pi", "memory", 2**50),
    ("exa", "2E", "memory", 2 * 10**18),
    ("nano", "1n", "cpu", 1),
    ("plain int", 3, "nvidia.com/gpu", 3),
]


@pytest.mark.parametrize(("name", "text", "resource", "want"), CASES, ids=[c[0] for c in CASES])
def test_parse(name: str, text: str, resource: str, want: int) -> None:
    assert canonical(resource, parse_quantity(text)) == want


@pytest.mark.parametrize("bad", ["", "abc", "1.2.3", "5Gb", "--1", "1 Gi", "Gi", "1e"])
def test_malformed(bad: str) -> None:
    with pytest.raises(QuantityError, match="not a valid quantity"):
        parse_quantity(bad)


def test_exact_arithmetic() -> None:
    assert parse_quantity("0.1") + parse_quantity("0.2") == Fraction(3, 10)
