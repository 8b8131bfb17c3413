"""The shipped quality set: planted facts survive compression at the rate reported."""

from __future__ import annotations

from prompts.compress import Compressor, CompressSettings
from prompts.quality import evaluate, make_cases


def test_cases_are_deterministic_and_hide_one_answer():
    a, b = make_cases(5, seed=3), make_cases(5, seed=3)
    assert [c.context for c in a] == [c.context for c in b]
    for case in a:
        assert case.context.count(case.answer) >= 1 and case.question.endswith("?")


async def test_selection_keeps_planted_facts(engine_counter):
    cases = make_cases(12, paragraphs=40, seed=1)
    compressor = Compressor(engine_counter)
    settings = CompressSettings(min_tokens=200, target_ratio=0.3, methods=("lossless", "select"),
                                prefill_tokens_per_s=100)

    async def compress(case):
        messages = [{"role": "user", "content": case.prompt}]
        out, _ = await compressor.compress(messages, settings)
        return out[0]["content"]

    report = await evaluate(cases, compress, engine_counter.count_text)
    assert report.ratio < 0.45  # the compression it reports
    assert report.survival >= 0.9  # and the facts it keeps at that ratio
