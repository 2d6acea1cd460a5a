"""A harness task that runs every few seconds on a thread of its own during a round.

Owns :class:`Periodic`: :meth:`~Periodic.tick` every ``every_s`` from :meth:`~Periodic.start`
to :meth:`~Periodic.stop` (a daemon thread: a harness that fails never waits on it). The
round's pod sampler (:class:`~.moves.Sampler`) and the ``/status`` poller
(:class:`~.estimates.StatusPoller`) are ones.
"""

from __future__ import annotations

import threading


class Periodic:
    def __init__(self, name: str, every_s: float) -> None:
        self.every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def tick(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.tick()
