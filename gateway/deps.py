"""The typed dependencies the routers take.

The gateway's parts live on `app.state` (set by `gateway/app.py`); the providers at the end
of this file read them there (and `gateway/auth.py`'s `require_tenant` / `require_admin` the
authenticator). Routers take the typed aliases (`routes: RoutesDep`), so the types are
checked and a test can swap a part with `app.dependency_overrides[get_routes] = ...`.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends
from starlette.requests import HTTPConnection

from gateway.auth import Authenticator, require_tenant
from gateway.cache_stage import CacheStage
from gateway.config import GatewayConfig
from gateway.dashboard.access import check_dashboard_access
from gateway.dashboard.data import DashboardFeed
from gateway.metrics import GatewayMetrics
from gateway.pipeline import Pipeline
from gateway.rate_limit import RateLimiter
from gateway.response_store import ResponseStore
from gateway.routing import RouteTable

# ---------------------------------------------------------------- typed dependencies
# One provider per part of the gateway; FastAPI resolves each once per request. The parts
# are created by `create_app` (config, routes, auth, metrics) or by the lifespan before the
# first request (cache, pipeline).


def get_config(conn: HTTPConnection) -> GatewayConfig:
    return conn.app.state.config


def get_routes(conn: HTTPConnection) -> RouteTable:
    return conn.app.state.routes


def get_auth(conn: HTTPConnection) -> Authenticator:
    return conn.app.state.auth


def get_metrics(conn: HTTPConnection) -> GatewayMetrics:
    return conn.app.state.metrics


def get_cache_stage(conn: HTTPConnection) -> CacheStage:
    return conn.app.state.cache


def get_pipeline(conn: HTTPConnection) -> Pipeline:
    return conn.app.state.pipeline


def get_rate_limits(conn: HTTPConnection) -> RateLimiter:
    return conn.app.state.rate_limits


def get_response_store(conn: HTTPConnection) -> ResponseStore:
    return conn.app.state.responses


ConfigDep = Annotated[GatewayConfig, Depends(get_config)]
RoutesDep = Annotated[RouteTable, Depends(get_routes)]
AuthDep = Annotated[Authenticator, Depends(get_auth)]
MetricsDep = Annotated[GatewayMetrics, Depends(get_metrics)]
CacheStageDep = Annotated[CacheStage, Depends(get_cache_stage)]
PipelineDep = Annotated[Pipeline, Depends(get_pipeline)]
RateLimitsDep = Annotated[RateLimiter, Depends(get_rate_limits)]
ResponseStoreDep = Annotated[ResponseStore, Depends(get_response_store)]
TenantDep = Annotated[str | None, Depends(require_tenant)]  # the caller's; 401 without a key


def dashboard_access(conn: HTTPConnection, auth: AuthDep) -> None:
    """The admin key, from a header or the dashboard's session cookie (401/403 otherwise)."""
    check_dashboard_access(conn, auth)


def dashboard_feed(conn: HTTPConnection) -> DashboardFeed:
    return conn.app.state.dashboard


DashboardAccess = Annotated[None, Depends(dashboard_access)]
DashboardData = Annotated[DashboardFeed, Depends(dashboard_feed)]
