"""Stopping a local component: a process is gone only when its last thread is."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from ksched.cluster.processes import alive, listening, threads_left

# The main thread leaves with pthread_exit while another thread sleeps on: the group leader
# is a zombie (as a Go program's is while its other threads exit) and the process lives on.
LEADER_LEAVES_FIRST = (
    "import ctypes, threading, time\n"
    "threading.Thread(target=time.sleep, args=(30,)).start()\n"
    "time.sleep(0.2)\n"
    "ctypes.CDLL(None).pthread_exit(None)\n"
)


def test_a_process_whose_leader_is_a_zombie_still_has_threads_left() -> None:
    proc = subprocess.Popen([sys.executable, "-c", LEADER_LEAVES_FIRST])
    try:
        deadline = time.monotonic() + 10
        while alive(proc.pid, os.path.basename(sys.executable)):
            assert time.monotonic() < deadline, "the main thread did not leave"
            time.sleep(0.05)
        assert threads_left(proc.pid), "its other thread still runs"
    finally:
        proc.kill()
        proc.wait()
    assert not threads_left(proc.pid)


def test_listening_says_whether_a_port_accepts_connections() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        assert not listening(port)
        s.listen()
        assert listening(port)
