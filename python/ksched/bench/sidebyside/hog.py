"""A busy control plane: processes that spin on a core each while the schedulers are measured.

A scheduler on a real control-plane node shares its cores with the API server, etcd and
whatever else runs there; ``--cpu-hog CORES`` keeps that condition in the bench. Owns
starting the spinners and stopping them, through
:func:`ksched.cluster.processes.terminate`, when the context ends, however it ends (an error,
Ctrl-C, or SIGTERM, which the command line turns into KeyboardInterrupt). A spinner also
exits by itself once its parent is gone, so not even a SIGKILLed bench leaves one behind.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

from ksched.cluster.processes import terminate

# Spin in slices of a few milliseconds, checking between them whether the bench that started
# the spinner (its pid given as the argument: it may be gone before the spinner's first line)
# is still its parent.
_SPIN = (
    "import os, sys\nwhile os.getppid() == int(sys.argv[1]):\n    for _ in range(100_000):\n        pass\n"
)
STOP_TIMEOUT_S = 5.0


@contextlib.contextmanager
def cpu_hog(cores: int) -> Iterator[list[int]]:
    """``cores`` processes spinning at 100 % of a core each, for the body; yields their pids."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(cores):
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", _SPIN, str(os.getpid())],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                )
            )
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            terminate(p, STOP_TIMEOUT_S)
