"""The benches create their objects through one POST that survives a pooled connection the API
server closed without an answer: tried again, and an object the first try did create is read
back rather than reported as a conflict."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from ksched.bench import pods as bench_pods
from ksched.bench.pods import CREATE_TRIES, create_object, create_pods, patch_object
from ksched.errors import KschedError
from ksched.loop.client import ApiUnavailableError, Response

POD = {"kind": "Pod", "metadata": {"name": "web-0", "namespace": "ns"}}
COLLECTION = "/api/v1/namespaces/ns/pods"


class Server:
    """Answers each request from a script: an exception to raise, or (status, body)."""

    def __init__(self, *script: Any) -> None:
        self.script = list(script)
        self.seen: list[tuple[str, str]] = []

    def request(self, method: str, path: str, **_: Any) -> Response:
        self.seen.append((method, path))
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        status, body = step
        return Response(status, orjson.dumps(body))


@pytest.fixture(autouse=True)
def no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_pods, "CREATE_RETRY_S", 0.0)


def dropped() -> ApiUnavailableError:
    return ApiUnavailableError(
        "POST: ('Connection aborted.', RemoteDisconnected('Remote end closed connection'))"
    )


def test_a_dropped_connection_is_tried_again() -> None:
    created = {**POD, "metadata": {**POD["metadata"], "uid": "u1"}}
    server = Server(dropped(), (201, created))
    assert create_object(server, COLLECTION, POD) == created  # type: ignore[arg-type]
    assert server.seen == [("POST", COLLECTION)] * 2


def test_what_the_dropped_try_created_is_read_back_not_a_conflict() -> None:
    created = {**POD, "metadata": {**POD["metadata"], "uid": "u1"}}
    server = Server(dropped(), (409, {"reason": "AlreadyExists"}), (200, created))
    assert create_pods(server, [POD]) == {"web-0": "u1"}  # type: ignore[arg-type]
    assert server.seen[-1] == ("GET", f"{COLLECTION}/web-0")


def test_a_conflict_on_the_first_try_and_a_server_that_stays_away_are_errors() -> None:
    with pytest.raises(KschedError, match="HTTP 409"):
        create_object(Server((409, {"reason": "AlreadyExists"})), COLLECTION, POD)  # type: ignore[arg-type]
    with pytest.raises(ApiUnavailableError):
        create_object(Server(*(dropped() for _ in range(CREATE_TRIES))), COLLECTION, POD)  # type: ignore[arg-type]


def test_existing_ok_reads_back_an_object_that_was_there_before() -> None:
    there = {**POD, "metadata": {**POD["metadata"], "uid": "u0"}}
    server = Server((409, {"reason": "AlreadyExists"}), (200, there))
    assert create_object(server, COLLECTION, POD, existing_ok=True) == there  # type: ignore[arg-type]


def test_a_patch_whose_connection_dropped_is_tried_again_and_an_error_status_raises() -> None:
    """The herd's scale-up is a merge patch; a pooled connection the API server dropped once
    stopped a whole quality run (and the scenarios it had judged) before it was tried again."""
    server = Server(dropped(), (200, {"kind": "ReplicaSet"}))
    patch_object(server, "/apis/apps/v1/namespaces/ns/replicasets/herd", {"spec": {"replicas": 9}})  # type: ignore[arg-type]
    assert server.seen == [("PATCH", "/apis/apps/v1/namespaces/ns/replicasets/herd")] * 2
    refused = Server((422, {"kind": "Status", "message": "invalid"}))
    with pytest.raises(KschedError, match=r"patching /x: HTTP 422"):
        patch_object(refused, "/x", {})  # type: ignore[arg-type]
    gone = Server(*[dropped()] * CREATE_TRIES)
    with pytest.raises(ApiUnavailableError):
        patch_object(gone, "/x", {})  # type: ignore[arg-type]
