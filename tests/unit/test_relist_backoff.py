"""The informer's retry wait: held to a second while the API server does not answer or says it
is not ready (a restart), the full doubling backoff after any other error answer."""

from __future__ import annotations

import pytest
import urllib3

from ksched.loop.client import ApiUnavailableError
from ksched.loop.mirror.informer import (
    BACKOFF_MAX_S,
    RECONNECT_MAX_S,
    AnsweredError,
    Backoff,
    retry_limit,
)

CASES = [
    ("connection refused", ApiUnavailableError("GET /api/v1/pods (watch): refused"), RECONNECT_MAX_S),
    ("stream cut", urllib3.exceptions.ProtocolError("Response ended prematurely"), RECONNECT_MAX_S),
    ("socket error", ConnectionResetError(), RECONNECT_MAX_S),
    ("watch cache initializing", AnsweredError("watch: HTTP 429", 429), RECONNECT_MAX_S),
    ("unavailable", AnsweredError("list: HTTP 503", 503), RECONNECT_MAX_S),
    ("not installed", AnsweredError("list: not installed", 404), BACKOFF_MAX_S),
    ("forbidden", AnsweredError("list: HTTP 403", 403), BACKOFF_MAX_S),
    ("internal error event", AnsweredError("watch: InternalError", 500), BACKOFF_MAX_S),
    ("unreadable answer", ValueError("not JSON"), BACKOFF_MAX_S),
]


@pytest.mark.parametrize(("err", "want"), [(e, w) for _, e, w in CASES], ids=[n for n, _, _ in CASES])
def test_retry_limit(err: Exception, want: float) -> None:
    assert retry_limit(err) == want


def test_a_restart_is_retried_every_second_however_long_it_lasts() -> None:
    backoff = Backoff()
    delays = [backoff.next(RECONNECT_MAX_S) for _ in range(10)]
    assert max(delays) <= RECONNECT_MAX_S
    assert delays[-1] == RECONNECT_MAX_S
    # The growth stopped at the limit: the first error answered after the restart waits
    # about a second and doubles from there, not the 30 s the restart's retries would have grown.
    assert backoff.next() <= 1.5 * RECONNECT_MAX_S
    assert backoff.next() <= 3 * RECONNECT_MAX_S


def test_a_refusal_just_after_a_restart_is_retried_as_not_ready() -> None:
    forbidden = AnsweredError("watch: HTTP 403", 403)
    assert retry_limit(forbidden, recovering=True) == RECONNECT_MAX_S
    assert retry_limit(AnsweredError("list: HTTP 401", 401), recovering=True) == RECONNECT_MAX_S
    # Long after the API server last failed to answer, a refusal is the RBAC's: full backoff.
    assert retry_limit(forbidden) == BACKOFF_MAX_S
    # Recovering changes nothing for other answers.
    assert retry_limit(AnsweredError("list: not installed", 404), recovering=True) == BACKOFF_MAX_S


def test_the_full_backoff_still_doubles_to_its_maximum() -> None:
    backoff = Backoff()
    delays = [backoff.next() for _ in range(12)]
    assert delays[0] < 1.0
    assert delays[-1] == BACKOFF_MAX_S
