"""The integration tests' log reading: a refused request is told from a number that only looks
like one (CI failed once on a log line written at 02:54:38.403)."""

from __future__ import annotations

import pytest

from tests.integration.helpers import refused


@pytest.mark.parametrize(
    ("log", "want"),
    [
        ("2026-11-30T02:54:38.403 INFO ksched.loop.run: node table built", False),
        ("informers synced 0.403 s after the process started", False),
        ("serving on http://127.0.0.1:40373", False),
        ("steering: reading node n0: HTTP 403: nodes is forbidden", True),
        ("binding failed (403)", True),
        ("Reason: Forbidden", True),
    ],
)
def test_a_refusal_is_told_from_a_time_or_a_port(log: str, want: bool) -> None:
    assert refused(log) is want
