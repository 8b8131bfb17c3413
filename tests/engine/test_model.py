"""LlamaModel over the paged KV cache, on the real SmolLM2 weights.

Checks greedy output, that chunked prefill and batched decode give the same logits as one
plain pass, bf16 against fp32, and (slow) fp32 logits against Hugging Face transformers
loading the same GGUF file.
"""

from __future__ import annotations

import os

import pytest
import torch

from engine.layers import Linear
from engine.onednn_weight import bf16_pack_available
from tests.engine.conftest import PagedSequences, prompt_logits

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
    "Once upon a time, in a land far away, there lived a dragon who loved 42 kinds of tea. "
    "Every morning she would fly over the hills, count the sheep, greet the farmers by name "
    "and bring back fresh water from the mountain spring. One day a young knight arrived and",
]


def test_greedy_generation_answers(smollm_fp32):
    model, tok, _ = smollm_fp32
    prompt = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}])
    seqs = PagedSequences(model)
    logits = seqs.step({0: tok.encode(prompt)})[0]
    out = []
    for _ in range(8):
        out.append(int(logits[-1].argmax()))
        logits = seqs.step({0: out[-1:]})[0]
    assert "Paris" in tok.decode(out)


@pytest.mark.parametrize("split", [1, 21, 32, 40])
def test_chunked_prefill_matches_one_pass(smollm_fp32, split):
    model, tok, _ = smollm_fp32
    ids = tok.encode(PROMPTS[2])
    assert len(ids) > split + 2
    whole = prompt_logits(model, ids)
    chunked = prompt_logits(model, ids, split)
    assert (whole - chunked).abs().max() < 1e-3


def test_batched_step_matches_each_sequence_alone(smollm_fp32):
    model, tok, _ = smollm_fp32
    prompts = [tok.encode(p) for p in PROMPTS]
    alone = []
    for ids in prompts:
        seqs = PagedSequences(model)
        seqs.step({0: ids[:-1]})
        alone.append(seqs.step({0: ids[-1:]})[0])
    together = PagedSequences(model)
    together.step({0: prompts[0][:-1], 1: prompts[1][:-1]})
    # one step mixing two decodes of different lengths with a fresh prefill
    out = together.step({0: prompts[0][-1:], 1: prompts[1][-1:], 2: prompts[2]})
    assert (out[0] - alone[0]).abs().max() < 1e-3
    assert (out[1] - alone[1]).abs().max() < 1e-3
    assert (out[2][-1:] - alone[2]).abs().max() < 1e-3


def test_bf16_close_to_fp32(smollm_fp32, smollm_bf16):
    assert smollm_bf16.model.dtype == torch.bfloat16
    ids = smollm_fp32.tokenizer.encode(PROMPTS[2])
    ref = prompt_logits(smollm_fp32.model, ids)
    low = prompt_logits(smollm_bf16.model, ids)
    assert low.dtype == torch.float32
    agree = (ref.argmax(-1) == low.argmax(-1)).float().mean()
    assert agree >= 0.8
    assert (ref - low).abs().max() < 0.15 * ref.abs().max()


@pytest.fixture(scope="module")
def hf_gguf_model(smollm_path):
    from transformers import AutoModelForCausalLM

    folder, name = os.path.split(smollm_path)
    return AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).eval()


@pytest.mark.slow
@pytest.mark.parametrize("prompt", PROMPTS)
def test_fp32_logits_match_transformers_gguf(smollm_fp32, hf_gguf_model, prompt):
    ids = smollm_fp32.tokenizer.encode(prompt)
    with torch.inference_mode():
        ref = hf_gguf_model(torch.tensor([ids])).logits[0].float()
    scale = ref.abs().max()
    assert (prompt_logits(smollm_fp32.model, ids) - ref).abs().max() < 1e-4 * scale
    split = len(ids) // 2 + 1
    assert (prompt_logits(smollm_fp32.model, ids, split) - ref).abs().max() < 1e-4 * scale


def served_rows(copies) -> list[tuple[int, object]]:
    """(rows, copy) for every row count some decode copy serves, the copy that serves it."""
    out, low = [], 1
    for copy in copies:
        out += [(rows, copy) for rows in range(low, copy.max_rows + 1)]
        low = max(low, copy.max_rows + 1)
    return out


