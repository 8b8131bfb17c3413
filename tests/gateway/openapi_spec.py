"""The gateway's whole HTTP surface as an OpenAPI document, for the fuzzing tests.

The gateway serves no `/openapi.json` (and its generation endpoints are plain ASGI, outside
FastAPI's routing), so the document is put together here: FastAPI's own for its routers,
plus the request bodies that are read by hand, from the same pydantic models that
validate them. `model` and `route` are narrowed to the served names, so that valid cases
reach the engine and the caches instead of stopping at routing.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from gateway.routers.admin import CuratedEntry
from gateway.routers.embeddings import EmbeddingRequest
from openai_api import ChatCompletionRequest, CompletionRequest, ResponsesRequest

REF = "#/components/schemas/{model}"
# request headers the gateway reads, on every operation (so each one has inputs to vary)
HEADERS = ("x-request-id", "x-session-id", "x-cache-namespace", "cache-control")
BODIES: dict[str, type[BaseModel]] = {
    "/v1/chat/completions": ChatCompletionRequest,
    "/v1/completions": CompletionRequest,
    "/v1/responses": ResponsesRequest,
    "/v1/embeddings": EmbeddingRequest,
    "/admin/cache/entries": CuratedEntry,
}


def gateway_openapi(app: FastAPI, models: list[str], routes: list[str]) -> dict[str, Any]:
    """OpenAPI 3.1 for `app`: every router path, the generation endpoints (also as
    `/r/{route_name}/v1/...`), a JSON body schema for each endpoint that takes one, and the
    request headers the gateway reads."""
    spec = get_openapi(title="Headstart gateway", version="1", routes=app.routes)
    schemas = spec.setdefault("components", {}).setdefault("schemas", {})
    paths = spec["paths"]
    for path, model in BODIES.items():
        schema = model.model_json_schema(ref_template=REF)
        schemas.update(schema.pop("$defs", {}))
        if "model" in schema["properties"]:
            schema["properties"]["model"] = {"type": "string", "enum": models}
        if "route" in schema["properties"]:
            schema["properties"]["route"] = {"type": "string", "enum": routes}
        forms = [path] if path.startswith("/admin") else [path, "/r/{route_name}" + path]
        for form in forms:
            operation = paths.setdefault(form, {}).setdefault("post", {"responses": {
                "200": {"description": "the answer"}}})
            operation["requestBody"] = {"required": True, "content": {
                "application/json": {"schema": schema}}}
            if form.startswith("/r/"):
                operation["parameters"] = [{"name": "route_name", "in": "path",
                                            "required": True,
                                            "schema": {"type": "string", "enum": routes}}]
    for item in paths.values():
        for operation in item.values():
            operation.setdefault("parameters", []).extend(
                {"name": name, "in": "header", "required": False, "schema": {"type": "string"}}
                for name in HEADERS)
    return spec
