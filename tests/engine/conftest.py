"""Session fixtures for the engine tests: the real SmolLM2 model, loaded once per dtype."""

from __future__ import annotations

from typing import NamedTuple

import pytest
import torch

from engine.model import LlamaModel
from engine.model_config import ModelConfig
from engine.tokenizer import Tokenizer
from engine.weights import default_model_path, load_model


class LoadedModel(NamedTuple):
    model: LlamaModel
    tokenizer: Tokenizer
    config: ModelConfig


@pytest.fixture(scope="session")
def smollm_path() -> str:
    return default_model_path()


@pytest.fixture(scope="session")
def smollm_fp32(smollm_path: str) -> LoadedModel:
    """SmolLM2-135M-Instruct (GGUF) in float32 on the CPU."""
    return LoadedModel(*load_model(smollm_path, dtype="float32", device="cpu"))


@pytest.fixture(scope="session")
def smollm_bf16(smollm_path: str) -> LoadedModel:
    """SmolLM2-135M-Instruct (GGUF) in bfloat16 on the CPU."""
    return LoadedModel(*load_model(smollm_path, dtype=torch.bfloat16, device="cpu"))


@pytest.fixture(scope="session")
def smollm_tokenizer(smollm_fp32: LoadedModel) -> Tokenizer:
    return smollm_fp32.tokenizer
