"""`POST /v1/completions` (and `/r/{route}/v1/completions`): legacy text completions."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from engine.protocol import CompletionRequest
from gateway.auth import require_tenant
from gateway.deps import build_context, parse_body
from gateway.responses import respond

router = APIRouter(tags=["completions"])


@router.post("/v1/completions")
@router.post("/r/{route_name}/v1/completions")
async def completions(request: Request, route_name: str | None = None,
                      tenant: str | None = Depends(require_tenant)) -> Response:
    body = await parse_body(request, CompletionRequest)
    ctx = build_context(request, "completion", body, route_name, tenant)
    return await respond(request, ctx)
