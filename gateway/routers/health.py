"""`GET /health` (liveness + what is configured) and `GET /metrics` (Prometheus)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from gateway.deps import ConfigDep, MetricsDep
from gateway.metrics import CONTENT_TYPE

router = APIRouter(tags=["health"])


@router.get("/health")
async def health(config: ConfigDep) -> dict:
    return {
        "status": "ok",
        "routes": [r.name for r in config.routes],
        "upstreams": {name: up.kind for name, up in config.upstreams.items()},
        "engine": config.engine_upstream() is not None,  # loaded by the lifespan when set
    }


@router.get("/metrics")
async def metrics(gateway_metrics: MetricsDep) -> Response:
    return Response(gateway_metrics.render(), media_type=CONTENT_TYPE)
