"""Request bodies as the API server reads them, for fakes that check what the binder sent:
JSON as is, and the protobuf Binding and Event (``ksched.loop.protobuf``) decoded by their
field numbers in ``k8s.io/api``'s ``generated.proto``, written out here a second time (only
the generic wire reader is ksched's)."""

from __future__ import annotations

from typing import Any

import orjson

from ksched.loop.protobuf import MAGIC, fields

# Field number -> (JSON name, nested schema or None for a string, or "time" for a MicroTime).
_META = {1: ("name", None), 3: ("namespace", None), 5: ("uid", None)}
_REFERENCE = {
    1: ("kind", None),
    2: ("namespace", None),
    3: ("name", None),
    4: ("uid", None),
    5: ("apiVersion", None),
}
_TYPES: dict[str, dict[int, tuple[str, Any]]] = {
    "Binding": {1: ("metadata", _META), 2: ("target", _REFERENCE)},
    "Event": {
        1: ("metadata", _META),
        2: ("eventTime", "time"),
        4: ("reportingController", None),
        5: ("reportingInstance", None),
        6: ("action", None),
        7: ("reason", None),
        8: ("regarding", _REFERENCE),
        10: ("note", None),
        11: ("type", None),
    },
}


def _decode(data: bytes, schema: dict[int, tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for number, value in fields(data):
        name, nested = schema[number]  # a field the schema lacks fails the test
        assert isinstance(value, bytes)
        if nested == "time":
            parts = dict(fields(value))
            out[name] = {"seconds": parts.get(1, 0), "nanos": parts.get(2, 0)}
        elif nested is None:
            out[name] = value.decode()
        else:
            out[name] = _decode(value, nested)
    return out


def body(raw: bytes) -> Any:
    """The object a request body carries: JSON, or a protobuf Binding or Event."""
    if not raw.startswith(MAGIC):
        return orjson.loads(raw)
    envelope = dict(fields(raw[len(MAGIC) :]))
    type_meta = dict(fields(envelope[1]))  # type: ignore[arg-type]
    kind = type_meta[2].decode()  # type: ignore[union-attr]
    obj = _decode(envelope[2], _TYPES[kind])  # type: ignore[arg-type]
    return {"apiVersion": type_meta[1].decode(), "kind": kind, **obj}  # type: ignore[union-attr]
