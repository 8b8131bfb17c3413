"""`POST /v1/chat/completions` (and `/r/{route}/v1/chat/completions`), streaming or not."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from engine.protocol import ChatCompletionRequest
from gateway.auth import require_tenant
from gateway.deps import build_context, parse_body
from gateway.responses import respond

router = APIRouter(tags=["chat"])


@router.post("/v1/chat/completions")
@router.post("/r/{route_name}/v1/chat/completions")
async def chat_completions(request: Request, route_name: str | None = None,
                           tenant: str | None = Depends(require_tenant)) -> Response:
    body = await parse_body(request, ChatCompletionRequest)
    ctx = build_context(request, "chat", body, route_name, tenant)
    return await respond(request, ctx)
