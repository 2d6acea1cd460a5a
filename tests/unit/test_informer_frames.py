"""The pod informer's protobuf watch: frames split across reads, several in one read, and a
frame it cannot read (the informer then watches as JSON, without applying that event).

The frames are built here with their own field numbers (``WatchEvent``, ``RawExtension``, the
``k8s\\0`` magic and ``runtime.Unknown`` around the ``Pod``); that every field reads as its
JSON does is checked against the real API server (``tests/integration/test_watch_protobuf.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ksched.loop.client import ApiUnavailableError
from ksched.loop.mirror.informer import FRAME_HEADER
from ksched.loop.mirror.slim import decode_pod_frame
from ksched.loop.protobuf import MAGIC
from ksched.loop.protobuf import _varint as varint  # the binding writer's; the frames are this test's own
from tests.unit.test_informer_lines import informer


def _len(number: int, data: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(data)) + data


def _typed(kind: str, raw: bytes) -> bytes:
    """The magic and the ``runtime.Unknown`` (typeMeta = 1, raw = 2) around an object."""
    return MAGIC + _len(1, _len(1, b"v1") + _len(2, kind.encode())) + _len(2, raw)


def pod_frame(kind: str, name: str, version: str, node: str = "") -> bytes:
    meta = _len(1, name.encode()) + _len(3, b"shop") + _len(6, version.encode())
    spec = _len(2, _len(1, b"app")) + _len(10, node.encode()) + _len(19, b"ksched")
    pod = _len(1, meta) + _len(2, spec) + _len(3, _len(1, b"Pending"))
    event = _len(1, kind.encode()) + _len(2, _len(1, _typed("Pod", pod)))
    return len(event).to_bytes(FRAME_HEADER, "big") + event


class Response:
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    def stream(self, amt: int) -> Iterator[bytes]:
        yield from self.chunks


def test_a_frame_reads_as_the_json_event_it_stands_for() -> None:
    kind, version, slim, status = decode_pod_frame(pod_frame("ADDED", "web-1", "7")[FRAME_HEADER:])
    assert (kind, version, status) == ("ADDED", "7", {})
    assert slim == {
        "metadata": {"name": "web-1", "namespace": "shop"},
        "spec": {"schedulerName": "ksched", "containers": [{"name": "app", "resources": {}}]},
        "status": {"phase": "Pending"},
    }


@pytest.mark.parametrize("size", [1, 3, 7, 64, 100_000])
def test_frames_are_read_however_the_stream_cuts_them(size: int) -> None:
    stream = (
        pod_frame("ADDED", "web-1", "7")
        + pod_frame("ADDED", "web-2", "8")
        + pod_frame("MODIFIED", "web-1", "9", node="n1")
        + pod_frame("DELETED", "web-2", "10")
    )
    inf, calls = informer(decode=True, frames=True)
    inf._read_frames(Response([stream[i : i + size] for i in range(0, len(stream), size)]))  # type: ignore[arg-type]
    assert [(kind, obj["metadata"]["name"]) for kind, obj, _ in calls] == [
        ("ADDED", "web-1"),
        ("ADDED", "web-2"),
        ("MODIFIED", "web-1"),
        ("DELETED", "web-2"),
    ]
    assert list(inf.store) == ["shop/web-1"] and inf.store["shop/web-1"]["spec"]["nodeName"] == "n1"
    assert inf.resource_version == "10"


def test_an_unreadable_frame_switches_the_watch_to_json_without_applying_it() -> None:
    broken = b"\x00\x00\x00\x03\x0a\x05A"  # a string longer than its frame
    inf, calls = informer(decode=True, frames=True)
    with pytest.raises(ApiUnavailableError, match="watching as JSON"):
        inf._read_frames(
            Response([pod_frame("ADDED", "web-1", "7") + broken + pod_frame("ADDED", "web-3", "9")])
        )  # type: ignore[arg-type]
    assert [obj["metadata"]["name"] for _, obj, _ in calls] == ["web-1"]
    # The next watch resumes from the last event read, and asks for JSON.
    assert inf.resource_version == "7" and inf.decode_frame is None


@pytest.mark.parametrize("frame", [b"", b"\x0a\x05ADDED", b"not protobuf", pod_frame("ADDED", "x", "1")[:-3]])
def test_a_frame_that_is_not_a_pod_event_is_a_value_error(frame: bytes) -> None:
    with pytest.raises(ValueError):
        decode_pod_frame(frame)
