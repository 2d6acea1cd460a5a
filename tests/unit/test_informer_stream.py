"""The pod informer's streamed list (KEP-3157's watch list, as kube-scheduler's informers list):
the initial events fill a new store that replaces the old one at the bookmark that ends them,
with the differences handed on as events; a stream cut before that bookmark changes nothing;
an API server that refuses to stream is listed in pages."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from ksched.loop.client import Response
from ksched.loop.mirror.informer import FRAME_HEADER, AnsweredError, Informer
from ksched.loop.mirror.slim import decode_pod_event, decode_pod_frame, slim_pod
from ksched.objects import INITIAL_EVENTS_END, Obj
from tests.unit.test_informer_frames import _len, _typed, pod_frame
from tests.unit.test_informer_lines import line
from tests.unit.test_watch_decode import RUNNING


def pod(name: str, version: str) -> Obj:
    p = copy.deepcopy(RUNNING)
    p["metadata"] = {**p["metadata"], "name": name, "resourceVersion": version}
    return p


def bookmark(version: str, end: bool) -> bytes:
    annotations = {INITIAL_EVENTS_END: "true"} if end else {}
    return line(
        "BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": version, "annotations": annotations}}
    )


class Answer:
    def __init__(self, status: int, chunks: list[bytes], content_type: str = "application/json") -> None:
        self.status = status
        self.chunks = chunks
        self.headers = {"Content-Type": content_type}
        self.data = b'{"kind":"Status","reason":"Invalid"}'

    def stream(self, _amount: int) -> Iterator[bytes]:
        yield from self.chunks

    def release_conn(self) -> None:
        pass


class Server:
    """Answers every watch with ``answer``; records the queries."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.queries: list[dict[str, Any]] = []

    def stream(self, path: str, query: dict[str, Any], **_kw: Any) -> Answer:
        self.queries.append(dict(query))
        return self.answer

    def request(self, *_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("a streamed list makes no list request")


def informer(server: Server, decode: bool = True) -> tuple[Informer, list[tuple[str, str]]]:
    calls: list[tuple[str, str]] = []
    inf = Informer(
        server,  # type: ignore[arg-type]
        "/api/v1/pods",
        slim_pod,
        lambda kind, obj, old: calls.append((kind, obj["metadata"]["name"])),
        name="pods",
        decode=decode_pod_event if decode else None,
        stream_list=True,
    )
    return inf, calls


@pytest.mark.parametrize("decode", [True, False])
def test_a_streamed_list_replaces_the_store_at_its_end_then_the_watch_goes_on(decode: bool) -> None:
    kept, changed, gone = pod("kept", "5"), pod("changed", "6"), pod("gone", "7")
    server = Server(Answer(200, []))
    inf, calls = informer(server, decode)
    # What a watch held before it expired (410): three pods.
    for p in (kept, changed, gone):
        inf._line(line("ADDED", p))
    held = dict(inf.store)
    calls.clear()
    inf.resource_version = None
    relabelled = copy.deepcopy(changed)
    relabelled["metadata"]["labels"] = {**relabelled["metadata"]["labels"], "new": "yes"}
    server.answer.chunks = [
        b"\n".join(
            [
                line("ADDED", kept),
                line("ADDED", relabelled),
                # A bookmark that does not end the initial events is not the list's end.
                bookmark("8", end=False),
                line("ADDED", pod("new", "9")),
                bookmark("10", end=True),
                line("ADDED", pod("later", "11")),
            ]
        )
        + b"\n"
    ]
    inf._watch()
    query = server.queries[-1]
    assert query["sendInitialEvents"] is True and query["resourceVersionMatch"] == "NotOlderThan"
    assert query["resourceVersion"] is None, "a streamed list is a consistent read"
    # The differences, as a paged relist gives them; then the watch's own event.
    assert sorted(calls[:3]) == [("ADDED", "new"), ("DELETED", "gone"), ("MODIFIED", "changed")]
    assert calls[3:] == [("ADDED", "later")]
    assert inf.store["shop/kept"] is held["shop/kept"], "an unchanged pod is the object already held"
    assert set(inf.store) == {"shop/kept", "shop/changed", "shop/new", "shop/later"}
    assert inf.resource_version == "11" and inf.synced.is_set() and inf.relists == 1
    timing = inf.last_list
    assert timing is not None and timing.streamed and timing.pages == 3
    assert str(timing).startswith(f"{timing.seconds:.1f} s streamed (3 objects): ")


def end_frame(version: str) -> bytes:
    """A protobuf bookmark that ends the initial events: a Pod with only its resourceVersion
    and the annotation (ObjectMeta's map field 12, each entry key 1, value 2)."""
    entry = _len(1, INITIAL_EVENTS_END.encode()) + _len(2, b"true")
    meta = _len(6, version.encode()) + _len(12, entry)
    event = _len(1, b"BOOKMARK") + _len(2, _len(1, _typed("Pod", _len(1, meta))))
    return len(event).to_bytes(FRAME_HEADER, "big") + event


def test_protobuf_frames_stream_a_list_too() -> None:
    server = Server(Answer(200, [], content_type="application/vnd.kubernetes.protobuf;stream=watch"))
    inf, calls = informer(server)
    inf.decode_frame = decode_pod_frame
    server.answer.chunks = [
        pod_frame("ADDED", "web-1", "7"),
        pod_frame("BOOKMARK", "", "8"),  # no annotation: not the end
        end_frame("9"),
        pod_frame("ADDED", "web-2", "10"),
    ]
    inf._watch()
    assert inf.decode_frame is not None, "the frames fell back to JSON"
    assert calls == [("ADDED", "web-1"), ("ADDED", "web-2")]
    assert inf.resource_version == "10" and inf.synced.is_set()


def test_a_stream_cut_before_its_list_ended_changes_nothing() -> None:
    server = Server(Answer(200, [line("ADDED", pod("a", "5")) + b"\n"]))
    inf, calls = informer(server)
    inf._watch()
    assert calls == [] and inf.store == {} and inf.resource_version is None and not inf.synced.is_set()
    # The next try streams the list from its start.
    server.answer.chunks = [line("ADDED", pod("a", "5")) + b"\n" + bookmark("6", end=True) + b"\n"]
    inf._watch()
    assert calls == [("ADDED", "a")] and inf.resource_version == "6"


class Refusing(Server):
    """An API server that refuses streamed lists with ``status`` and lists in pages: one page
    of one pod; its watches end at once."""

    def __init__(self, status: int) -> None:
        super().__init__(Answer(status, []))

    def stream(self, path: str, query: dict[str, Any], **_kw: Any) -> Answer:
        self.queries.append(dict(query))
        return self.answer if query.get("sendInitialEvents") else Answer(200, [])

    def request(self, *_args: Any, **_kwargs: Any) -> Any:
        page = {"kind": "PodList", "metadata": {"resourceVersion": "9"}, "items": [pod("a", "5")]}
        return Response(200, orjson.dumps(page))


@pytest.mark.parametrize("status", [400, 422])
def test_a_list_the_api_server_refuses_to_stream_is_paged_and_the_next_streams_again(status: int) -> None:
    server = Refusing(status)
    inf, calls = informer(server)  # type: ignore[arg-type]
    inf._list_and_watch()
    assert calls == [] and inf.resource_version is None and not inf.synced.is_set()
    inf._list_and_watch()
    assert calls == [("ADDED", "a")] and inf.resource_version == "9" and inf.synced.is_set()
    # The next list (after a 410) tries a stream first, as client-go's reflector does.
    inf.resource_version = None
    inf._list_and_watch()
    streams = [q for q in server.queries if q.get("sendInitialEvents")]
    assert len(streams) == 2 and inf.resource_version is None


@pytest.mark.parametrize(("code", "paged"), [(500, True), (504, True), (429, False), (503, False)])
def test_a_stream_that_ends_in_an_error_event_is_listed_in_pages_unless_the_server_is_not_ready(
    code: int, paged: bool
) -> None:
    error = line("ERROR", {"kind": "Status", "code": code, "reason": "InternalError", "message": "no"})
    server = Server(Answer(200, [line("ADDED", pod("a", "5")) + b"\n" + error + b"\n"]))
    inf, calls = informer(server)
    with pytest.raises(AnsweredError):
        inf._watch()
    assert inf._page_next is paged and calls == [] and inf.resource_version is None


def test_a_streamed_list_counts_its_time_from_its_request() -> None:
    class Slow(Server):
        def stream(self, path: str, query: dict[str, Any], **kw: Any) -> Answer:
            time.sleep(0.05)  # the API server's wait before its first event
            return super().stream(path, query, **kw)

    server = Slow(Answer(200, [bookmark("6", end=True) + b"\n"]))
    inf, _ = informer(server)
    inf._watch()
    assert inf.last_list is not None and inf.last_list.seconds >= 0.05


def test_the_bookmark_that_ends_the_list_keeps_its_annotation_through_each_projection() -> None:
    raw = orjson.loads(bookmark("10", end=True))["object"]
    _, version, slim, _ = decode_pod_event(bookmark("10", end=True))
    assert version == "10"
    for projection in (slim, slim_pod(raw)):
        assert projection["metadata"]["annotations"] == {INITIAL_EVENTS_END: "true"}
