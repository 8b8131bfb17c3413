"""`GET /v1/models`: the model names the routes serve (`/r/{route}/v1/models`: one route's)."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from gateway.auth import require_tenant
from gateway.deps import RoutesDep
from openai_api import ModelCard, ModelList

router = APIRouter(tags=["models"])


@router.get("/v1/models", dependencies=[Depends(require_tenant)])
@router.get("/r/{route_name}/v1/models", dependencies=[Depends(require_tenant)])
async def list_models(routes: RoutesDep, route_name: str | None = None) -> ModelList:
    names = routes.model_names(route_name)
    return ModelList(data=[ModelCard(id=name) for name in names])


@router.get("/v1/models/{model_id}", dependencies=[Depends(require_tenant)])
async def get_model(routes: RoutesDep, model_id: str) -> ModelCard:
    routes.resolve(model_id)  # 404 when no route serves it
    return ModelCard(id=model_id)
