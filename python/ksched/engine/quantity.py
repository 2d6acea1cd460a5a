"""Exact parsing of Kubernetes resource quantities.

Owns the grammar of ``resource.Quantity`` (decimal SI suffixes, binary
suffixes, exponents, signs) and the two conversions the scheduler uses:
``MilliValue`` for CPU and ``Value`` for everything else, both rounding up
as upstream does. Arithmetic is exact (``Fraction``), never floating point.

Every count the node table stores saturates at :data:`QUANTITY_MAX`
(:func:`saturated`, :func:`saturating_add`): a kubelet or device plugin may
report any valid quantity (``10Ei`` of memory, ``1e19`` of a device), and one
such node must neither overflow an int64 nor stop the others from scheduling.
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

from ksched.errors import QuantityError

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?P<number>\d+(?:\.\d*)?|\.\d+)"
    r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)|[eE](?P<exp>[+-]?\d+)|(?P<decimal>[numkMGTPE]?))$"
)
# Upstream caps exponents; anything beyond is not a real quantity.
_MAX_EXPONENT = 1000
# The largest count the node table holds for one quantity (a node's allocatable, one pod's
# request, an image's size): a quarter of int64's range, 2^61 - 1 (2 EiB of memory, 2.3e15
# cores); larger values are clamped to it. Any four clamped counts add up inside int64, so
# arithmetic on the counts themselves (allocatable minus a request, two requests added)
# cannot wrap; a node's requested sum, which may hold any number of pods, saturates at
# REQUESTED_MAX instead, here and in the engine. Upstream's ``Quantity.Value`` wraps or
# returns 0 past int64 (``scaledValue``, ``positiveScaleInt64``); ksched clamps instead.
QUANTITY_MAX = (2**63 - 1) // 4
# Where a node's requested sum saturates (int64's largest): above every clamped allocatable, so
# a saturated sum leaves no room on any node. A saturated sum stays saturated when a pod leaves
# (it no longer knows what it holds) until the node table is rebuilt from the pods counted.
REQUESTED_MAX = 2**63 - 1


def _check_type(text: object) -> None:
    """A quantity is a string or a number; anything else (a mapping, a list, a boolean)
    is refused here, before a cache that would fail on an unhashable value."""
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        shown = repr(text) if isinstance(text, bool) else type(text).__name__
        raise QuantityError(f"quantity must be a string or number, got {shown}")


def parse_quantity(text: str | int | float) -> Fraction:
    """Parse a quantity into an exact number of base units.

    >>> parse_quantity("1.5Gi")
    Fraction(1610612736, 1)
    >>> parse_quantity("250m")
    Fraction(1, 4)
    """
    _check_type(text)
    return _parse_quantity(text)


@functools.lru_cache(maxsize=4096)
def _parse_quantity(text: str | int | float) -> Fraction:
    if isinstance(text, int):
        return Fraction(text)
    if isinstance(text, float):
        if not math.isfinite(text):
            raise QuantityError(f"quantity {text!r} is not a finite number")
        return Fraction(str(text))
    match = _QUANTITY.match(text.strip())
    if match is None or text.strip() == "":
        raise QuantityError(f"{text!r} is not a valid quantity (examples: 100m, 1.5, 2Gi, 1e3, 500M)")
    value = Fraction(match.group("number"))
    if match.group("binary"):
        value *= _BINARY[match.group("binary")]
    elif match.group("exp") is not None:
        exponent = int(match.group("exp"))
        if abs(exponent) > _MAX_EXPONENT:
            raise QuantityError(f"{text!r}: exponent out of range")
        value *= Fraction(10) ** exponent
    else:
        value *= _DECIMAL[match.group("decimal") or ""]
    if match.group("sign") == "-":
        value = -value
    return value


def milli_value(q: Fraction) -> int:
    """Upstream ``Quantity.MilliValue``: thousandths, rounded up."""
    return math.ceil(q * 1000)


def value(q: Fraction) -> int:
    """Upstream ``Quantity.Value``: whole units, rounded up."""
    return math.ceil(q)


def canonical(resource: str, q: Fraction) -> int:
    """A quantity in the engine's canonical unit (millicores for CPU, whole units otherwise),
    clamped to +-QUANTITY_MAX.

    >>> canonical("memory", parse_quantity("10Ei")) == QUANTITY_MAX
    True
    """
    return saturated(milli_value(q) if resource == "cpu" else value(q))


def saturated(v: int) -> int:
    """``v`` clamped to +-QUANTITY_MAX: what the node table stores for a count."""
    return QUANTITY_MAX if v > QUANTITY_MAX else -QUANTITY_MAX if v < -QUANTITY_MAX else v


def saturating_add(total: int, v: int) -> int:
    """A node's requested sum with ``v`` (a pod's clamped request, negative when it leaves)
    counted: saturating at REQUESTED_MAX, and a saturated sum stays there."""
    if total >= REQUESTED_MAX:
        return REQUESTED_MAX
    return min(total + saturated(v), REQUESTED_MAX)


# Pod requests are summed in nano-units: every quantity with at most nine
# decimals (all real ones) is then a plain int, and int arithmetic is about
# ten times faster than Fraction's; a finer one stays an exact Fraction.
NANO = 10**9
Nano = int | Fraction


def parse_nano(text: str | int | float) -> Nano:
    """A quantity in exact nano-units: an ``int`` whenever that is exact."""
    _check_type(text)
    return _parse_nano(text)


@functools.lru_cache(maxsize=4096)
def _parse_nano(text: str | int | float) -> Nano:
    q = _parse_quantity(text) * NANO
    return q.numerator if q.denominator == 1 else q


def canonical_nano(resource: str, q: Nano) -> int:
    """:func:`canonical` of a quantity given in nano-units."""
    unit = NANO // 1000 if resource == "cpu" else NANO
    if isinstance(q, int):
        return -(-q // unit)
    return math.ceil(q / unit)
