"""The pod informer's watch lines: read by the Rust decoder or parsed whole, the store, the
handler's calls and the resourceVersion come out the same."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from ksched.loop.client import ApiUnavailableError
from ksched.loop.mirror.informer import GoneError, Informer
from ksched.loop.mirror.slim import decode_pod_event, decode_pod_frame, slim_pod
from ksched.objects import Obj
from tests.unit.test_watch_decode import RUNNING


def informer(decode: bool, frames: bool = False) -> tuple[Informer, list[tuple[str, Obj, Obj | None]]]:
    """A pod informer fed by hand (lines, or with ``frames`` protobuf frames); its handler's calls."""
    calls: list[tuple[str, Obj, Obj | None]] = []
    inf = Informer(
        None,  # type: ignore[arg-type]  # no request is made: events are fed to it
        "/api/v1/pods",
        slim_pod,
        lambda kind, obj, old: calls.append((kind, obj, old)),
        name="pods",
        decode=decode_pod_event if decode else None,
        decode_frame=decode_pod_frame if frames else None,
    )
    return inf, calls


def line(kind: str, obj: Any) -> bytes:
    return orjson.dumps({"type": kind, "object": obj})


def deep(levels: int) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = {"a": value}
    return value


def stream() -> list[bytes]:
    pending = copy.deepcopy(RUNNING)
    pending["spec"].pop("nodeName")
    pending["status"] = {"phase": "Pending"}
    bound = copy.deepcopy(pending)
    bound["spec"]["nodeName"] = "kwok-node-00001"
    bound["metadata"]["resourceVersion"] = "2"
    relabelled = copy.deepcopy(RUNNING)
    relabelled["metadata"]["resourceVersion"] = "4"
    relabelled["metadata"]["labels"]["new"] = "yes"
    # Nested deeper than the decoder reads: parsed whole instead, with the same outcome.
    odd = copy.deepcopy(RUNNING)
    odd["metadata"]["name"] = "odd"
    odd["spec"]["affinity"] = deep(200)
    return [
        line("ADDED", pending),
        line("MODIFIED", bound),
        line("MODIFIED", RUNNING),
        line("MODIFIED", {**RUNNING, "metadata": {**RUNNING["metadata"], "resourceVersion": "3"}}),
        line("BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": "300"}}),
        line("MODIFIED", relabelled),
        line("ADDED", odd),
        line("DELETED", relabelled),
    ]


def test_decoded_lines_give_the_store_calls_and_version_that_parsed_lines_give() -> None:
    (fast, fast_calls), (whole, whole_calls) = informer(True), informer(False)
    for raw in stream():
        fast._line(raw)
        whole._line(raw)
    assert fast_calls == whole_calls
    assert [c[0] for c in fast_calls] == ["ADDED", "MODIFIED", "MODIFIED", "MODIFIED", "ADDED", "DELETED"]
    assert fast.store == whole.store and list(fast.store) == ["shop/odd"]
    assert fast.resource_version == whole.resource_version == "4"


@pytest.mark.parametrize("decode", [True, False])
def test_an_expired_version_relists_and_another_error_reconnects(decode: bool) -> None:
    inf, _ = informer(decode)
    with pytest.raises(GoneError):
        inf._line(line("ERROR", {"kind": "Status", "status": "Failure", "code": 410, "reason": "Expired"}))
    with pytest.raises(ApiUnavailableError, match="InternalError: etcd is down"):
        inf._line(
            line(
                "ERROR", {"kind": "Status", "code": 500, "reason": "InternalError", "message": "etcd is down"}
            )
        )


@pytest.mark.parametrize("decode", [True, False])
@pytest.mark.parametrize("raw", [b"{", b"[1, 2]", b'"ADDED"'])
def test_a_line_that_is_no_event_is_a_value_error_the_informer_reconnects_on(
    decode: bool, raw: bytes
) -> None:
    inf, calls = informer(decode)
    with pytest.raises(ValueError):
        inf._line(raw)
    assert calls == []
