"""API keys and tenants: who is calling, and which namespace their sessions, snapshots and
cached prefixes live in.

Each API key is a tenant. A request must carry ``Authorization: Bearer KEY`` (as the OpenAI
client sends it) when keys are configured; without one, or with a wrong one, the answer is 401
with an OpenAI-style error object. ``/health`` stays open, ``/metrics`` too when asked for.
Keys are compared in constant time (digests with :func:`hmac.compare_digest`, every key tried).

A tenant's ``session_id`` values, snapshot names and radix-tree prefixes are its own: another
tenant's ``session_id`` of the same spelling is another session, and the tenant's salt
(``engine.history.Salt``) keeps its cached prefixes out of reach of other tenants, so
``cached_tokens`` never tells one tenant anything about another's prompts. A trusted set of
tenants may share one cache namespace (``shared``). Without any key the server has one
anonymous tenant and behaves as before tenants existed (no salt, the snapshot dir itself).

Key entries are ``KEY`` or ``NAME:KEY`` (``NAME``: letters, digits, ``_``, ``-``; at most 64);
an unnamed key's tenant is called ``key-`` and the first 12 hex digits of the key's SHA-256.
This module is not a user database: keys live in flags, a file or ``AKV_API_KEYS``.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import logging
import re
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import AKVError
from engine.files import read_text

log = logging.getLogger("akv.server")

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
OPEN_PATHS = frozenset({"/health"})


@dataclass(frozen=True)
class Tenant:
    """One caller's namespace.

    Attributes:
        name: the tenant's name (a directory name under the snapshot dir when ``keyed``).
        salt: the radix-tree namespace (``None``: the shared, unsalted one).
        keyed: whether the tenant came from an API key (the anonymous tenant did not).
    """

    name: str
    salt: str | None
    keyed: bool

    def session_key(self, session_id: str | None) -> str | None:
        """The server-wide key of this tenant's ``session_id`` (the anonymous tenant's is unchanged)."""
        if session_id is None or not self.keyed:
            return session_id
        return f"{self.name}/{session_id}"


ANONYMOUS = Tenant("anonymous", None, keyed=False)


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def parse_key_entry(entry: str) -> tuple[str, str]:
    """``KEY`` or ``NAME:KEY`` -> (name, key); raises :class:`AKVError` naming the entry's name."""
    entry = entry.strip()
    name, sep, key = entry.partition(":")
    if not sep or _NAME.fullmatch(name) is None:
        name, key = "", entry
    if not key or any(c.isspace() for c in key):
        raise AKVError(f"API key{' of ' + repr(name) if name else ''}: must be non-empty, without spaces",
                       field="api_keys", value=name or None)
    return name or f"key-{hashlib.sha256(key.encode()).hexdigest()[:12]}", key


def read_keys_file(path: str | Path) -> list[str]:
    """Key entries of a file: one per line; blank lines and lines starting with ``#`` are skipped."""
    text = read_text(path, "--api-keys-file")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


