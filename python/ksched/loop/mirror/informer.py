"""List+watch of one kind of object into a local store, parsed with orjson (pods: watched as
protobuf, each frame read in Rust into the same projection). A list is paged, or streamed (a
watch whose initial events are every object, ended by a bookmark; nodes and pods): see
``Informer.stream_list``.

Owns a store of slimmed objects (only the fields ksched reads) keyed by
``namespace/name``, the resourceVersion (advanced by every event and by
bookmarks), reconnects with jittered exponential backoff (held to a second while
the API server does not answer or says it is not ready: a restart's end is seen
at once), and a relist on
``410 GoneError`` whose differences from the store are delivered as ordinary
events, so whoever consumes them ends up equal to the API server. It never
builds generated model objects and never calls the handler with a lock held.

The store's objects are read, never changed, by everything that receives them: the pod
decoders share equal values between pods (a ReplicaSet's labels, owner and containers are
one object for all its pods), and a relist keeps each object it already holds that compares
equal, so it never holds the cluster twice. 150,000 pods (``ksched bench --cluster
--existing-pods``): 1.9 KiB a pod instead of 4.4, a relist 7 s instead of 26 and 17 MiB
more instead of 640.

Why not the client's ``watch.Watch``: with ``deserialize=False`` (the only
mode that yields plain dicts) it never records the resourceVersion, so a
watch that ends is resumed from the version it started at (replaying or
failing with 410), and its ERROR branch reads a ``raw_object`` key that mode
never sets. It also decodes with the standard ``json`` module: 2,000 pod
watch events of 1.3 KB took 35-65 ms with ``json`` and 19-38 ms with orjson
(three runs on the 2-core development VM).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
import urllib3

from ksched.loop.client import ApiUnavailableError, Kube
from ksched.loop.protobuf import MAGIC as PROTOBUF_MAGIC
from ksched.loop.protobuf import PROTOBUF
from ksched.objects import INITIAL_EVENTS_END, Obj, object_key

log = logging.getLogger(__name__)

# A list is fetched in pages of this many objects (client-go's reflector uses 500).
PAGE_SIZE = 500
# Answers to a streamed list (``sendInitialEvents``) that mean the API server does not stream
# lists (its WatchList feature off): that list is made in pages. So is one whose stream ends
# in an error event (other than 410, 429 and 503): the watch cache answers that way where it
# cannot serve a stream (etcd without progress notifications: 500), as client-go's reflector
# falls back to a list on any error of a watch list. The next list streams again.
STREAM_REFUSED = frozenset({400, 422})
# The server ends each watch after this long; a new one resumes from the last version.
WATCH_TIMEOUT_S = 300
BACKOFF_INITIAL_S = 0.2
BACKOFF_MAX_S = 30.0
# While the API server does not answer (restarting) or answers that it is not ready, a retry
# waits at most this long: ksched is one client, not one of a thousand kubelets. With the
# doubling backoff alone, an API server down 6 s (12,000 pods, 2-core VM) was retried last
# after a 3.7 s wait: the relist began that much later than the server could answer it.
RECONNECT_MAX_S = 1.0
# Answers that mean "not ready yet, retry" (a restarting API server's watch cache
# initializing answers 429), retried as often as a server that does not answer.
NOT_READY = frozenset({429, 503})
# A restarted API server refuses requests (401, 403) until its authenticator and authorizer
# have read their objects: within this long of the server not answering, those are retried
# as not ready too. Past it, a refusal is the RBAC's and waits the full backoff. The chaos
# soak saw 403s for a second or two after each restart; retried after the full backoff, which
# the restart's refused connections had grown meanwhile, a watch could come back up to
# 30 s later, and no new pod was seen in between.
RESTART_GRACE_S = 60.0
REFUSED = frozenset({401, 403})
HTTP_GONE = 410
HTTP_NOT_FOUND = 404

Handler = Callable[[str, Obj, Obj | None], None]
"""Called with (event type, object, previous object or None) for ADDED, MODIFIED and DELETED."""

Decoder = Callable[[bytes], tuple[Any, Any, Obj, Obj]]
"""One watch line read straight into (event type, resourceVersion, the object's projection,
its Status fields): what ``orjson.loads`` and the informer's ``slim`` make of it, in one pass
(``ksched._core.decode_pod_event`` for pods). A frame decoder reads one protobuf watch frame
into the same (``ksched._core.decode_pod_frame``)."""

ListDecoder = Callable[[bytes], tuple[list[Obj], Any, Any]]
"""One list page read into (its items' projections, its continue token, its resourceVersion)
(``ksched._core.decode_pod_list`` for pods)."""

# A protobuf watch's frames: each a 4-byte big-endian length, then that many bytes.
FRAME_HEADER = 4


class GoneError(Exception):
    """The resourceVersion is too old: relist."""


class AnsweredError(ApiUnavailableError):
    """The API server answered a list or watch with an error ``status`` (other than 410)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class Backoff:
    """Jittered exponential backoff (client-go's wait.Backoff shape)."""

    def __init__(self, initial: float = BACKOFF_INITIAL_S, maximum: float = BACKOFF_MAX_S) -> None:
        self.initial = initial
        self.maximum = maximum
        self.current = initial

    def next(self, limit: float = BACKOFF_MAX_S) -> float:
        """The next delay, at most ``limit``; the growth stops at ``limit`` too, so that the
        first error answered after a restart (a refused connection, retried every second)
        does not wait the backoff that the restart's retries would have grown."""
        delay = self.current * random.uniform(1.0, 1.5)
        self.current = min(self.current * 2, self.maximum, max(limit, self.initial))
        return min(delay, self.maximum, limit)

    def reset(self) -> None:
        self.current = self.initial


@dataclass(frozen=True)
class ListTiming:
    """Where one list's time went: answers read from the API server, decoded, and handed
    to the handler."""

    seconds: float
    request_s: float
    decode_s: float
    handlers_s: float
    # Pages read; a streamed list counts the objects it read instead.
    pages: int
    streamed: bool = False

    def __str__(self) -> str:
        if self.streamed:
            return (
                f"{self.seconds:.1f} s streamed ({self.pages} objects): {self.request_s:.1f} s waiting for the "
                f"API server, {self.decode_s:.1f} s decoding, {self.handlers_s:.1f} s indexing"
            )
        return (
            f"{self.seconds:.1f} s over {self.pages} page(s): {self.request_s:.1f} s reading the API server's "
            f"answers, {self.decode_s:.1f} s decoding, {self.handlers_s:.1f} s indexing"
        )


@dataclass
class _Listing:
    """A streamed list under way: the objects its initial events brought, and its time."""

    began: float
    items: dict[str, Obj]
    decode_s: float = 0.0


class Informer:
    """Keeps ``store`` equal to the API server's objects at ``path``; see the module note."""

    def __init__(
        self,
        kube: Kube,
        path: str,
        slim: Callable[[Obj], Obj],
        handler: Handler,
        *,
        name: str,
        field_selector: str | None = None,
        watch_timeout_s: int = WATCH_TIMEOUT_S,
        optional: bool = False,
        decode: Decoder | None = None,
        decode_frame: Decoder | None = None,
        decode_list: ListDecoder | None = None,
        decode_list_frame: ListDecoder | None = None,
        stream_list: bool = False,
    ) -> None:
        self.kube = kube
        self.path = path
        self.slim = slim
        self.handler = handler
        self.name = name
        self.field_selector = field_selector
        self.watch_timeout_s = watch_timeout_s
        # A resource that may not be installed (a CRD): 404 counts as synced and empty.
        self.optional = optional
        # Watch lines read by ``decode`` instead of parsed whole and projected by ``slim``.
        self.decode = decode
        # Watched as protobuf, each frame read by ``decode_frame``: a JSON watch makes the API
        # server encode every event as JSON for this watch alone (its other watchers, the
        # kubelet and kube-scheduler among them, take protobuf). Cleared, for JSON from then
        # on, when a frame cannot be read.
        self.decode_frame = decode_frame
        # List pages read by ``decode_list`` (items already projected) instead of parsed
        # whole and projected by ``slim``.
        self.decode_list = decode_list
        # Listed as protobuf, each page read by ``decode_list_frame``, as kube-scheduler lists:
        # the API server encodes a 150,000-pod list as JSON for this list alone. Cleared, for
        # JSON from then on, when a page cannot be read.
        self.decode_list_frame = decode_list_frame
        # Listed as a watch whose initial events are every object, ended by a bookmark
        # (KEP-3157's watch list), as kube-scheduler's informers list from v1.35: the API
        # server answers a paged list from its watch cache by copying every object after the
        # page's start, for each page (150,000 pods in 300 pages: 23.5 s of its answers), and a
        # stream reads each once. The projection must keep ``INITIAL_EVENTS_END``. Where the
        # API server refuses a stream, that list is paged (``_page_next``).
        self.stream_list = stream_list
        self._page_next = False
        self._listing: _Listing | None = None
        self.store: dict[str, Obj] = {}
        self.resource_version: str | None = None
        self.synced = threading.Event()
        self.relists = 0
        # The last list's timing (None: not listed yet).
        self.last_list: ListTiming | None = None
        self._stop = threading.Event()
        self._response: urllib3.BaseHTTPResponse | None = None
        # Held while the open watch's response is set, cleared or shut down, so that
        # ``stop`` never shuts down a response the watch thread has released.
        self._response_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"informer-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with self._response_lock:
            response = self._response
            if response is not None:
                try:
                    response.shutdown()
                except OSError as err:
                    # The server ended the watch and its socket closed in the meantime: the
                    # thread sees the stop flag and returns.
                    log.debug("%s: shutting down the watch: %s", self.name, err)
        self._thread.join(timeout=5)

    def _run(self) -> None:
        backoff = Backoff()
        unanswered = -RESTART_GRACE_S  # when the API server last did not answer, or was not ready
        while not self._stop.is_set():
            try:
                self._list_and_watch()
                backoff.reset()
            except GoneError:
                log.info("%s: resourceVersion %s expired, relisting", self.name, self.resource_version)
                self.resource_version = None
            except (ApiUnavailableError, urllib3.exceptions.HTTPError, OSError, ValueError) as err:
                if self._stop.is_set():
                    break
                if not_answering(err):
                    unanswered = time.monotonic()
                limit = retry_limit(err, recovering=time.monotonic() - unanswered < RESTART_GRACE_S)
                delay = backoff.next(limit)
                log.warning("%s: %s; retrying in %.1fs", self.name, err, delay)
                self._stop.wait(delay)

    def _list_and_watch(self) -> None:
        """List where no version is held (in pages where streaming is off, or the API server
        refused the last stream), then watch: a streamed list is the watch's start."""
        if self.resource_version is None and (self._page_next or not self.stream_list):
            self._relist()
            self._page_next = False
        self._watch()

    def _relist(self) -> None:
        items: dict[str, Obj] = {}
        cont: str | None = None
        began = time.monotonic()
        request_s = decode_s = 0.0
        pages = 0
        while True:
            sent = time.monotonic()
            r = self.kube.request(
                "GET",
                self.path,
                query={"limit": PAGE_SIZE, "continue": cont, "fieldSelector": self.field_selector},
                answer=PROTOBUF if self.decode_list_frame is not None else None,
            )
            if r.status == HTTP_GONE:
                # The continue token expired mid-list: start the list again.
                items, cont = {}, None
                continue
            if r.status == HTTP_NOT_FOUND and self.optional:
                if not self.synced.is_set():
                    log.warning(
                        "%s: %s is not served (CRD not installed?); retrying later", self.name, self.path
                    )
                    self.synced.set()
                raise AnsweredError(f"list {self.path}: not installed", r.status)
            if not r.ok:
                raise AnsweredError(f"list {self.path}: HTTP {r.status}: {r.data[:200]!r}", r.status)
            answered = time.monotonic()
            page, cont, listed_version = self._page(r.data)
            request_s += answered - sent
            decode_s += time.monotonic() - answered
            pages += 1
            for slim in page:
                self._held(items, object_key(slim), slim)
            if not cont:
                if listed_version is None:
                    raise ValueError(f"list {self.path}: a last page without a resourceVersion")
                version = str(listed_version)
                break
        handlers_s = self._replace(items, version)
        self.last_list = ListTiming(time.monotonic() - began, request_s, decode_s, handlers_s, pages)

    def _replace(self, items: dict[str, Obj], version: str) -> float:
        """The store becomes a list's ``items``, listed at ``version``: the differences go to
        the handler as events. Returns the seconds the handler took."""
        old, self.store = self.store, items
        indexing = time.monotonic()
        for key, obj in items.items():
            previous = old.get(key)
            if previous is None:
                self.handler("ADDED", obj, None)
            elif previous is not obj:
                self.handler("MODIFIED", obj, previous)
        for key, obj in old.items():
            if key not in items:
                self.handler("DELETED", obj, obj)
        self.resource_version = version
        self.relists += 1
        self.synced.set()
        return time.monotonic() - indexing

    def _held(self, items: dict[str, Obj], key: str, slim: Obj) -> None:
        """A listed object into ``items``: the one the store already holds where it compares
        equal, so that a relist never holds the cluster twice (150,000 pods: 625 MiB more)."""
        previous = self.store.get(key)
        items[key] = previous if previous == slim else slim

    def _page(self, data: bytes) -> tuple[list[Obj], Any, Any]:
        """A list page's objects (projected), its continue token and its resourceVersion."""
        if data.startswith(PROTOBUF_MAGIC) and self.decode_list_frame is not None:
            try:
                return self.decode_list_frame(data)
            except ValueError as err:
                # Asked again as JSON: the page's continue token is the same in either encoding.
                self.decode_list_frame = None
                raise ValueError(
                    f"list {self.path}: a protobuf page ksched cannot read ({err}); listing as JSON from now on"
                ) from None
        if self.decode_list is not None:
            try:
                return self.decode_list(data)
            except ValueError:
                pass  # nested deeper than the decoder reads, or not JSON: parsed (and reported) below
        body = orjson.loads(data)
        if not isinstance(body, dict):
            raise ValueError(f"list {self.path}: an answer that is not a JSON object")
        metadata = body.get("metadata") or {}
        return (
            [self.slim(obj) for obj in body.get("items") or []],
            metadata.get("continue"),
            metadata.get("resourceVersion"),
        )

    def _watch(self) -> None:
        """Watch from the resourceVersion held, or, with none held, stream the list first:
        every object as an initial event, at the API server's current version (a consistent
        read, as a list without a version is), then the changes."""
        listing = self.resource_version is None
        query: dict[str, Any] = {
            "watch": True,
            "resourceVersion": self.resource_version,
            "allowWatchBookmarks": True,
            "timeoutSeconds": self.watch_timeout_s,
            "fieldSelector": self.field_selector,
        }
        if listing:
            query.update(sendInitialEvents=True, resourceVersionMatch="NotOlderThan")
        # A streamed list's time counts from its request, as a paged list's does.
        began = time.monotonic()
        # The read timeout covers a watch that went silent without closing.
        response = self.kube.stream(
            self.path,
            query,
            timeout=self.watch_timeout_s + 30,
            content_type=PROTOBUF if self.decode_frame is not None else None,
        )
        with self._response_lock:
            if self._stop.is_set():
                response.release_conn()
                return
            self._response = response
        try:
            if response.status == HTTP_GONE:
                raise GoneError()
            if listing and response.status in STREAM_REFUSED:
                log.warning(
                    "%s: the API server does not stream lists (HTTP %d: %r); listing in pages",
                    self.name,
                    response.status,
                    response.data[:200],
                )
                self._page_next = True
                return
            if response.status != 200:
                raise AnsweredError(f"watch {self.path}: HTTP {response.status}", response.status)
            if listing:
                self._listing = _Listing(began, {})
            # A server (or proxy) without protobuf answers JSON.
            if (response.headers.get("Content-Type") or "").startswith(PROTOBUF):
                self._read_frames(response)
            else:
                self._read_lines(response)
        finally:
            # A stream that ended before its list did is read again from its start.
            self._listing = None
            with self._response_lock:
                self._response = None
            response.release_conn()

    def _read_lines(self, response: urllib3.BaseHTTPResponse) -> None:
        buffer = b""
        for chunk in response.stream(65536):
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line.strip():
                    self._line(line)
            if self._stop.is_set():
                return

    def _read_frames(self, response: urllib3.BaseHTTPResponse) -> None:
        buffer = b""
        for chunk in response.stream(65536):
            buffer = buffer + chunk if buffer else chunk
            start = 0
            while len(buffer) - start >= FRAME_HEADER:
                end = start + FRAME_HEADER + int.from_bytes(buffer[start : start + FRAME_HEADER], "big")
                if end > len(buffer):
                    break
                self._frame(buffer[start + FRAME_HEADER : end])
                start = end
            buffer = buffer[start:]
            if self._stop.is_set():
                return

    def _frame(self, frame: bytes) -> None:
        assert self.decode_frame is not None
        began = time.monotonic()
        try:
            kind, version, slim, status = self.decode_frame(frame)
        except ValueError as err:
            # The event is not applied and the version not advanced: the JSON watch that
            # follows starts from the last event read, this one included.
            self.decode_frame = None
            raise ApiUnavailableError(
                f"watch {self.path}: a protobuf event ksched cannot read ({err}); watching as JSON from now on"
            ) from None
        self._apply(kind, version, status, lambda: slim, began)

    def _line(self, line: bytes) -> None:
        began = time.monotonic()
        if self.decode is not None:
            try:
                kind, version, slim, status = self.decode(line)
            except ValueError:
                pass  # nested deeper than the decoder reads, or not JSON: parsed (and reported) below
            else:
                self._apply(kind, version, status, lambda: slim, began)
                return
        event = orjson.loads(line)
        if not isinstance(event, dict):
            raise ValueError(f"watch {self.path}: an event that is not a JSON object")
        obj = event.get("object") or {}
        version = (obj.get("metadata") or {}).get("resourceVersion")
        self._apply(event.get("type"), version, obj, lambda: self.slim(obj), began)

    def _apply(
        self, kind: Any, version: Any, status: Obj, slim_object: Callable[[], Obj], began: float
    ) -> None:
        """One event, read since ``began``: ``status`` is what an ERROR event's Status says,
        ``slim_object`` the object's projection."""
        if kind == "ERROR":
            code = status.get("code")
            if code == HTTP_GONE:
                raise GoneError()
            if self._listing is not None and code not in NOT_READY:
                # A stream the API server cannot serve: this list is paged (``STREAM_REFUSED``).
                self._page_next = True
            raise AnsweredError(
                f"watch {self.path}: {status.get('reason')}: {status.get('message')}",
                code if isinstance(code, int) else 0,
            )
        if self._listing is not None:
            self._listed(kind, version, slim_object(), began)
            return
        if kind == "BOOKMARK":
            self.resource_version = version or self.resource_version
            return
        slim = slim_object()
        key = object_key(slim)
        previous = self.store.get(key)
        if kind == "DELETED":
            self.store.pop(key, None)
            self.handler("DELETED", slim, previous)
        elif kind in ("ADDED", "MODIFIED"):
            self.store[key] = slim
            if previous is None:
                self.handler("ADDED", slim, None)
            elif previous != slim:
                self.handler("MODIFIED", slim, previous)
        self.resource_version = version or self.resource_version

    def _listed(self, kind: Any, version: Any, slim: Obj, began: float) -> None:
        """One event of a streamed list: an object into the list, or the bookmark that ends
        it, which replaces the store (as a paged list does) and sets the version the watch
        goes on from."""
        listing = self._listing
        assert listing is not None
        if kind == "BOOKMARK":
            if ((slim.get("metadata") or {}).get("annotations") or {}).get(INITIAL_EVENTS_END) != "true":
                return
            if not version:
                raise ValueError(f"watch {self.path}: the end of a streamed list without a resourceVersion")
            self._listing = None
            handlers_s = self._replace(listing.items, str(version))
            seconds = time.monotonic() - listing.began
            self.last_list = ListTiming(
                seconds,
                max(seconds - listing.decode_s - handlers_s, 0.0),
                listing.decode_s,
                handlers_s,
                len(listing.items),
                streamed=True,
            )
            return
        key = object_key(slim)
        if kind == "DELETED":
            listing.items.pop(key, None)
        elif kind in ("ADDED", "MODIFIED"):
            self._held(listing.items, key, slim)
        listing.decode_s += time.monotonic() - began


def not_answering(err: Exception) -> bool:
    """Whether ``err`` says the API server did not answer, or answered that it is not ready
    (an answer ksched cannot read is neither)."""
    if isinstance(err, AnsweredError):
        return err.status in NOT_READY
    return not isinstance(err, ValueError)


def retry_limit(err: Exception, recovering: bool = False) -> float:
    """The longest wait before retrying after ``err``: short while the API server does not
    answer or is not ready (``recovering``: it did not answer lately, and a refusal is its
    restart's), the full backoff after any other answer."""
    refused = isinstance(err, AnsweredError) and err.status in REFUSED
    return RECONNECT_MAX_S if not_answering(err) or (recovering and refused) else BACKOFF_MAX_S
