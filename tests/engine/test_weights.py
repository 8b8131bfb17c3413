"""Loaders: tiny random checkpoints written by transformers (safetensors) and by the gguf
writer (with llama.cpp's Q/K permutation), compared logit for logit with transformers."""

from __future__ import annotations

import json
import os

import gguf
import numpy as np
import pytest
import torch

from engine.errors import ModelLoadError
from engine.weights import default_model_path, load_model, resolve_dtype
from engine.weights.gguf_loader import GGUFCheckpoint, unpermute_qk
from tests.engine.conftest import prompt_logits

TEXT = ("A tiny model reads this sentence, which is long enough to pass the original context "
        "of the llama3 rope scaling and to fill several KV blocks of sixteen tokens each.")


@pytest.fixture(scope="module")
def smollm_metadata(smollm_path):
    return GGUFCheckpoint(smollm_path).metadata


def tiny_hf_model(kind: str, vocab_size: int = 49152):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    sizes = dict(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                 bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    if kind == "qwen2":
        return Qwen2ForCausalLM(Qwen2Config(**sizes, tie_word_embeddings=True)).eval()
    scaling = None
    if kind == "llama3":
        scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": 16,
                   "rope_theta": 500000.0}
    config = LlamaConfig(**sizes, rope_parameters=scaling, tie_word_embeddings=False)
    return LlamaForCausalLM(config).eval()


def write_tokenizer_files(folder: str, tokenizer) -> None:
    tokenizer.backend.save(os.path.join(folder, "tokenizer.json"))
    config = {"chat_template": tokenizer.chat_template, "bos_token": tokenizer.bos_token,
              "eos_token": tokenizer.eos_token, "add_bos_token": False}
    with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)


