"""Readers of one configuration value: each checks the value's type and range and
raises :class:`~ksched.errors.ConfigError` naming the key path and what is allowed.

Every section of :mod:`ksched.config` reads its values through these, so a bad
value is reported in one wording wherever it sits.
"""

from __future__ import annotations

import math
import re
from typing import Any

from ksched.errors import ConfigError

# The largest weight a score plugin, a preferred term or a metric may have (upstream's MaxWeight).
MAX_WEIGHT = 100
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def check_keys(
    obj: Any, path: str, allowed: tuple[str, ...], required: tuple[str, ...] = ()
) -> dict[str, Any]:
    """``obj`` as a mapping whose keys are all ``allowed`` and include every ``required``."""
    if not isinstance(obj, dict):
        raise ConfigError(f"{path or 'configuration'}: must be a mapping")
    for k in obj:
        if k not in allowed:
            raise ConfigError(f"{path + '.' if path else ''}{k}: unknown key (allowed: {', '.join(allowed)})")
    for k in required:
        if k not in obj:
            raise ConfigError(f"{path + '.' if path else ''}{k}: required")
    return obj


def as_list(obj: Any, path: str) -> list[Any]:
    if not isinstance(obj, list):
        raise ConfigError(f"{path}: must be a list")
    return obj


def as_int(obj: Any, path: str, lo: int, hi: int) -> int:
    if not isinstance(obj, int) or isinstance(obj, bool) or not lo <= obj <= hi:
        raise ConfigError(f"{path}: {obj!r} is not an integer in {lo}..{hi}")
    return obj


def as_float(obj: Any, path: str) -> float:
    if not isinstance(obj, int | float) or isinstance(obj, bool) or not math.isfinite(obj):
        raise ConfigError(f"{path}: {obj!r} is not a number")
    return float(obj)


def as_bool(obj: Any, path: str) -> bool:
    if not isinstance(obj, bool):
        raise ConfigError(f"{path}: {obj!r} is not a boolean (allowed: true, false)")
    return obj


def as_str(obj: Any, path: str, allowed: tuple[str, ...] | None = None) -> str:
    if not isinstance(obj, str) or not obj:
        raise ConfigError(f"{path}: must be a non-empty string")
    if allowed is not None and obj not in allowed:
        raise ConfigError(f"{path}: {obj!r} is not allowed (allowed: {', '.join(allowed)})")
    return obj


def parse_duration(obj: Any, path: str) -> float:
    """A duration as ``250ms``, ``30s``, ``5m``, ``1h`` or a number of seconds."""
    if isinstance(obj, int | float) and not isinstance(obj, bool) and obj >= 0:
        return float(obj)
    m = _DURATION.match(obj) if isinstance(obj, str) else None
    if m is None:
        raise ConfigError(f"{path}: {obj!r} is not a duration (examples: 250ms, 30s, 5m)")
    return float(m.group(1)) * _DURATION_UNITS[m.group(2)]
