"""API keys → tenants, and the admin key that guards `/admin/*`.

Keys come from the config's `auth.keys` and from `HEADSTART_API_KEYS` ("key:tenant,..."). With
no keys at all the gateway is open and requests carry no tenant. The tenant travels with the
request (`RequestContext.tenant`) so the caches can partition by it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass

from fastapi import Request
from starlette.requests import HTTPConnection

from gateway.config import AuthConfig, RateLimits
from openai_api import APIError

ENV_KEYS = "HEADSTART_API_KEYS"


def presented_key(conn: HTTPConnection) -> str | None:
    """The key a client sent: `Authorization: Bearer K`, `x-api-key: K`, or `?api_key=K`
    (browsers cannot set headers on a WebSocket)."""
    return header_key(conn) or conn.query_params.get("api_key")


def header_key(conn: HTTPConnection) -> str | None:
    """The key sent in a header (`Authorization: Bearer K` or `x-api-key: K`), never the
    query string, which ends up in logs."""
    auth = conn.headers.get("authorization")
    if auth:
        scheme, _, token = auth.partition(" ")
        return token.strip() if scheme.lower() == "bearer" else auth.strip()
    return conn.headers.get("x-api-key")


def key_digest(key: str) -> bytes:
    """What the gateway keeps of an API key (and puts in Redis keys): its SHA-256."""
    return hashlib.sha256(key.encode()).digest()


@dataclass(frozen=True)
class Caller:
    """Who sent a request: the digest of its API key (never the key), its tenant, and the
    per-minute limits of the key and of the tenant (gateway/rate_limit.py)."""

    key_id: str  # hex digest of the key
    tenant: str
    key_limits: RateLimits
    tenant_limits: RateLimits


class Authenticator:
    """Checks API keys in constant time; knows the admin key. Keys are held as digests, so
    no raw key sits in memory past start (nor in a log line or Redis)."""

    def __init__(self, config: AuthConfig, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        keys: dict[str, str] = {k.key: k.tenant for k in config.keys}
        for item in env.get(ENV_KEYS, "").split(","):
            key, sep, tenant = item.strip().partition(":")
            if key and sep and tenant:
                keys[key] = tenant
        self.admin_key = config.admin_key
        limits = {k.key: RateLimits(rpm=k.rpm, tpm=k.tpm) for k in config.keys}
        self._callers = [(key_digest(key), Caller(key_digest(key).hex(), tenant,
                                                  limits.get(key, RateLimits()),
                                                  config.tenants.get(tenant, RateLimits())))
                         for key, tenant in keys.items()]

    @property
    def open(self) -> bool:
        return not self._callers

    def tenant_for(self, conn: HTTPConnection) -> str | None:
        """The caller's tenant; 401 when keys are configured and the key is missing/wrong."""
        caller = self.caller_for(conn)
        return None if caller is None else caller.tenant

    def caller_for(self, conn: HTTPConnection) -> Caller | None:
        """The caller (None on an open gateway); 401 when the key is missing or wrong. The
        presented key's digest is compared with every known one, in constant time each,
        without stopping at a match."""
        if self.open:
            return None
        key = presented_key(conn)
        if not key:
            raise APIError(401, "Missing API key: send `Authorization: Bearer <key>`",
                           code="missing_api_key")
        digest, found = key_digest(key), None
        for known, caller in self._callers:
            if hmac.compare_digest(known, digest):
                found = caller
        if found is None:
            raise APIError(401, "Incorrect API key provided", code="invalid_api_key")
        return found

    def check_admin(self, conn: HTTPConnection) -> None:
        """Admin calls need the admin key; an entirely open gateway (no keys, no admin key)
        leaves the admin API open too."""
        self.check_admin_key(presented_key(conn))

    def check_admin_key(self, key: str | None) -> None:
        """`check_admin` for a key however it came (401/403 as there)."""
        if self.admin_key is None:
            if self.open:
                return
            raise APIError(403, "The admin API is disabled: set auth.admin_key",
                           code="admin_disabled")
        if not key or not hmac.compare_digest(self.admin_key.encode(), key.encode()):
            raise APIError(401, "Admin key required", code="invalid_admin_key")


def authenticator(conn: HTTPConnection) -> Authenticator:
    return conn.app.state.auth


async def require_tenant(request: Request) -> str | None:
    """FastAPI dependency: the caller's tenant (None on an open gateway)."""
    return authenticator(request).tenant_for(request)


async def require_admin(request: Request) -> None:
    """FastAPI dependency for `/admin/*` routes."""
    authenticator(request).check_admin(request)
