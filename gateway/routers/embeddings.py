"""`POST /v1/embeddings`, served by the gateway's own all-MiniLM-L6-v2 (384 dimensions) —
the semantic cache loads it anyway. Any `model` name is answered by that one model."""

from __future__ import annotations

import base64
import inspect
from typing import Literal

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from gateway.auth import require_tenant
from gateway.deps import ConfigDep
from openai_api import APIError, parse_body

router = APIRouter(tags=["embeddings"])

MAX_INPUTS = 2048
DIMENSIONS = 384


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str
    input: str | list[str]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1)
    user: str | None = None

    def texts(self) -> list[str]:
        texts = [self.input] if isinstance(self.input, str) else list(self.input)
        if not texts:
            raise APIError(400, "input must not be empty", param="input")
        if len(texts) > MAX_INPUTS:
            raise APIError(400, f"at most {MAX_INPUTS} inputs per request", param="input")
        if any(not t for t in texts):
            raise APIError(400, "input strings must not be empty", param="input")
        return texts


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(BaseModel):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage


@router.post("/v1/embeddings", dependencies=[Depends(require_tenant)])
@router.post("/r/{route_name}/v1/embeddings", dependencies=[Depends(require_tenant)])
async def embeddings(request: Request, config: ConfigDep,
                     route_name: str | None = None) -> EmbeddingList:
    body = await parse_body(request, EmbeddingRequest, config.limits.max_body_bytes)
    texts = body.texts()
    if body.dimensions is not None and body.dimensions != DIMENSIONS:
        raise APIError(400, f"this embedding model has {DIMENSIONS} dimensions",
                       param="dimensions")
    from cache.embedder import Embedder  # loads the model on first use

    embedder = Embedder.shared()
    vectors = await embedder.embed(texts)
    tokens = embedder.count_tokens(texts)
    if inspect.isawaitable(tokens):
        tokens = await tokens
    data = []
    for i, vec in enumerate(vectors):
        if body.encoding_format == "base64":
            value: list[float] | str = base64.b64encode(vec.astype("<f4").tobytes()).decode()
        else:
            value = vec.tolist()
        data.append(Embedding(index=i, embedding=value))
    return EmbeddingList(data=data, model=body.model,
                         usage=EmbeddingUsage(prompt_tokens=tokens, total_tokens=tokens))
