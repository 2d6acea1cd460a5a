"""Secure serving of ``ksched run``'s endpoint, as kube-scheduler serves its port 10259.

TLS with ``--tls-cert-file``/``--tls-private-key-file`` (read again for the next connection
when either file changes), else a certificate generated in memory at start. Who asks is
decided as k8s.io/apiserver's delegating authenticator and authorizer decide it, with the API
server as the authority:

- a client certificate signed by the client CA the API server publishes in ConfigMap
  kube-system/extension-apiserver-authentication (``client-ca-file``; read at start and every
  CLIENT_CA_REFRESH_S): the user is its CN, the groups its Os;
- else a bearer token, reviewed by a TokenReview; a token the API server does not know is 401;
- else ``system:anonymous`` in ``system:unauthenticated``.

Then ALWAYS_ALLOW_PATHS (the probes) and members of ALWAYS_ALLOW_GROUPS are let through, and
anything else is asked of the API server with a SubjectAccessReview for ``get`` on the path;
a refusal is 403 naming the user and path as upstream words it. Both reviews are cached for
10 s (upstream's defaults), in caches of bounded size. When the API server cannot be reached,
a token not in the cache is 401 and an authorization not in the cache is 500, as upstream
answers; the error is logged at most every ERROR_LOG_EVERY_S. Scheduling never waits on any
of this: it runs on the connection's own thread.

This module never answers a request itself: it gives :class:`~ksched.loop.server.HealthServer`
its TLS context and its gate.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from email.message import Message
from typing import Any

from cachetools import TTLCache

from ksched.loop.client import ApiUnavailableError, Kube
from ksched.loop.server import self_signed, tls_context

log = logging.getLogger(__name__)

# upstream's --authorization-always-allow-paths default: the kubelet's probes need no identity.
ALWAYS_ALLOW_PATHS = frozenset({"/healthz", "/readyz", "/livez"})
# upstream's AlwaysAllowGroups for delegated authorization: cluster admins skip the review.
ALWAYS_ALLOW_GROUPS = frozenset({"system:masters"})
# upstream's --authentication-token-webhook-cache-ttl (10 s), for accepted and rejected tokens
# alike: a client retrying a bad token costs the API server one review per 10 s, not one each.
TOKEN_CACHE_TTL_S = 10.0
# upstream's --authorization-webhook-cache-authorized-ttl and -unauthorized-ttl.
ALLOW_CACHE_TTL_S = 10.0
DENY_CACHE_TTL_S = 10.0
# Tokens and (user, path) decisions remembered: far more than the scrapers and operators of one
# scheduler, few enough that a flood of distinct tokens costs bounded memory.
CACHE_SIZE = 4096
# upstream's --authentication-token-webhook timeout and the authorizer's: 10 s.
REVIEW_TIMEOUT_S = 10.0
# A review failing on every request is said once per this, with the count of those not said.
ERROR_LOG_EVERY_S = 10.0
# The API server rotates its client CA rarely; a minute is how late a new one is trusted.
CLIENT_CA_REFRESH_S = 60.0
AUTH_CONFIGMAP = "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication"
AUTHENTICATED = "system:authenticated"


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


ANONYMOUS = User("system:anonymous", ("system:unauthenticated",))


class ReviewError(Exception):
    """A TokenReview or SubjectAccessReview got no answer (the API server down, or refusing)."""


@dataclass(frozen=True)
class ServingOptions:
    """How ``ksched run`` serves its endpoint: ``insecure`` (plain HTTP, anyone may read
    anything), or HTTPS with the certificate in ``cert_file``/``key_file`` (both None: one
    generated at start) and delegated authentication and authorization."""

    insecure: bool = False
    cert_file: str | None = None
    key_file: str | None = None


# kube-scheduler's default: HTTPS with a generated certificate, delegated authn and authz.
SECURE = ServingOptions()


def _status(code: int, reason: str, message: str) -> tuple[int, bytes]:
    """A refusal as the API server writes it: a ``Status`` object."""
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": {},
        "code": code,
    }
    return code, json.dumps(body).encode()


def certificate_user(peer: dict[str, Any]) -> User:
    """The user a verified client certificate names: CN, and the Os as groups."""
    rdns = [pair for rdn in peer.get("subject", ()) for pair in rdn]
    name = next((v for k, v in rdns if k == "commonName"), "")
    groups = tuple(v for k, v in rdns if k == "organizationName")
    return User(name, (*groups, AUTHENTICATED) if AUTHENTICATED not in groups else groups)


class _EveryFew:
    """A log line said at most once per ``every`` seconds, with the count of those not said."""

    def __init__(self, every: float, clock: Callable[[], float]) -> None:
        self.every, self.clock = every, clock
        self._last = -every
        self._quiet = 0
        self._lock = threading.Lock()

    def error(self, message: str, *args: object) -> None:
        with self._lock:
            now = self.clock()
            if now - self._last < self.every:
                self._quiet += 1
                return
            quiet, self._quiet, self._last = self._quiet, 0, now
        log.error(message + (f" (and {quiet} more since)" if quiet else ""), *args)


class DelegatedAuth:
    """Authentication by TokenReview or client certificate, authorization by SubjectAccessReview,
    both cached; :meth:`gate` is the :data:`~ksched.loop.server.Gate` of the endpoint."""

    def __init__(self, kube: Kube, clock: Callable[[], float] = time.monotonic) -> None:
        self.kube = kube
        # sha256 of a token -> its user, or None for a token the API server rejected.
        self._tokens: TTLCache[bytes, User | None] = TTLCache(CACHE_SIZE, TOKEN_CACHE_TTL_S, timer=clock)
        self._allowed: TTLCache[tuple[User, str], str] = TTLCache(CACHE_SIZE, ALLOW_CACHE_TTL_S, timer=clock)
        self._denied: TTLCache[tuple[User, str], str] = TTLCache(CACHE_SIZE, DENY_CACHE_TTL_S, timer=clock)
        self._lock = threading.Lock()
        self._errors = _EveryFew(ERROR_LOG_EVERY_S, clock)
        # Reviews sent, by kind: what the caches save is visible in tests and benchmarks.
        self.reviews = {"token": 0, "access": 0}

    def gate(self, path: str, headers: Message, peer: dict[str, Any] | None) -> tuple[int, bytes] | None:
        """None to answer the request, or the refusal: 401, 403, or 500 when a review failed."""
        try:
            user = self.authenticate(headers, peer)
        except ReviewError as err:
            self._errors.error("cannot authenticate a request for %s: %s", path, err)
            user = None
        if user is None:
            return _status(401, "Unauthorized", "Unauthorized")
        try:
            allowed, reason = self.authorize(user, path)
        except ReviewError as err:
            self._errors.error("cannot authorize %s for %s: %s", path, user.name, err)
            return 500, f"Internal Server Error: {json.dumps(path)}: {err}".encode()
        if allowed:
            return None
        message = f'forbidden: User "{user.name}" cannot get path "{path}"' + (
            f": {reason}" if reason else ""
        )
        return _status(403, "Forbidden", message)

    def authenticate(self, headers: Message, peer: dict[str, Any] | None) -> User | None:
        """The user a request is from: its client certificate's, its bearer token's (None for a
        token the API server does not accept), or anonymous without either."""
        if peer:
            return certificate_user(peer)
        scheme, _, token = (headers.get("Authorization") or "").strip().partition(" ")
        if scheme.lower() != "bearer":
            return ANONYMOUS
        token = token.strip()
        if not token:
            return None
        key = hashlib.sha256(token.encode()).digest()
        with self._lock:
            if key in self._tokens:
                return self._tokens[key]
        user = self._token_review(token)
        with self._lock:
            self._tokens[key] = user
        return user

    def authorize(self, user: User, path: str) -> tuple[bool, str]:
        """Whether ``user`` may get ``path``, and the reason the authorizer gave."""
        if path in ALWAYS_ALLOW_PATHS or ALWAYS_ALLOW_GROUPS.intersection(user.groups):
            return True, ""
        key = (user, path)
        with self._lock:
            for cache, allowed in ((self._allowed, True), (self._denied, False)):
                if key in cache:
                    return allowed, cache[key]
        allowed, reason = self._access_review(user, path)
        with self._lock:
            (self._allowed if allowed else self._denied)[key] = reason
        return allowed, reason

    def _review(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            r = self.kube.request("POST", path, body=body, timeout=REVIEW_TIMEOUT_S)
        except ApiUnavailableError as err:
            raise ReviewError(str(err)) from None
        if not r.ok:
            raise ReviewError(f"{body['kind']}: HTTP {r.status}: {r.data[:200]!r}")
        status: dict[str, Any] = (r.json() or {}).get("status") or {}
        return status

    def _token_review(self, token: str) -> User | None:
        self.reviews["token"] += 1
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        status = self._review("/apis/authentication.k8s.io/v1/tokenreviews", body)
        if not status.get("authenticated"):
            return None
        u = status.get("user") or {}
        groups = tuple(u.get("groups") or ())
        extra = tuple(sorted((k, tuple(v)) for k, v in (u.get("extra") or {}).items()))
        return User(
            str(u.get("username", "")),
            groups if AUTHENTICATED in groups else (*groups, AUTHENTICATED),
            str(u.get("uid", "")),
            extra,
        )

    def _access_review(self, user: User, path: str) -> tuple[bool, str]:
        self.reviews["access"] += 1
        spec: dict[str, Any] = {
            "user": user.name,
            "groups": list(user.groups),
            "nonResourceAttributes": {"path": path, "verb": "get"},
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra}
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        status = self._review("/apis/authorization.k8s.io/v1/subjectaccessreviews", body)
        return bool(status.get("allowed")) and not status.get("denied"), str(status.get("reason", ""))


class ServingTls:
    """The TLS context of each new connection: the serving certificate (from files, read again
    when they change, or generated once) and, when the API server publishes one, the client CA
    a client certificate may be signed by (asked for, not required)."""

    def __init__(
        self, cert_file: str | None, key_file: str | None, client_ca: Callable[[], bytes | None]
    ) -> None:
        self.cert_file, self.key_file = cert_file, key_file
        self.client_ca = client_ca
        self._generated: tuple[bytes, bytes] | None = None
        if not cert_file:
            # As kube-scheduler without --tls-cert-file: a certificate for the loopback names.
            _, cert, key = self_signed(["localhost", "127.0.0.1", socket.gethostname()])
            self._generated = (cert, key)
        self._key: tuple[object, ...] | None = None
        self._context: ssl.SSLContext | None = None
        self._lock = threading.Lock()
        self()  # a certificate that cannot be read stops the start, not the first scrape

    def _files(self) -> tuple[object, ...]:
        assert self.cert_file and self.key_file
        return tuple(
            (s.st_mtime_ns, s.st_size, s.st_ino) for s in map(os.stat, (self.cert_file, self.key_file))
        )

    def __call__(self) -> ssl.SSLContext:
        client_ca = self.client_ca()
        with self._lock:
            try:
                key = (self._files() if self._generated is None else None, client_ca)
            except OSError as err:
                if self._context is None:
                    raise
                log.error("cannot read the serving certificate: %s; serving the one read before", err)
                return self._context
            if self._context is None or key != self._key:
                try:
                    self._context = self._build(client_ca)
                    self._key = key
                except (OSError, ssl.SSLError) as err:
                    if self._context is None:
                        raise
                    log.error("cannot load the serving certificate: %s; serving the one read before", err)
            return self._context

    def _build(self, client_ca: bytes | None) -> ssl.SSLContext:
        if self._generated is None:
            assert self.cert_file and self.key_file
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(self.cert_file, self.key_file)
        else:
            context = tls_context(*self._generated)
        if client_ca:
            context.load_verify_locations(cadata=client_ca.decode())
            context.verify_mode = ssl.CERT_OPTIONAL
        return context


class ClientCA:
    """The client CA the API server publishes (``client-ca-file`` of
    kube-system/extension-apiserver-authentication), read at start and every
    CLIENT_CA_REFRESH_S on a thread of its own; None while there is none to be read."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.pem: bytes | None = None
        self._stopped = threading.Event()
        self._said = ""

    def __call__(self) -> bytes | None:
        return self.pem

    def refresh(self) -> None:
        try:
            r = self.kube.request("GET", AUTH_CONFIGMAP, timeout=REVIEW_TIMEOUT_S)
        except ApiUnavailableError as err:
            self._say(f"cannot read the client CA yet: {err}")
            return
        if r.status == 404:
            self.pem = None
            self._say("the API server publishes no client CA: client certificates are not accepted")
            return
        if not r.ok:
            self._say(
                f"cannot read ConfigMap kube-system/extension-apiserver-authentication: HTTP {r.status} "
                "(ksched needs the extension-apiserver-authentication-reader Role, as in deploy/rbac.yaml)"
            )
            return
        ca = ((r.json() or {}).get("data") or {}).get("client-ca-file")
        self.pem = ca.encode() if ca else None
        self._say("client certificates signed by the API server's client CA are accepted" if ca else "")

    def _say(self, line: str) -> None:
        if line and line != self._said:
            log.info("secure serving: %s", line)
        self._said = line

    def start(self) -> None:
        self.refresh()
        threading.Thread(target=self._loop, name="client-ca", daemon=True).start()

    def _loop(self) -> None:
        while not self._stopped.wait(CLIENT_CA_REFRESH_S):
            self.refresh()

    def stop(self) -> None:
        self._stopped.set()