def test_bf16_packed_decode_matches_dense(smollm_bf16, smollm_fp32):
    """Few-row steps use packed copies of the Q4/Q8 weights; they must agree with the dense path."""
    torch.manual_seed(0)
    model = smollm_bf16.model
    qkv = model.layers[0].self_attn.qkv_proj
    assert qkv.decode_copies and model.lm_head_copies
    for rows, copy in served_rows(qkv.decode_copies):  # every row count a copy serves
        x = torch.randn(rows, model.config.hidden_size, dtype=torch.bfloat16)
        dense = torch.nn.functional.linear(x, qkv.weight).float()
        with torch.inference_mode():
            packed = qkv(x)
        assert torch.equal(packed, copy.weight.matmul(x))
        assert (packed.float() - dense).abs().max() < 0.02 * dense.abs().max()
    for rows, copy in served_rows(model.lm_head_copies):
        x = torch.randn(rows, model.config.hidden_size, dtype=torch.bfloat16)
        dense = torch.nn.functional.linear(x.float(), model.lm_head_weight.float())
        with torch.inference_mode():
            logits = model.compute_logits(x)
        assert torch.equal(logits, copy.weight.matmul(x).float())
        assert (logits - dense).abs().max() < 0.03 * dense.abs().max()
    ids = smollm_fp32.tokenizer.encode(PROMPTS[2])
    ref = PagedSequences(smollm_fp32.model)
    low = PagedSequences(model)
    ref.step({0: ids[:-1]})
    low.step({0: ids[:-1]})
    ref_logits, low_logits = ref.step({0: ids[-1:]})[0], low.step({0: ids[-1:]})[0]
    # float32's pick is among bf16's first three: the two paths round differently all the
    # way through 30 layers, and this prompt's top two lie 0.2 apart in float32
    assert ref_logits.argmax() in low_logits.flatten().topk(3).indices
    assert (ref_logits - low_logits).abs().max() < 0.15 * ref_logits.abs().max()


def test_bf16_multi_row_linears_use_prepacked_weights_bit_identically(smollm_bf16):
    """Multi-row bf16 steps of a linear without an int8 copy (and of the LM head) run on
    oneDNN-prepacked weights; results must not move at all."""
    model = smollm_bf16.model
    if not bf16_pack_available(model.lm_head_weight):
        pytest.skip("no oneDNN bf16 linear on this build")
    mlp = model.layers[3].mlp
    above = max(copy.most_rows for copy in mlp.gate_up_proj.decode_copies + model.lm_head_copies)
    int8, mlp.gate_up_proj.int8_weight = mlp.gate_up_proj.int8_weight, None
    try:
        for rows in (above + 1, above + 23):
            x = torch.randn(rows, model.config.hidden_size, dtype=torch.bfloat16)
            with torch.inference_mode():
                out = mlp.gate_up_proj(x)
                logits = model.compute_logits(x)
            assert mlp.gate_up_proj.packed_weight is not None
            assert torch.equal(out, torch.nn.functional.linear(x, mlp.gate_up_proj.weight))
            assert torch.equal(logits, torch.nn.functional.linear(x, model.lm_head_weight).float())
    finally:
        mlp.gate_up_proj.int8_weight = int8


def test_prepacked_weight_follows_an_in_place_reload():
    layer = Linear(32, 16, bias=True).to(torch.bfloat16)
    if not bf16_pack_available(layer.weight):
        pytest.skip("no oneDNN bf16 linear on this build")
    x = torch.randn(4, 32, dtype=torch.bfloat16)
    with torch.inference_mode():
        layer(x)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(16, 32))
    with torch.inference_mode():
        out = layer(x)
    assert torch.equal(out, torch.nn.functional.linear(x, layer.weight, layer.bias))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rope_matches_rotate_half_reference_exactly(dtype):
    from engine.layers import RotaryEmbedding, apply_rope, rope_inv_freq

    positions = torch.tensor([0, 5, 17, 4000])
    x = torch.randn(4, 3, 64).to(dtype)
    cos, sin = RotaryEmbedding(rope_inv_freq(64, 100000.0)).cos_sin(positions, dtype)
    angles = positions.float()[:, None] * rope_inv_freq(64, 100000.0)[None, :]
    angles = torch.cat((angles, angles), dim=-1)[:, None, :]
    ref_cos, ref_sin = angles.cos().to(dtype), angles.sin().to(dtype)
    rotated = torch.cat((-x[..., 32:], x[..., :32]), dim=-1)
    expected = x * ref_cos + rotated * ref_sin
    assert torch.equal(apply_rope(x.clone(), cos, sin), expected)  # fused kernel for 4 bf16 rows
    view = torch.cat((x, torch.zeros(4, 2, 64, dtype=dtype)), dim=1)[:, :3]  # strided, like qkv's
    assert torch.equal(apply_rope(view, cos, sin), expected)


@pytest.mark.parametrize("rows", [1, 8, 64, 2048])
def test_bf16_rms_norm_via_layer_norm_matches_rms_norm(rows):
    from engine.layers import RMSNorm

    norm = RMSNorm(576, 1e-5).to(torch.bfloat16)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(576))
    x = (torch.randn(rows, 576) * 3).to(torch.bfloat16)
    ref = torch.nn.functional.rms_norm(x, (576,), norm.weight, 1e-5)
    with torch.inference_mode():
        out = norm(x)
    assert out.is_contiguous() and out.dtype == torch.bfloat16
    torch.testing.assert_close(out, ref, rtol=2 ** -7, atol=2 ** -7)  # within one bf16 ulp
    if rows <= 64:
        assert (out != ref).float().mean() < 0.001
    with torch.no_grad():
        norm.weight.mul_(2)  # an in-place reload is picked up
    with torch.inference_mode():
        torch.testing.assert_close(norm(x), torch.nn.functional.rms_norm(
            x, (576,), norm.weight, 1e-5), rtol=2 ** -7, atol=2 ** -7)
