"""The pod informer's list (at start, and the relist after ``410 Gone``): read by the Rust
decoder or parsed whole, the store, the handler's calls and the resourceVersion come out the
same; and a relist keeps the objects it already holds, so it never holds the cluster twice."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from ksched.loop.client import Response
from ksched.loop.mirror.informer import Informer
from ksched.loop.mirror.slim import decode_pod_list, slim_pod
from ksched.objects import Obj
from tests.unit.test_watch_decode import replica

PAGE = 4


@dataclass
class Lists:
    """An API server's pod list, in pages of ``PAGE`` (``continue`` tokens ``c1``, ``c2``...);
    ``expire_once`` answers the second page's first request with 410, as an expired token."""

    pods: list[Obj]
    version: str = "100"
    expire_once: bool = False
    requests: list[Any] = field(default_factory=list)

    def request(self, method: str, path: str, **kw: Any) -> Response:
        cont = kw["query"].get("continue")
        self.requests.append(cont)
        if cont == "c1" and self.expire_once:
            self.expire_once = False
            return Response(410, orjson.dumps({"kind": "Status", "code": 410, "reason": "Expired"}))
        k = int(cont[1:]) if cont else 0
        items = self.pods[k * PAGE : (k + 1) * PAGE]
        meta = {"resourceVersion": self.version}
        if (k + 1) * PAGE < len(self.pods):
            meta["continue"] = f"c{k + 1}"
        return Response(200, orjson.dumps({"kind": "PodList", "metadata": meta, "items": items}))


def informer(lists: Lists, decode: bool) -> tuple[Informer, list[tuple[str, str]]]:
    calls: list[tuple[str, str]] = []
    inf = Informer(
        lists,  # type: ignore[arg-type]
        "/api/v1/pods",
        slim_pod,
        lambda kind, obj, old: calls.append((kind, obj["metadata"]["name"])),
        name="pods",
        decode_list=decode_pod_list if decode else None,
    )
    return inf, calls


@pytest.mark.parametrize("decode", [True, False])
def test_a_relist_reports_what_changed_and_keeps_what_did_not(decode: bool) -> None:
    pods = [replica(i) for i in range(10)]
    lists = Lists(pods)
    inf, calls = informer(lists, decode)
    inf._relist()
    assert calls == [("ADDED", p["metadata"]["name"]) for p in pods]
    assert inf.store == {f"shop/{p['metadata']['name']}": slim_pod(p) for p in pods}
    assert inf.resource_version == "100" and lists.requests == [None, "c1", "c2"]
    # The start-up log's profile of the list: three pages, its parts within its whole.
    timing = inf.last_list
    assert timing is not None and timing.pages == 3
    assert timing.request_s + timing.decode_s + timing.handlers_s <= timing.seconds
    assert str(timing).startswith(f"{timing.seconds:.1f} s over 3 page(s): ")
    held = dict(inf.store)

    # The watch expired: one pod relabelled, one deleted, one created while it was away; the
    # continue token expires once on the way.
    changed = copy.deepcopy(pods[3])
    changed["metadata"]["labels"]["new"] = "yes"
    lists.pods = [*pods[:3], changed, *pods[4:9], replica(10)]
    lists.version, lists.expire_once = "200", True
    calls.clear()
    inf._relist()
    assert sorted(calls) == [("ADDED", "web-00010"), ("DELETED", "web-00009"), ("MODIFIED", "web-00003")]
    assert inf.store == {f"shop/{p['metadata']['name']}": slim_pod(p) for p in lists.pods}
    assert inf.resource_version == "200"
    # Each unchanged pod is the object already held: the relist built no second copy to keep.
    unchanged = [k for k in inf.store if k not in ("shop/web-00003", "shop/web-00010")]
    assert unchanged and all(inf.store[k] is held[k] for k in unchanged)


def test_the_decoder_and_the_parser_list_the_same() -> None:
    lists = Lists([replica(i) for i in range(9)])
    (fast, fast_calls), (whole, whole_calls) = informer(lists, True), informer(lists, False)
    fast._relist()
    whole._relist()
    assert fast_calls == whole_calls and fast.store == whole.store
    assert [orjson.dumps(o) for o in fast.store.values()] == [orjson.dumps(o) for o in whole.store.values()]


@pytest.mark.parametrize("decode", [True, False])
def test_a_last_page_without_a_resource_version_is_an_error_the_informer_retries(decode: bool) -> None:
    class NoVersion(Lists):
        def request(self, method: str, path: str, **kw: Any) -> Response:
            return Response(200, orjson.dumps({"kind": "PodList", "metadata": {}, "items": []}))

    inf, calls = informer(NoVersion([]), decode)
    with pytest.raises(ValueError, match="without a resourceVersion"):
        inf._relist()
    assert calls == [] and not inf.synced.is_set()
