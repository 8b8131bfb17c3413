"""The second KV tier with the real model: the disk tier gives back the very bytes (greedy
answers identical), the int8 tier stays within the engine's int8 limits (perplexity within
2%, greedy decisions alike nine times in ten, as tests/engine/test_int8.py holds the int8
matmuls to), and a conversation pushed out of the pool comes back as cached tokens."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from engine.config import EngineConfig
from engine.kv_tier_store import DiskStore, Int8Store
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from tests.engine.conftest import BLOCK, PagedSequences
from tests.engine.test_int8 import text_ids

PREFIX, CONTINUATION = 384, 128


def continuation_logits(model, ids: list[int], store_of=None) -> torch.Tensor:
    """Logits of the continuation read after the prefix's K/V: as computed, or after a trip
    through a store (`store_of(kv_cache)`) into other blocks."""
    seqs = PagedSequences(model, num_blocks=96)
    seqs.step({0: ids[:PREFIX]})
    if store_of is None:
        return seqs.step({0: ids[PREFIX:]})[0]
    store = store_of(seqs.kv)
    blocks = seqs.tables[0]
    store.save(blocks, list(range(len(blocks))))
    fresh = [seqs.free.pop() for _ in blocks]
    store.load(list(range(len(blocks))), fresh)
    seqs.tables[1], seqs.lens[1] = fresh, PREFIX
    return seqs.step({1: ids[PREFIX:]})[1]


def perplexity(logits: torch.Tensor, ids: list[int]) -> float:
    targets = torch.tensor(ids[PREFIX + 1:])
    return torch.exp(F.cross_entropy(logits[:-1].float(), targets)).item()


def test_the_disk_tier_gives_back_the_same_bytes(smollm_bf16, tmp_path):
    model, tokenizer, _ = smollm_bf16
    ids = text_ids(tokenizer, PREFIX + CONTINUATION)
    ref = continuation_logits(model, ids)
    ours = continuation_logits(model, ids, lambda kv: DiskStore(kv, 32, str(tmp_path)))
    assert torch.equal(ours, ref)
    assert list(tmp_path.iterdir()) == []  # the file is unlinked once open


def test_the_int8_tier_stays_within_the_engines_int8_limits(smollm_bf16):
    model, tokenizer, _ = smollm_bf16
    ids = text_ids(tokenizer, PREFIX + CONTINUATION)
    ref = continuation_logits(model, ids)
    ours = continuation_logits(model, ids, lambda kv: Int8Store(kv, 32))
    assert abs(perplexity(ours, ids) / perplexity(ref, ids) - 1) < 0.02
    same = (ours.argmax(-1) == ref.argmax(-1)).float().mean().item()
    assert same >= 0.9, same


def test_int8_blocks_take_about_half_the_bytes():
    kv = torch.zeros(30, 2, 4, BLOCK, 3, 64, dtype=torch.bfloat16)
    assert DiskStore.block_bytes(kv) == 30 * 2 * BLOCK * 3 * 64 * 2
    assert Int8Store.block_bytes(kv) / DiskStore.block_bytes(kv) == pytest.approx(68 / 128)


CONVERSATION = [{"role": "system", "content": "You answer questions about the text."},
                {"role": "user", "content": "Here is a text. " + "The river bends west. " * 70
                 + "Where does the river bend?"}]


@pytest.mark.parametrize("tier", ["disk", "int8"])
def test_a_conversation_pushed_out_of_the_pool_resumes_from_the_tier(smollm_bf16, tmp_path,
                                                                      tier):
    options = {"kv_offload_mb": 64}
    if tier == "disk":
        options["kv_offload_dir"] = str(tmp_path)
    engine = LLMEngine(EngineConfig(num_kv_blocks=48, **options), loaded=tuple(smollm_bf16))
    plain = LLMEngine(EngineConfig(num_kv_blocks=48), loaded=tuple(smollm_bf16))
    prompt = engine.tokenizer.apply_chat_template(CONVERSATION)
    params = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)
    first = engine.generate([prompt], params)[0]
    others = [f"Tell me about the number {i}. " * 30 for i in range(3)]
    engine.generate(others, params)  # 3 x ~240 tokens: the conversation's blocks leave
    hashes = engine.kv.compute_block_hashes(engine.make_sequence(prompt, params))
    assert hashes[0] not in engine.kv.hash_to_block and hashes[0] in engine.tier
    again = engine.generate([prompt], params)[0]
    assert again.cached_tokens >= 0.9 * again.prompt_tokens
    assert engine.stats().tier.reloaded >= again.cached_tokens // BLOCK - 2
    recomputed = plain.generate([prompt], params)[0]
    if tier == "disk":  # lossless: greedy answers identical
        assert again.token_ids == first.token_ids == recomputed.token_ids
    else:  # lossy: held to the int8 limits per token above; the answer is whole
        assert len(again.token_ids) == len(recomputed.token_ids) == 12


def test_bad_offload_settings_are_refused_at_start(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ValueError, match=r"kv_offload_dir .*a-file/tier: cannot write there"):
        EngineConfig(kv_offload_mb=16, kv_offload_dir=str(blocker / "tier"))
    with pytest.raises(ValueError, match="kv_offload_dir needs kv_offload_mb"):
        EngineConfig(kv_offload_dir=str(tmp_path))
    with pytest.raises(ValueError, match="kv_offload_mb must be"):
        EngineConfig(kv_offload_mb=-1)
    EngineConfig(kv_offload_mb=16, kv_offload_dir=str(tmp_path / "made"))
    assert (tmp_path / "made").is_dir()
