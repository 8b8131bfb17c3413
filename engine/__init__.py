"""The bundled LLM engine: paged KV cache with prefix reuse, continuous batching, chunked
prefill (see docs/internals.md).

This module is the engine's public interface: the gateway and the caches import these
names from `engine` and nothing from its modules. They load lazily, so importing one does
not pull in torch and the model code before it is needed.

- running a model: `EngineConfig`, `AsyncEngine` (the step loop), `LLMEngine` (one step at
  a time, for scripts), `SamplingParams`, `GenerationDelta`, `EngineStats`;
- serving it over the OpenAI API: `OpenAIEngine` (requests in, chunks out),
  `EngineMetrics` (its Prometheus series), `serve_engine` (`headstart engine`);
- reading a model's prompts without running it: `load_tokenizer`, `Tokenizer`,
  `chat_prompt`, `default_model_path`;
- scoring tokens with the model (prompt pruning): `EngineModelScorer`;
- where KV blocks live, for a fleet's router: `hash_block`, `salt_root` and the KV events
  (`decode_batch`, `BlockStored`, `BlockRemoved`, `AllBlocksCleared`, `KVEvent`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.async_engine import AsyncEngine
    from engine.block_hash import hash_block, salt_root
    from engine.config import EngineConfig
    from engine.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent, decode_batch
    from engine.llm_engine import LLMEngine
    from engine.outputs import EngineStats, GenerationDelta
    from engine.sampling_params import SamplingParams
    from engine.serving.inputs import chat_prompt
    from engine.serving.metrics import EngineMetrics
    from engine.serving.openai_engine import OpenAIEngine
    from engine.serving.server import main as serve_engine
    from engine.token_scorer import EngineModelScorer
    from engine.tokenizer import Tokenizer
    from engine.weights import default_model_path, load_tokenizer

_EXPORTS = {
    "AsyncEngine": "engine.async_engine",
    "EngineConfig": "engine.config",
    "EngineStats": "engine.outputs",
    "GenerationDelta": "engine.outputs",
    "LLMEngine": "engine.llm_engine",
    "SamplingParams": "engine.sampling_params",
    "OpenAIEngine": "engine.serving.openai_engine",
    "EngineMetrics": "engine.serving.metrics",
    "serve_engine": ("engine.serving.server", "main"),
    "load_tokenizer": "engine.weights",
    "default_model_path": "engine.weights",
    "Tokenizer": "engine.tokenizer",
    "chat_prompt": "engine.serving.inputs",
    "EngineModelScorer": "engine.token_scorer",
    "hash_block": "engine.block_manager",
    "salt_root": "engine.block_manager",
    "decode_batch": "engine.kv_events",
    "BlockStored": "engine.kv_events",
    "BlockRemoved": "engine.kv_events",
    "AllBlocksCleared": "engine.kv_events",
    "KVEvent": "engine.kv_events",
}

__all__ = [
    "AllBlocksCleared", "AsyncEngine", "BlockRemoved", "BlockStored", "EngineConfig",
    "EngineMetrics", "EngineModelScorer", "EngineStats", "GenerationDelta", "KVEvent",
    "LLMEngine", "OpenAIEngine", "SamplingParams", "Tokenizer", "chat_prompt", "decode_batch",
    "default_model_path", "hash_block", "load_tokenizer", "salt_root", "serve_engine",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    where = _EXPORTS[name]
    module, attr = where if isinstance(where, tuple) else (where, name)
    return getattr(importlib.import_module(module), attr)
