"""Shared fixtures for prompts/ tests: the bundled engine's real tokenizer (no model load)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def engine_tokenizer():
    """SmolLM2's tokenizer and chat template, read from the GGUF's metadata."""
    from engine.weights import default_model_path
    from engine.weights.gguf_loader import GGUFCheckpoint
    from engine.weights.gguf_tokenizer import tokenizer_from_gguf_metadata

    return tokenizer_from_gguf_metadata(GGUFCheckpoint(default_model_path()).metadata)


@pytest.fixture(scope="session")
def engine_counter(engine_tokenizer):
    from prompts.tokens import EngineTokenCounter

    return EngineTokenCounter(engine_tokenizer)
