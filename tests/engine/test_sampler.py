"""Sampler on hand-made logits: greedy, temperature, top-k/top-p, seeds, penalties."""

from __future__ import annotations

import math

import torch

from engine.sampler import Sampler, row_argmax, sampled_first
from engine.sampling_params import SamplingParams
from engine.sequence import Sequence

CPU = torch.device("cpu")


def seqs_with(params: list[SamplingParams], outputs: list[list[int]] | None = None) -> list[Sequence]:
    seqs = [Sequence(f"r{i}", [0], p) for i, p in enumerate(params)]
    for seq, out in zip(seqs, outputs or [[] for _ in params], strict=True):
        seq.token_ids.extend(out)
    return seqs


def probs_logits(probs: list[float], rows: int) -> torch.Tensor:
    return torch.tensor([[math.log(p) for p in probs]] * rows)


def test_greedy_is_argmax() -> None:
    logits = torch.tensor([[0.1, 3.0, 0.2], [5.0, 0.0, 1.0]])
    tokens = Sampler(CPU)(logits, seqs_with([SamplingParams(temperature=0)] * 2))
    assert tokens == [1, 0]


def test_sampling_follows_the_distribution() -> None:
    rows = 4000
    tokens = Sampler(CPU, seed=1)(probs_logits([0.7, 0.2, 0.1], rows),
                                  seqs_with([SamplingParams(temperature=1.0)] * rows))
    share = [tokens.count(t) / rows for t in range(3)]
    assert abs(share[0] - 0.7) < 0.03 and abs(share[1] - 0.2) < 0.03 and abs(share[2] - 0.1) < 0.03


def test_top_k_and_top_p_cut_the_tail() -> None:
    rows = 500
    logits = probs_logits([0.5, 0.3, 0.15, 0.05], rows)
    top_k = Sampler(CPU)(logits, seqs_with([SamplingParams(top_k=2)] * rows))
    assert set(top_k) == {0, 1}
    top_p = Sampler(CPU)(logits, seqs_with([SamplingParams(top_p=0.6)] * rows))
    assert set(top_p) == {0, 1}  # 0.5 alone is under 0.6, so the second token stays in
    tiny_p = Sampler(CPU)(logits, seqs_with([SamplingParams(top_p=0.01)] * rows))
    assert set(tiny_p) == {0}


def test_low_temperature_is_nearly_greedy() -> None:
    rows = 200
    tokens = Sampler(CPU)(probs_logits([0.4, 0.35, 0.25], rows),
                          seqs_with([SamplingParams(temperature=0.01)] * rows))
    assert set(tokens) == {0}


def test_seeded_request_is_reproducible_in_any_batch() -> None:
    logits = probs_logits([0.25] * 4, 1)

    def draws(batch_size: int, position: int, sampler_seed: int) -> list[int]:
        sampler = Sampler(CPU, seed=sampler_seed)
        params = [SamplingParams() for _ in range(batch_size)]
        params[position] = SamplingParams(seed=42)
        seqs = seqs_with(params)
        return [sampler(logits.expand(batch_size, -1), seqs)[position] for _ in range(20)]

    alone = draws(1, 0, sampler_seed=0)
    assert draws(5, 3, sampler_seed=7) == alone
    assert len(set(alone)) > 1  # it does sample, not always the same token


def test_penalties_push_away_from_repeated_tokens() -> None:
    logits = torch.tensor([[2.0, 1.9, 0.0]])
    plain = Sampler(CPU)(logits, seqs_with([SamplingParams(temperature=0)], [[0, 0]]))
    assert plain == [0]
    freq = SamplingParams(temperature=0, frequency_penalty=0.1)
    assert Sampler(CPU)(logits, seqs_with([freq], [[0, 0]])) == [1]  # 2.0 - 0.2 < 1.9
    presence = SamplingParams(temperature=0, presence_penalty=0.05)
    assert Sampler(CPU)(logits, seqs_with([presence], [[0, 0]])) == [0]  # 1.95 > 1.9
    assert logits[0, 0] == 2.0  # the caller's logits are untouched