class Tenants:
    """The configured API keys and their tenants.

    Args:
        entries: key entries (``KEY`` or ``NAME:KEY``); none: one anonymous tenant, no auth.
        shared: names of tenants that share one cache namespace (trusted with each other).
        public_metrics: serve ``/metrics`` without a key.

    Raises:
        AKVError: a malformed entry, a repeated key or name, or a shared name that no key has.
    """

    def __init__(self, entries: Iterable[str] = (), *, shared: Iterable[str] = (), public_metrics: bool = False):
        self.public_metrics = public_metrics
        self._keys: list[tuple[bytes, Tenant]] = []
        names: set[str] = set()
        shared = set(shared)
        for entry in entries:
            name, key = parse_key_entry(entry)
            digest = _digest(key)
            if name in names or any(hmac.compare_digest(digest, d) for d, _ in self._keys):
                raise AKVError(f"API keys: tenant {name!r} or its key is given twice", field="api_keys", value=name)
            names.add(name)
            self._keys.append((digest, Tenant(name, None if name in shared else name, keyed=True)))
        unknown = sorted(shared - names)
        if unknown:
            raise AKVError(f"--shared-cache-tenants names tenants without a key: {', '.join(unknown)} (tenants: "
                           f"{', '.join(sorted(names)) or 'none'})", field="shared_cache_tenants", value=unknown)

    @property
    def keyed(self) -> bool:
        """Whether API keys are required."""
        return bool(self._keys)

    @property
    def names(self) -> list[str]:
        return [t.name for _, t in self._keys]

    def authenticate(self, authorization: str | None) -> Tenant | None:
        """The tenant of an ``Authorization`` header value, or ``None`` when it names none.

        Without configured keys every caller is :data:`ANONYMOUS`.
        """
        if not self._keys:
            return ANONYMOUS
        scheme, _, token = (authorization or "").strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        digest = _digest(token.strip())
        found: Tenant | None = None
        for known, tenant in self._keys:  # every key is compared: the time does not say which matched
            if hmac.compare_digest(digest, known):
                found = tenant
        return found

    def needs_key(self, path: str) -> bool:
        if not self._keys or path in OPEN_PATHS:
            return False
        return not (self.public_metrics and path == "/metrics")


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def warn_if_open(tenants: Tenants, host: str) -> None:
    """Log a warning when a server without API keys binds to a non-loopback interface."""
    if not tenants.keyed and not is_loopback(host):
        log.warning("serving on %s without API keys: anyone who can reach it can use, read and overwrite every "
                    "session and snapshot (pass --api-key or --api-keys-file, or AKV_API_KEYS)", host)


Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]


class AuthMiddleware:
    """ASGI middleware: answers 401 without a valid key; otherwise puts the caller's
    :class:`Tenant` in ``request.state.tenant`` (``scope["state"]["tenant"]``)."""

    def __init__(self, app: ASGIApp, tenants: Tenants):
        self.app = app
        self.tenants = tenants

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Any]],
                       send: Callable[[Any], Awaitable[None]]) -> None:
        if scope["type"] not in ("http", "websocket"):  # lifespan
            await self.app(scope, receive, send)
            return
        header = None
        for k, v in scope.get("headers", ()):
            if k == b"authorization":
                header = v.decode("latin-1")
                break
        tenant = self.tenants.authenticate(header)
        if tenant is None:
            if not self.tenants.needs_key(scope.get("path", "")):
                tenant = ANONYMOUS  # an open route: it reads nothing of any tenant
            elif scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
                return
            else:
                await _unauthorized(send, "missing API key: send 'Authorization: Bearer KEY'" if header is None
                                    else "invalid API key")
                return
        scope.setdefault("state", {})["tenant"] = tenant
        await self.app(scope, receive, send)


async def _unauthorized(send: Callable[[Any], Awaitable[None]], message: str) -> None:
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error", "param": None,
                                 "code": "invalid_api_key"}}).encode()
    await send({"type": "http.response.start", "status": 401,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"www-authenticate", b'Bearer realm="akv"')]})
    await send({"type": "http.response.body", "body": body})


def tenant_of(state: Any) -> Tenant:
    """The tenant :class:`AuthMiddleware` put on a request's state (fails closed without one)."""
    tenant = getattr(state, "tenant", None)
    if not isinstance(tenant, Tenant):
        raise RuntimeError("no tenant on this request: the auth middleware is not installed")
    return tenant


def configure(keys: Iterable[str] = (), keys_file: str | Path | None = None, *, env_keys: Iterable[str] = (),
              shared: str | Iterable[str] = (), public_metrics: bool = False) -> Tenants:
    """The tenants of ``akv serve``: ``--api-key`` entries, then ``--api-keys-file``'s, then
    ``AKV_API_KEYS``'s; ``shared`` may be a comma-separated string (``--shared-cache-tenants``)."""
    entries = [*keys, *(read_keys_file(keys_file) if keys_file else []), *env_keys]
    names = [s.strip() for s in shared.split(",")] if isinstance(shared, str) else list(shared)
    return Tenants(entries, shared=[n for n in names if n], public_metrics=public_metrics)
