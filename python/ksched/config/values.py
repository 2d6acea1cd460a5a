"""Readers of one configuration value: each checks the value's type and range and
raises :class:`~ksched.errors.ConfigError` naming the key path and what is allowed.

Every section of :mod:`ksched.config` reads its values through these, so a bad
value is reported in one wording wherever it sits.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from ksched.errors import ConfigError

# The largest weight a score plugin, a preferred term or a metric may have (upstream's MaxWeight).
MAX_WEIGHT = 100
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
# The longest duration any key takes: every duration is waited on (a timer, a socket
# timeout) or added to a clock, and a year is beyond any sensible setting while far under
# what those accept (threading.TIMEOUT_MAX, a datetime).
MAX_DURATION_S = 365 * 24 * 3600.0
# The ports a listener may take (0 would pick a random one no client could be told of).
_PORTS = (1, 65535)


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


def finite_number(obj: Any) -> float | None:
    """``obj`` as a finite float, or None (not a number, infinite, NaN, or an integer
    beyond any float)."""
    if not isinstance(obj, int | float) or isinstance(obj, bool):
        return None
    try:
        value = float(obj)
    except OverflowError:
        return None
    return value if math.isfinite(value) else None


def as_float(obj: Any, path: str) -> float:
    value = finite_number(obj)
    if value is None:
        raise ConfigError(f"{path}: {_shown(obj)} is not a finite number")
    return value


def _shown(obj: Any) -> str:
    """A value as an error message quotes it: short, whatever the file held."""
    text = repr(obj)
    return text if len(text) <= 40 else text[:37] + "..."


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


def duration_at(
    obj: Mapping[str, Any], key: str, default: Any, path: str, at_least: float = 0.0, positive: bool = False
) -> float:
    """``obj[key]`` (else ``default``) read by :func:`parse_duration`, reported at ``path.key``."""
    return parse_duration(obj.get(key, default), f"{path}.{key}", at_least, positive)


def parse_duration(obj: Any, path: str, at_least: float = 0.0, positive: bool = False) -> float:
    """A duration as ``250ms``, ``30s``, ``5m``, ``1h`` or a number of seconds: finite, at
    most :data:`MAX_DURATION_S`, at least ``at_least``, and above 0 where ``positive``."""
    seconds = finite_number(obj)
    m = _DURATION.match(obj) if isinstance(obj, str) else None
    if m is not None:
        seconds = float(m.group(1)) * _DURATION_UNITS[m.group(2)]
    if seconds is None or seconds < 0 or not math.isfinite(seconds):
        raise ConfigError(f"{path}: {_shown(obj)} is not a duration (examples: 250ms, 30s, 5m)")
    if seconds > MAX_DURATION_S:
        raise ConfigError(f"{path}: {_shown(obj)} is longer than the limit of 8760h (a year)")
    if positive and seconds == 0:
        raise ConfigError(f"{path}: must be longer than 0")
    if seconds < at_least:
        raise ConfigError(f"{path}: {_shown(obj)} is under the minimum of {at_least:g}s")
    return seconds


def as_host_port(obj: Any, path: str) -> str:
    """A listen address ``HOST:PORT`` (``:PORT``: every interface; an IPv6 host in brackets)."""
    address = as_str(obj, path)
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not _PORTS[0] <= int(port) <= _PORTS[1] or " " in host:
        raise ConfigError(
            f"{path}: {_shown(address)} is not HOST:PORT with a port in {_PORTS[0]}..{_PORTS[1]} "
            "(example: 0.0.0.0:9443)"
        )
    return address


def as_url(obj: Any, path: str) -> str:
    """An ``http`` or ``https`` URL with a host (``http://prometheus.monitoring:9090``)."""
    url = as_str(obj, path)
    try:
        parts = urlsplit(url)
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        parts, port_ok = None, False
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise ConfigError(
            f"{path}: {_shown(url)} is not an http(s) URL with a host "
            "(example: http://prometheus.monitoring:9090)"
        )
    return url