def test_row_argmax_is_argmax_with_first_index_on_ties() -> None:
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 49152, generator=gen)
    logits[1, 300] = logits[1, 40000] = 100.0  # tie across chunks: the first wins
    logits[2, 5] = logits[2, 6] = 100.0        # tie inside a chunk
    logits[3] = 0.0                            # a flat row
    assert row_argmax(logits).tolist() == logits.argmax(dim=-1).tolist()
    assert row_argmax(logits)[1:4].tolist() == [300, 5, 0]
    odd = torch.randn(3, 1000, generator=gen)  # not a multiple of the chunk: plain argmax
    assert row_argmax(odd).tolist() == odd.argmax(dim=-1).tolist()


def test_logprobs_are_the_models_own_for_rows_that_ask() -> None:
    # probabilities 0.5 / 0.3 / 0.2; row 0 asks for 2 alternatives, row 1 for none at all,
    # row 2 for its token only. Temperature and penalties do not change the reported numbers.
    logits = probs_logits([0.5, 0.3, 0.2], 3)
    seqs = seqs_with([SamplingParams(temperature=0, logprobs=2),
                      SamplingParams(temperature=0),
                      SamplingParams(temperature=0.3, presence_penalty=2.0, logprobs=0)],
                     [[], [], [0]])
    sampler = Sampler(CPU)
    tokens = sampler(logits, seqs)
    sampler.record_logprobs(logits, tokens, seqs)
    chosen, top = seqs[0].sampled_logprobs
    assert tokens[0] == 0 and math.isclose(chosen, math.log(0.5), rel_tol=1e-5)
    assert [t for t, _ in top] == [0, 1]
    assert [round(lp, 5) for _, lp in top] == [round(math.log(0.5), 5), round(math.log(0.3), 5)]
    assert seqs[1].sampled_logprobs is None
    chosen, top = seqs[2].sampled_logprobs
    assert math.isclose(chosen, math.log([0.5, 0.3, 0.2][tokens[2]]), rel_tol=1e-5) and top == []


def test_sampled_token_is_listed_first_among_equal_logprobs() -> None:
    # four tokens tie at the top; greedy takes the first index (2) and whichever order
    # topk returns them in, the listing starts with the token that was sampled
    logits = torch.full((1, 600), -10.0)
    logits[0, [2, 7, 300, 599]] = 1.0
    seqs = seqs_with([SamplingParams(temperature=0, logprobs=3)])
    sampler = Sampler(CPU)
    tokens = sampler(logits, seqs)
    sampler.record_logprobs(logits, tokens, seqs)
    chosen, top = seqs[0].sampled_logprobs
    assert tokens == [2] and top[0] == (2, chosen) and len(top) == 3
    assert {tid for tid, _ in top} <= {2, 7, 300, 599}


def test_sampled_first_orders_ties_only() -> None:
    top = [(5, -1.0), (9, -1.0), (4, -2.0)]
    assert sampled_first(top, 9, -1.0) == [(9, -1.0), (5, -1.0), (4, -2.0)]
    assert sampled_first(top, 4, -2.0) == [(5, -1.0), (9, -1.0), (4, -2.0)]
    assert sampled_first(top, 8, -3.0) == top                # below the list: unchanged
    assert sampled_first([(5, -1.0), (9, -1.0)], 3, -1.0) == [(3, -1.0), (5, -1.0)]
    assert sampled_first([], 3, -1.0) == []


def test_logit_bias_moves_only_its_rows_tokens_and_leaves_the_logits_unchanged() -> None:
    logits = torch.tensor([[0.1, 3.0, 0.2], [5.0, 0.0, 1.0], [1.0, 2.0, 0.0]])
    original = logits.clone()
    params = [SamplingParams(temperature=0, logit_bias={2: 100.0}),
              SamplingParams(temperature=0, logit_bias={0: -100.0, 1: 4.5}),
              SamplingParams(temperature=0)]
    assert Sampler(CPU)(logits, seqs_with(params)) == [2, 1, 1]
    assert torch.equal(logits, original)  # logprobs are read from the model's own logits
