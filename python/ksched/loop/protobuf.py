"""Kubernetes' protobuf encoding of the two objects ksched writes for every pod it places:
the ``Binding`` and the ``Scheduled`` Event.

kube-scheduler (and client-go's typed clients, by default) send these as protobuf.
Sent as JSON, the API server spent 0.23-0.35 s decoding them over a 5,000-pod drain
(kube-apiserver CPU profiles, 5,000 KWOK nodes), CPU that on a small control plane is
taken from binding. The messages are written by hand from ``k8s.io/api``'s
``generated.proto`` (field numbers below), wrapped in the ``runtime.Unknown`` envelope
the API server expects after the ``k8s\\0`` magic.

Answers are asked for as protobuf too, as kube-scheduler asks (encoding them cost the
API server about what JSON did); ksched reads only their status code, and
:func:`readable` turns an error's ``Status`` into its message for the log.
"""

from __future__ import annotations

from typing import NamedTuple

PROTOBUF = "application/vnd.kubernetes.protobuf"
# What ksched accepts back: protobuf, or JSON from a server (or proxy) that has no protobuf.
ACCEPT = f"{PROTOBUF}, application/json"
MAGIC = b"k8s\x00"
_LEN = 2  # wire type: length-delimited
_VARINT = 0


def _varint(n: int) -> bytes:
    if n < 0x80:  # one byte: almost every length and tag written here
        return _ONE_BYTE[n]
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_ONE_BYTE = [bytes([i]) for i in range(0x80)]
# Each field's key (number and wire type) for the field numbers written here (all below 16).
_KEY = [bytes([number << 3 | _LEN]) for number in range(16)]


def _field(number: int, data: bytes) -> bytes:
    return _KEY[number] + _varint(len(data)) + data


def _text(number: int, text: str) -> bytes:
    return _field(number, text.encode())


def _int(number: int, value: int) -> bytes:
    return _ONE_BYTE[number << 3 | _VARINT] + _varint(value)


def _envelope(api_version: str, kind: str) -> bytes:
    """The start of a ``runtime.Unknown`` (typeMeta = 1: apiVersion = 1, kind = 2) up to its
    ``raw`` field (2), whose length and bytes follow."""
    return MAGIC + _field(1, _text(1, api_version) + _text(2, kind)) + _KEY[2]


_BINDING = _envelope("v1", "Binding")
_EVENT = _envelope("events.k8s.io/v1", "Event")
# ObjectReference: kind = 1, namespace = 2, name = 3, uid = 4, apiVersion = 5.
_NODE = _text(1, "Node")
_V1 = _text(5, "v1")


class Reference(NamedTuple):
    """What an event is about: an ObjectReference (``namespace`` None: cluster-scoped)."""

    kind: str
    api_version: str
    namespace: str | None
    name: str
    uid: str | None


def binding(namespace: str, name: str, uid: str | None, node: str) -> bytes:
    """A ``v1`` Binding of pod ``namespace/name`` (only if its uid is still ``uid``) to ``node``."""
    # ObjectMeta: name = 1, namespace = 3, uid = 5.
    meta = _text(1, name) + _text(3, namespace) + (_text(5, uid) if uid else b"")
    # Binding: metadata = 1, target = 2.
    raw = _field(1, meta) + _field(2, _NODE + _text(3, node) + _V1)
    return _BINDING + _varint(len(raw)) + raw


def event(
    *,
    name: str,
    namespace: str,
    time_ns: int,
    controller: str,
    instance: str,
    action: str,
    reason: str,
    note: str,
    type_: str,
    regarding: Reference,
) -> bytes:
    """An ``events.k8s.io/v1`` Event named ``name`` at ``time_ns`` (unix nanoseconds, kept to
    the microsecond as MicroTime is) about the object ``regarding``."""
    micros = time_ns // 1000
    # Event: metadata = 1, eventTime = 2 (MicroTime: seconds = 1, nanos = 2),
    # reportingController = 4, reportingInstance = 5, action = 6, reason = 7, regarding = 8,
    # note = 10, type = 11.
    raw = b"".join(
        (
            _field(1, _text(1, name) + _text(3, namespace)),
            _field(2, _int(1, micros // 1_000_000) + _int(2, micros % 1_000_000 * 1000)),
            _text(4, controller),
            _text(5, instance),
            _text(6, action),
            _text(7, reason),
            _field(
                8,
                _text(1, regarding.kind)
                + (_text(2, regarding.namespace) if regarding.namespace is not None else b"")
                + _text(3, regarding.name)
                + (_text(4, regarding.uid) if regarding.uid else b"")
                + _text(5, regarding.api_version),
            ),
            _text(10, note),
            _text(11, type_),
        )
    )
    return _EVENT + _varint(len(raw)) + raw


def fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """One message's fields in order, as (number, value): a varint's value, or the bytes of a
    length-delimited or fixed-size field. Raises ValueError on a truncated message."""
    out: list[tuple[int, int | bytes]] = []
    i = 0
    while i < len(data):
        key, i = _read_varint(data, i)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == _VARINT:
            value, i = _read_varint(data, i)
        else:
            if wire == _LEN:
                size, i = _read_varint(data, i)
            elif wire in _FIXED:
                size = _FIXED[wire]
            else:
                raise ValueError(f"protobuf wire type {wire}")
            value, i = data[i : i + size], i + size
        out.append((number, value))
    if i != len(data):
        raise ValueError("truncated protobuf message")
    return out


# Wire types 1 and 5: 64 and 32 bits.
_FIXED = {1: 8, 5: 4}


def _strings(data: bytes) -> dict[int, bytes]:
    return {number: value for number, value in fields(data) if isinstance(value, bytes)}


def _read_varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(data):
            raise ValueError("truncated protobuf varint")
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def readable(data: bytes) -> str:
    """An answer's body for a log line: a protobuf ``Status`` as its reason and message,
    anything else as text."""
    if data.startswith(MAGIC):
        try:
            status = _strings(_strings(data[len(MAGIC) :]).get(2, b""))
            # Status: status = 2, message = 3, reason = 4.
            reason, message = status.get(4, b"").decode(), status.get(3, b"").decode()
            return f"{reason}: {message}" if reason else message
        except (ValueError, UnicodeDecodeError):
            pass
    return data[:300].decode(errors="replace")
