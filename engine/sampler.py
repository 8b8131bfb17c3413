"""Pick the next token of every sampling sequence from its logits, on the logits' device.

Greedy rows take the argmax. Other rows apply penalties, temperature, top-k and top-p,
then sample with the exponential-race trick (argmax of probs / Exp(1) noise), which lets
each seeded request draw its noise from its own torch.Generator: a seeded request gives
the same tokens whatever else shares its batch.
"""

from __future__ import annotations

import torch
from torch import Tensor

from engine.sequence import Sequence

ARGMAX_CHUNK = 128


def row_argmax(x: Tensor) -> Tensor:
    """`x.argmax(-1)` for [N, vocab]: the first chunk holding the row's maximum, then the
    first maximum inside it, which is the same index. Two plain reductions; torch's CPU
    argmax tracks indices element by element (measured ~15x slower at 8 x 49,152)."""
    rows, width = x.shape
    if width % ARGMAX_CHUNK or width < 4 * ARGMAX_CHUNK:
        return x.argmax(dim=-1)
    chunks = x.reshape(rows, width // ARGMAX_CHUNK, ARGMAX_CHUNK)
    best = chunks.amax(dim=-1).argmax(dim=-1)
    within = chunks[torch.arange(rows, device=x.device), best].argmax(dim=-1)
    return best * ARGMAX_CHUNK + within


def sampled_first(top: list[tuple[int, float]], token: int,
                  logprob: float) -> list[tuple[int, float]]:
    """`top` (token, logprob) pairs, best first, with the sampled `token` first among those
    it ties: topk orders equal values arbitrarily (bf16 logits tie often), and an answer
    whose greedy token is listed second looks wrong. A tied `token` that topk left out
    takes the last tied place."""
    if not top or logprob < top[-1][1]:
        return top
    if all(tid != token for tid, _ in top):
        top = [*top[:-1], (token, logprob)]
    return sorted(top, key=lambda pair: (-pair[1], pair[0] != token))


class Sampler:
    """Vectorised over the batch; per-row work only for penalties and seeded noise."""

    def __init__(self, device: torch.device, seed: int = 0) -> None:
        self.device = device
        self.generator = torch.Generator(device=device).manual_seed(seed)

    def __call__(self, logits: Tensor, seqs: list[Sequence]) -> list[int]:
        """logits [N, vocab] float32, one row per sequence in `seqs` -> N token ids."""
        params = [s.params for s in seqs]
        if any(p.logit_bias for p in params):
            logits = self._apply_logit_bias(logits.clone(), params)
        if any(p.has_penalties for p in params):
            logits = self._apply_penalties(logits.clone(), seqs)
        greedy_ids = row_argmax(logits)
        if all(p.greedy for p in params):
            return greedy_ids.tolist()
        temps = torch.tensor([p.temperature if p.temperature > 0 else 1.0 for p in params],
                             device=logits.device, dtype=logits.dtype)
        scaled = logits / temps[:, None]
        if any(p.top_k > 0 or p.top_p < 1.0 for p in params):
            scaled = self._top_k_top_p(scaled, [p.top_k for p in params],
                                       [p.top_p for p in params])
        probs = torch.softmax(scaled, dim=-1)
        race = probs / self._exponential_noise(probs, seqs)
        greedy = torch.tensor([p.greedy for p in params], device=logits.device)
        return torch.where(greedy, greedy_ids, row_argmax(race)).tolist()

    def record_logprobs(self, logits: Tensor, token_ids: list[int], seqs: list[Sequence]) -> None:
        """Set `sampled_logprobs` on each sequence that asks for them: its new token's
        log-probability and its `params.logprobs` likeliest tokens', under the model's own
        distribution (`logits` before penalties, temperature, top-k and top-p, as vLLM does)."""
        rows = [row for row, seq in enumerate(seqs) if seq.params.logprobs is not None]
        if not rows:
            return
        logprobs = torch.log_softmax(logits[rows].float(), dim=-1)
        picked = torch.tensor([token_ids[row] for row in rows], device=logits.device)
        chosen = logprobs.gather(1, picked[:, None])[:, 0].tolist()
        k = max(seqs[row].params.logprobs or 0 for row in rows)
        top_values, top_ids = (t.tolist() for t in logprobs.topk(k, dim=-1))
        for i, row in enumerate(rows):
            count = seqs[row].params.logprobs or 0
            top = list(zip(top_ids[i][:count], top_values[i][:count], strict=True))
            seqs[row].sampled_logprobs = (chosen[i], sampled_first(top, token_ids[row], chosen[i]))

    @staticmethod
    def _apply_logit_bias(logits: Tensor, params: list) -> Tensor:
        """OpenAI's `logit_bias`: each listed token's logit moves by its bias, in one
        scatter over the batch (ids past the logits' width, if any, are left out)."""
        vocab = logits.shape[-1]
        rows, ids, biases = [], [], []
        for row, p in enumerate(params):
            for token, bias in p.logit_bias.items():
                if token < vocab:
                    rows.append(row)
                    ids.append(token)
                    biases.append(bias)
        if rows:
            index = (torch.tensor(rows, device=logits.device),
                     torch.tensor(ids, device=logits.device))
            logits.index_put_(index, torch.tensor(biases, device=logits.device,
                                                  dtype=logits.dtype), accumulate=True)
        return logits

    def _apply_penalties(self, logits: Tensor, seqs: list[Sequence]) -> Tensor:
        """OpenAI semantics: logit -= frequency * count + presence * (count > 0)."""
        vocab = logits.shape[-1]
        for row, seq in enumerate(seqs):
            p = seq.params
            if not p.has_penalties or seq.num_output_tokens == 0:
                continue
            out = torch.tensor(seq.output_token_ids, device=logits.device)
            counts = torch.bincount(out[out < vocab], minlength=vocab).to(logits.dtype)
            logits[row] -= p.frequency_penalty * counts + p.presence_penalty * (counts > 0)
        return logits

    @staticmethod
    def _top_k_top_p(logits: Tensor, top_k: list[int], top_p: list[float]) -> Tensor:
        vocab = logits.shape[-1]
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        ranks = torch.arange(vocab, device=logits.device)
        k = torch.tensor([t if t > 0 else vocab for t in top_k], device=logits.device)
        sorted_logits = sorted_logits.masked_fill(ranks[None, :] >= k[:, None], float("-inf"))
        probs = torch.softmax(sorted_logits, dim=-1)
        before = probs.cumsum(dim=-1) - probs  # mass of the better tokens
        p = torch.tensor(top_p, device=logits.device, dtype=probs.dtype)
        sorted_logits = sorted_logits.masked_fill(before > p[:, None], float("-inf"))
        return torch.full_like(logits, float("-inf")).scatter(1, order, sorted_logits)

    def _exponential_noise(self, probs: Tensor, seqs: list[Sequence]) -> Tensor:
        noise = torch.empty_like(probs).exponential_(generator=self.generator)
        for row, seq in enumerate(seqs):
            if seq.params.seed is None or seq.params.greedy:
                continue
            if seq.generator is None:
                seq.generator = torch.Generator(device=probs.device).manual_seed(seq.params.seed)
            noise[row].exponential_(generator=seq.generator)
        return noise
