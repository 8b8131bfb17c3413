"""The compression gate: only above min_tokens, only when it pays for the prefill it saves."""

from __future__ import annotations

from prompts.compress import Compressor, CompressSettings, CostModel, SeenTexts
from prompts.quality import make_cases


def chat(case) -> list[dict]:
    return [{"role": "system", "content": "Answer from the document."},
            {"role": "user", "content": case.prompt}]


async def test_below_min_tokens_nothing_happens(engine_counter):
    case = make_cases(1, paragraphs=3)[0]
    messages = chat(case)
    out, report = await Compressor(engine_counter).compress(
        messages, CompressSettings(min_tokens=5000))
    assert out is messages and not report.applied and "min_tokens" in report.skipped[0]


async def test_slow_upstream_gets_selection_and_keeps_the_fact(engine_counter):
    case = make_cases(1, paragraphs=40)[0]
    messages = chat(case)
    settings = CompressSettings(min_tokens=500, target_ratio=0.3, prefill_tokens_per_s=500)
    out, report = await Compressor(engine_counter).compress(messages, settings)
    assert "select" in report.applied and report.ratio < 0.45
    kept = out[-1]["content"]
    assert case.answer in kept and kept.endswith(case.question)  # the question stays last
    assert out[0] == messages[0]  # short messages are not touched
    assert messages[-1]["content"].startswith(case.context[:50])  # input not mutated


async def test_fast_upstream_is_not_worth_compressing(engine_counter):
    """At 10M tokens/s prefill the saving is microseconds: selection is skipped."""
    case = make_cases(1, paragraphs=40)[0]
    costs = CostModel()
    settings = CompressSettings(min_tokens=500, prefill_tokens_per_s=10_000_000)
    out, report = await Compressor(engine_counter, costs=costs).compress(chat(case), settings)
    assert "select:cost>saving" in report.skipped and "select" not in report.applied


async def test_slow_embeddings_fall_back_to_lexical_selection(engine_counter):
    async def embed(texts):  # never called: the cost model says embeddings do not pay
        raise AssertionError("embeddings should have been skipped")

    case = make_cases(1, paragraphs=40)[0]
    costs = CostModel(per_ktok={"select+embed": 100.0, "select": 0.01})
    settings = CompressSettings(min_tokens=500, target_ratio=0.3, prefill_tokens_per_s=500)
    out, report = await Compressor(engine_counter, embed, costs=costs).compress(
        chat(case), settings)
    assert "select+embed:cost>saving" in report.skipped and "select" in report.applied
    assert case.answer in out[-1]["content"]


def test_cost_model_learns():
    costs = CostModel(per_ktok={"select": 1.0}, alpha=0.5)
    costs.update("select", 2000, 0.002)  # observed 0.001 s/ktok
    assert abs(costs.per_ktok["select"] - 0.5005) < 1e-9
    assert costs.estimate("select", 1000) == costs.per_ktok["select"]


async def test_a_repeated_document_is_kept_verbatim_for_the_prefix_cache(engine_counter):
    """First sight: selected down. Asked again (another question): sent whole, so the
    upstream's cached KV of the document is reused instead of a new cold prefill."""
    first, second = make_cases(2, paragraphs=40)
    seen = SeenTexts()
    settings = CompressSettings(min_tokens=500, target_ratio=0.3, prefill_tokens_per_s=500)
    compressor = Compressor(engine_counter, seen=seen)
    _, report = await compressor.compress(chat(first), settings)
    assert "select" in report.applied and len(seen) == 1
    again = chat(first)
    again[-1] = {**again[-1], "content": f"{first.context}\n\nAnd what else does it say?"}
    out, report = await compressor.compress(again, settings)
    assert out[-1]["content"] == again[-1]["content"] and not report.applied
    assert "message 1:repeat" in report.skipped
    _, report = await compressor.compress(chat(second), settings)  # another document
    assert "select" in report.applied and len(seen) == 2


def test_seen_texts_forgets_the_least_recent():
    seen = SeenTexts(capacity=2)
    assert not seen.check_and_add("a") and not seen.check_and_add("b")
    assert seen.check_and_add("a")  # "a" is now the most recent
    seen.check_and_add("c")  # evicts "b"
    assert len(seen) == 2 and seen.check_and_add("a") and not seen.check_and_add("b")
