"""Watching binds: when each pod was first seen bound (and written), taken on receipt."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import orjson

from ksched.loop.client import ApiUnavailableError, Kube, load_configuration
from ksched.objects import Obj


class FirstSeen:
    """Records when each pod of a namespace is first seen by a watch (monotonic clock, on receipt).

    Two are used per phase: pods with ``spec.nodeName`` set (the bind), and core/v1 events
    with reason ``Scheduled`` (the event each scheduler must post; events.k8s.io events show
    there too), keyed by the pod they are about."""

    def __init__(
        self,
        kubeconfig: str,
        namespace: str,
        resource: str,
        field_selector: str,
        pod_of: Callable[[Obj], str],
    ):
        self.kube = Kube(load_configuration(kubeconfig, 2))
        self.path = f"/api/v1/namespaces/{namespace}/{resource}"
        self.field_selector = field_selector
        # The name of the pod an object of the watch is about ("" for one to pass over).
        self.pod_of = pod_of
        self.seen: dict[str, float] = {}
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self._stop = threading.Event()
        self._response: Any = None
        listing = self.kube.request("GET", self.path, query={"limit": 1}).json()
        self.resource_version = listing["metadata"]["resourceVersion"]
        self.thread = threading.Thread(target=self._run, name=f"watch-{namespace}-{resource}", daemon=True)
        self.thread.start()

    @classmethod
    def binds(cls, kubeconfig: str, namespace: str) -> FirstSeen:
        def bound(pod: Obj) -> str:
            return (
                str((pod.get("metadata") or {}).get("name", ""))
                if (pod.get("spec") or {}).get("nodeName")
                else ""
            )

        return cls(kubeconfig, namespace, "pods", "spec.nodeName!=", bound)

    @classmethod
    def scheduled_events(cls, kubeconfig: str, namespace: str) -> FirstSeen:
        def about(event: Obj) -> str:
            return str((event.get("involvedObject") or {}).get("name", ""))

        return cls(kubeconfig, namespace, "events", "reason=Scheduled", about)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._watch()
            except Exception:  # a dropped watch (any transport error): watch again from the last version
                if self._stop.is_set():
                    return
                time.sleep(0.2)

    def _watch(self) -> None:
        query = {
            "watch": True,
            "resourceVersion": self.resource_version,
            "timeoutSeconds": 3600,
            "fieldSelector": self.field_selector,
        }
        response = self.kube.stream(self.path, query, timeout=3700)
        self._response = response
        try:
            if response.status != 200:
                raise ApiUnavailableError(f"watch: HTTP {response.status}")
            buffer = b""
            for chunk in response.stream(65536):
                now = time.monotonic()
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        self._event(orjson.loads(line), now)
                if self._stop.is_set():
                    return
        finally:
            response.release_conn()

    def _event(self, event: Obj, now: float) -> None:
        obj = event.get("object") or {}
        if event.get("type") == "ERROR":
            # 410 Gone: start again from now on; binds seen so far are kept.
            listing = self.kube.request("GET", self.path, query={"limit": 1}).json()
            self.resource_version = listing["metadata"]["resourceVersion"]
            raise ApiUnavailableError(f"watch: {obj.get('message')}")
        meta = obj.get("metadata") or {}
        self.resource_version = meta.get("resourceVersion", self.resource_version)
        if event.get("type") not in ("ADDED", "MODIFIED"):
            return
        name = self.pod_of(obj)
        if name:
            with self.changed:
                if name not in self.seen:
                    self.seen[name] = now
                    self.changed.notify_all()

    def wait(self, names: set[str], stall_s: float) -> bool:
        """Until every pod in ``names`` is seen (True) or none new came for ``stall_s``."""
        with self.changed:
            last, seen = time.monotonic(), -1
            while not names <= self.seen.keys():
                if len(self.seen) != seen:
                    last, seen = time.monotonic(), len(self.seen)
                if time.monotonic() - last > stall_s:
                    return False
                self.changed.wait(0.5)
        return True

    def close(self) -> None:
        self._stop.set()
        response = self._response
        if response is not None:
            with contextlib.suppress(Exception):
                response.shutdown()
        self.thread.join(5)
