"""Stored responses: `GET /v1/responses/{id}`, `DELETE /v1/responses/{id}` and
`GET /v1/responses/{id}/input_items` (and their `/r/{route}/v1/...` forms). A response is
visible to its own tenant only; any other id, or one past its TTL, is a 404. Responses are
not kept per route: `/r/{route}/...` reads the same ones. Creating one
(`POST /v1/responses`) is a generation endpoint (`gateway/generation.py`).
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Query

from gateway.deps import ResponseStoreDep, TenantDep
from gateway.response_store import ResponseStore, StoredResponse
from openai_api import APIError
from openai_api.responses import RESPONSE_ID
from openai_api.responses_objects import DeletedResponse, InputItemList, ResponseObject

router = APIRouter(tags=["responses"])


@router.get("/v1/responses/{response_id}")
@router.get("/r/{route_name}/v1/responses/{response_id}")
async def get_response(response_id: str, store: ResponseStoreDep, tenant: TenantDep,
                       route_name: str | None = None) -> ResponseObject:
    return (await _stored(store, tenant, response_id)).response


@router.delete("/v1/responses/{response_id}")
@router.delete("/r/{route_name}/v1/responses/{response_id}")
async def delete_response(response_id: str, store: ResponseStoreDep, tenant: TenantDep,
                          route_name: str | None = None) -> DeletedResponse:
    if not RESPONSE_ID.fullmatch(response_id) or not await store.delete(tenant, response_id):
        raise not_found(response_id)
    return DeletedResponse(id=response_id)


@router.get("/v1/responses/{response_id}/input_items")
@router.get("/r/{route_name}/v1/responses/{response_id}/input_items")
async def list_input_items(response_id: str, store: ResponseStoreDep, tenant: TenantDep,
                           limit: int = Query(default=20, ge=1, le=100),
                           order: Literal["asc", "desc"] = "desc",
                           after: str | None = None, route_name: str | None = None,
                           ) -> InputItemList:
    stored = await _stored(store, tenant, response_id)
    return InputItemList.page(stored.input_items, order=order, limit=limit, after=after)


async def _stored(store: ResponseStore, tenant: str | None, response_id: str) -> StoredResponse:
    found = await store.get(tenant, response_id) if RESPONSE_ID.fullmatch(response_id) else None
    if found is None:
        raise not_found(response_id)
    return found


def not_found(response_id: str) -> APIError:
    return APIError(404, f"No response found with id '{response_id}'.", param="response_id",
                    code="response_not_found")
