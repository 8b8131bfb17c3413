"""The `cache_salt` a request carries to the engine: a prefix cache partitioned by tenant.

A tenant whose prompt meets another tenant's cached prefix gets its first token sooner, and
so learns that the other tenant sent that prompt (the timing side channel vLLM closes with
a per-request `cache_salt`). On a route with `kv_isolation: tenant` (the default when the
gateway has API keys) the salt is derived from the tenant, so each tenant's prefixes are
cached apart while one tenant's requests still share theirs; a client's own `cache_salt`
partitions further inside its tenant. The salt names no tenant: upstreams see a digest.
"""

from __future__ import annotations

import hashlib

from gateway.config import RouteConfig


def tenant_salt(tenant: str) -> str:
    """A stable, opaque salt for `tenant` (the same on every gateway replica)."""
    return hashlib.sha256(b"headstart-tenant\x1f" + tenant.encode()).hexdigest()[:32]


def cache_salt_for(route: RouteConfig, tenant: str | None, client_salt: str | None,
                   keyed: bool) -> str | None:
    """The salt to send upstream. `keyed`: the gateway has API keys, which makes `tenant`
    isolation the route's default."""
    mode = route.kv_isolation or ("tenant" if keyed else "none")
    if mode == "none" or tenant is None:
        return client_salt
    salt = tenant_salt(tenant)
    return f"{salt}:{client_salt}" if client_salt else salt
