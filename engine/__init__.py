"""The bundled LLM engine: paged KV cache with prefix reuse, continuous batching, chunked
prefill (see docs/internals.md).

The public names load lazily, so `import engine.protocol` (the gateway's wire types) does
not pull in torch and the model code.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.async_engine import AsyncEngine
    from engine.config import EngineConfig
    from engine.llm_engine import LLMEngine
    from engine.outputs import EngineStats, GenerationDelta
    from engine.sampling_params import SamplingParams

_EXPORTS = {
    "AsyncEngine": "engine.async_engine",
    "EngineConfig": "engine.config",
    "EngineStats": "engine.outputs",
    "GenerationDelta": "engine.outputs",
    "LLMEngine": "engine.llm_engine",
    "SamplingParams": "engine.sampling_params",
}

__all__ = ["AsyncEngine", "EngineConfig", "EngineStats", "GenerationDelta", "LLMEngine",
           "SamplingParams"]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
