"""Stopping an informer whose watch the server is closing at the same moment: the stop
returns, and ``ksched run``'s shutdown goes on to the HTTP server and the webhook."""

from __future__ import annotations

import errno
import threading
from collections.abc import Iterator
from typing import Any

from ksched.loop.mirror.informer import Informer
from ksched.loop.mirror.slim import slim_pod


class ClosedResponse:
    """A watch answer whose socket the watch thread already closed: shutting it down fails
    with EBADF, as urllib3's does once the connection is released."""

    status = 200

    def __init__(self, reading: threading.Event, release: threading.Event) -> None:
        self.headers: dict[str, str] = {}
        self.reading = reading
        self.release = release

    def stream(self, _amount: int) -> Iterator[bytes]:
        self.reading.set()
        self.release.wait(5)
        return iter(())

    def shutdown(self) -> None:
        raise OSError(errno.EBADF, "Bad file descriptor")

    def release_conn(self) -> None:
        pass


class OneWatch:
    def __init__(self) -> None:
        self.reading = threading.Event()
        self.release = threading.Event()

    def request(self, *_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("no list: the informer starts from a resourceVersion")

    def stream(self, *_args: Any, **_kwargs: Any) -> ClosedResponse:
        return ClosedResponse(self.reading, self.release)


def test_stop_returns_when_the_watch_socket_closed_under_it() -> None:
    kube = OneWatch()
    inf = Informer(kube, "/api/v1/pods", slim_pod, lambda *_: None, name="pods")  # type: ignore[arg-type]
    inf.resource_version = "1"
    inf.start()
    assert kube.reading.wait(5)
    inf.stop()  # raised OSError [Errno 9] before: the shutdown met a closed socket
    kube.release.set()
    inf._thread.join(5)
    assert not inf._thread.is_alive()
