"""`GET /health` (liveness + what is configured) and `GET /metrics` (Prometheus)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from gateway.metrics import CONTENT_TYPE

router = APIRouter(tags=["health"])


@router.get("/health")
async def health(request: Request) -> dict:
    state = request.app.state
    return {
        "status": "ok",
        "routes": [r.name for r in state.config.routes],
        "upstreams": {name: up.kind for name, up in state.config.upstreams.items()},
        "engine": state.engine is not None,
    }


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    return Response(request.app.state.metrics.render(), media_type=CONTENT_TYPE)
