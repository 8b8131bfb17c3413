"""Read a Hugging Face checkpoint folder: config.json and *.safetensors shards."""

from __future__ import annotations

import glob
import json
import os

import torch
from safetensors import safe_open
from safetensors.torch import load_file
from torch import Tensor

from engine.errors import ModelLoadError
from engine.model_config import ModelConfig

SUPPORTED_MODEL_TYPES = {"llama", "mistral", "qwen2"}


class SafetensorsCheckpoint:
    """A folder with config.json, one or more .safetensors files and tokenizer files."""

    def __init__(self, folder: str) -> None:
        config_path = os.path.join(folder, "config.json")
        if not os.path.exists(config_path):
            raise ModelLoadError(f"no config.json in {folder!r}")
        with open(config_path, encoding="utf-8") as f:
            self.hf_config = json.load(f)
        model_type = self.hf_config.get("model_type")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise ModelLoadError(f"unsupported model_type {model_type!r}")
        self.files = sorted(glob.glob(os.path.join(folder, "*.safetensors")))
        if not self.files:
            raise ModelLoadError(f"no .safetensors files in {folder!r}")
        self.folder = folder
        self.config = ModelConfig.from_hf_config(self.hf_config)
        names = self._tensor_names()
        self.config.attention_bias = any(n.endswith("self_attn.q_proj.bias") for n in names)
        self.config.tie_word_embeddings = "lm_head.weight" not in names
        self.config.eos_token_ids = list(dict.fromkeys(
            self.config.eos_token_ids + self._generation_eos_ids()))

    def _tensor_names(self) -> set[str]:
        names: set[str] = set()
        for path in self.files:
            with safe_open(path, framework="pt") as f:
                names.update(f.keys())
        return names

    def _generation_eos_ids(self) -> list[int]:
        path = os.path.join(self.folder, "generation_config.json")
        if not os.path.exists(path):
            return []
        with open(path, encoding="utf-8") as f:
            eos = json.load(f).get("eos_token_id")
        return list(eos) if isinstance(eos, list) else [] if eos is None else [eos]

    def weights(self, dtype: torch.dtype) -> dict[str, Tensor]:
        """All tensors in `dtype`, on the CPU."""
        out: dict[str, Tensor] = {}
        for path in self.files:
            out.update({k: v.to(dtype) for k, v in load_file(path).items()})
        return out