def hf_logits(model, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return model(torch.tensor([ids])).logits[0].float()


@pytest.mark.parametrize("kind", ["llama", "llama3", "qwen2"])
def test_safetensors_folder_matches_transformers(tmp_path, smollm_tokenizer, kind):
    hf = tiny_hf_model(kind)
    hf.save_pretrained(tmp_path)
    write_tokenizer_files(str(tmp_path), smollm_tokenizer)
    model, tok, config = load_model(str(tmp_path), dtype="float32", device="cpu")
    assert config.num_layers == 2 and config.num_kv_heads == 2
    assert config.attention_bias == (kind == "qwen2")
    assert config.tie_word_embeddings == (kind == "qwen2")
    assert (config.rope_scaling or {}).get("rope_type") == ("llama3" if kind == "llama3" else None)
    ids = tok.encode(TEXT)
    assert ids == smollm_tokenizer.encode(TEXT) and len(ids) > 32
    ref = hf_logits(hf, ids)
    assert (prompt_logits(model, ids) - ref).abs().max() < 1e-4
    assert (prompt_logits(model, ids, split=19) - ref).abs().max() < 1e-4


def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf.py's LlamaModel.permute, as llama.cpp applies it to Q and K."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def write_tiny_gguf(path: str, hf, source: dict) -> None:
    """The tiny HF Llama as llama.cpp would convert it (F32/F16 tensors, permuted Q/K), with
    SmolLM2's vocabulary cut to the model's size (and the merges that stay inside it)."""
    c = hf.config
    tokens = source["tokenizer.ggml.tokens"][:c.vocab_size]
    vocab = set(tokens)
    merges = [m for m in source["tokenizer.ggml.merges"]
              if m.replace(" ", "") in vocab and all(p in vocab for p in m.split(" "))]
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(c.num_hidden_layers)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_rope_dimension_count(c.head_dim)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types(source["tokenizer.ggml.token_type"][:c.vocab_size])
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_chat_template(source["tokenizer.chat_template"])
    names = {"embed_tokens": "token_embd", "norm": "output_norm", "input_layernorm": "attn_norm",
             "post_attention_layernorm": "ffn_norm", "q_proj": "attn_q", "k_proj": "attn_k",
             "v_proj": "attn_v", "o_proj": "attn_output", "gate_proj": "ffn_gate",
             "up_proj": "ffn_up", "down_proj": "ffn_down"}
    for name, tensor in hf.state_dict().items():
        array = tensor.float().numpy()
        parts = name.removeprefix("model.").removesuffix(".weight").split(".")
        if parts[0] == "lm_head":
            w.add_tensor("output.weight", array)
            continue
        gguf_name = names[parts[-1]]
        if parts[0] == "layers":
            gguf_name = f"blk.{parts[1]}.{gguf_name}"
        if parts[-1] == "q_proj":
            array = llama_cpp_permute(array, c.num_attention_heads)
        elif parts[-1] == "k_proj":
            array = llama_cpp_permute(array, c.num_key_value_heads)
        if parts[-1] == "down_proj":
            array = array.astype(np.float16)
        w.add_tensor(f"{gguf_name}.weight", array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_gguf_file_undoes_llama_cpp_permutation(tmp_path, smollm_metadata):
    hf = tiny_hf_model("llama", vocab_size=2048)
    for layer in hf.model.layers:  # F16 storage of down_proj must not change the reference
        layer.mlp.down_proj.weight.data = layer.mlp.down_proj.weight.data.half().float()
    path = str(tmp_path / "tiny.gguf")
    write_tiny_gguf(path, hf, smollm_metadata)
    model, tok, config = load_model(path, dtype="float32", device="cpu")
    assert not config.tie_word_embeddings and config.head_dim == 16
    assert config.vocab_size == 2048
    ids = tok.encode(TEXT)
    assert tok.decode(ids) == TEXT and len(ids) > 40
    ref = hf_logits(hf, ids)
    assert (prompt_logits(model, ids) - ref).abs().max() < 1e-4
    assert (prompt_logits(model, ids, split=33) - ref).abs().max() < 1e-4


def test_unpermute_inverts_permute():
    w = np.arange(8 * 6 * 3, dtype=np.float32).reshape(8 * 6, 3)
    assert np.array_equal(unpermute_qk(llama_cpp_permute(w, 6), 6), w)
    assert not np.array_equal(llama_cpp_permute(w, 6), w)


def test_real_gguf_metadata_gives_smollm_sizes(smollm_fp32):
    c = smollm_fp32.config
    assert (c.num_layers, c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim) == (
        30, 576, 9, 3, 64)
    assert (c.intermediate_size, c.vocab_size, c.max_position_embeddings) == (1536, 49152, 8192)
    assert c.rope_theta == 100000.0 and c.tie_word_embeddings and c.rope_scaling is None
    assert c.bos_token_id == 1 and 2 in c.eos_token_ids
    assert smollm_fp32.model.dtype == torch.float32


def test_auto_dtype_and_default_path():
    assert os.path.isfile(default_model_path())
    assert resolve_dtype("float32") == torch.float32
    assert resolve_dtype("auto", torch.device("cpu")) in (torch.bfloat16, torch.float32)
    with pytest.raises(ValueError):
        resolve_dtype("int3")


def test_bad_paths_raise_model_load_error(tmp_path):
    with pytest.raises(ModelLoadError):
        load_model(str(tmp_path / "missing.gguf"), dtype="float32", device="cpu")
    with pytest.raises(ModelLoadError):
        load_model(str(tmp_path), dtype="float32", device="cpu")  # a folder without config.json


def test_quant_blocks_dequantize_to_the_loaded_weights(smollm_path):
    """Q4_1 layers and the Q8_0 embedding, unpacked for the decode kernels, are exactly the
    weights the loader dequantises (Q/K rows unpermuted alike)."""
    from cpu_kernels.quant_blocks import Q4Blocks, Q8Blocks

    checkpoint = GGUFCheckpoint(smollm_path)
    blocks = checkpoint.quant_blocks()
    dense = checkpoint.weights(torch.float32)
    embed = blocks["model.embed_tokens.weight"]
    assert isinstance(embed, Q8Blocks) and embed.codes.dtype == np.int8
    assert np.array_equal(embed.dequantize(), dense["model.embed_tokens.weight"].numpy())
    for name in ("model.layers.0.self_attn.q_proj.weight", "model.layers.29.mlp.down_proj.weight"):
        q4 = blocks[name]
        assert isinstance(q4, Q4Blocks) and int(q4.codes.max()) <= 15
        np.testing.assert_allclose(q4.dequantize(), dense[name].numpy(), rtol=0, atol=1e-6)
