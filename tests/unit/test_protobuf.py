"""The Binding and Event ksched writes as protobuf, read back by their field numbers
(``tests/unit/wire_bodies.py``); what the API server stores from them is checked against a
real one in ``tests/integration/test_run.py``."""

from __future__ import annotations

import pytest

from ksched.loop import protobuf
from tests.unit.wire_bodies import body


def test_binding_names_the_pod_its_uid_and_the_node() -> None:
    assert body(protobuf.binding("team-a", "web-0", "0b5f-uid", "kwok-node-00042")) == {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "web-0", "namespace": "team-a", "uid": "0b5f-uid"},
        "target": {"kind": "Node", "name": "kwok-node-00042", "apiVersion": "v1"},
    }


def test_binding_without_uid_has_no_uid_precondition() -> None:
    assert body(protobuf.binding("ns", "p", None, "n"))["metadata"] == {"name": "p", "namespace": "ns"}


def test_event_carries_every_field_and_its_time_to_the_microsecond() -> None:
    note = "Successfully assigned ns/p to n — ünïcode " + "x" * 300  # multi-byte, and a length over 127
    raw = protobuf.event(
        name="p.187a",
        namespace="ns",
        time_ns=1_795_700_000_123_456_789,
        controller="ksched",
        instance="ksched-host-1",
        action="Binding",
        reason="Scheduled",
        note=note,
        type_="Normal",
        regarding=protobuf.Reference("Pod", "v1", "ns", "p", "uid-1"),
    )
    assert body(raw) == {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "p.187a", "namespace": "ns"},
        "eventTime": {"seconds": 1_795_700_000, "nanos": 123_456_000},
        "reportingController": "ksched",
        "reportingInstance": "ksched-host-1",
        "action": "Binding",
        "reason": "Scheduled",
        "regarding": {"kind": "Pod", "namespace": "ns", "name": "p", "uid": "uid-1", "apiVersion": "v1"},
        "note": note,
        "type": "Normal",
    }


def _status(reason: str, message: str, code: int) -> bytes:
    # An API server's protobuf Status: Unknown{typeMeta, raw = Status{status = 2, message = 3,
    # reason = 4, code = 6}}.
    def field(number: int, data: bytes) -> bytes:
        return bytes([number << 3 | 2, len(data)]) + data

    status = field(2, b"Failure") + field(3, message.encode()) + field(4, reason.encode())
    status += bytes([6 << 3, code & 0x7F | 0x80, code >> 7])
    return protobuf.MAGIC + field(1, field(1, b"v1") + field(2, b"Status")) + field(2, status)


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (_status("NotFound", 'pods "p" not found', 404), 'NotFound: pods "p" not found'),
        (_status("", "etcdserver: request timed out", 500), "etcdserver: request timed out"),
        (b'{"kind":"Status","message":"json answer"}', '{"kind":"Status","message":"json answer"}'),
        (protobuf.MAGIC + b"\x12\x05abc", "k8s\x00\x12\x05abc"),  # truncated: shown as it came
        (b"", ""),
    ],
)
def test_an_error_answer_reads_as_its_reason_and_message(data: bytes, text: str) -> None:
    assert protobuf.readable(data) == text


def test_fields_reads_every_wire_type_ksched_meets_and_refuses_the_rest() -> None:
    data = b"\x08\x96\x01" + b"\x12\x02hi" + b"\x19" + bytes(range(8)) + b"\x25" + b"abcd"
    assert protobuf.fields(data) == [(1, 150), (2, b"hi"), (3, bytes(range(8))), (4, b"abcd")]
    with pytest.raises(ValueError, match="wire type 3"):
        protobuf.fields(b"\x0b")
    with pytest.raises(ValueError, match="truncated"):
        protobuf.fields(b"\x12\x05hi")
    with pytest.raises(ValueError, match="truncated"):
        protobuf.fields(b"\x08\x96")
