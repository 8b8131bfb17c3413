"""Traces for the fleet simulator: sessions of token ids, from a seed.

A session is a shared prefix (an app's system prompt, a document, a group's preamble) and
one or more turns; turn t's prompt is everything before it (the prefix, earlier turns and
their answers) plus its own tokens, as a chat template lays a conversation out. Token ids
are synthetic (random ids stand for text; only equality matters to a prefix cache), except
in `chat_live`, which tokenizes `bench/harness/workloads.py`'s chat sessions with the real model's
tokenizer and chat template: the very prompts the live fleet bench sends.

- `chat`: apps with shared system prompts, multi-turn sessions with think time;
- `rag`: documents of 1,000-2,000 tokens, Zipf popular, one question each;
- `groups`: shared-prefix groups (a long preamble, a short unique suffix), equally popular;
- `hot`: one prefix takes `hot_share` of the traffic, the rest is spread over groups.
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import islice

from bench.harness.workloads import WorkloadSizes, build_sessions

WORKLOADS = ("chat", "rag", "groups", "hot", "chat_live")
VOCAB = 49_152


@dataclass
class SimSession:
    """A conversation: its shared prefix, each turn's own tokens, answer sizes."""

    id: str
    group: str
    prefix: list[int]
    turns: list[list[int]]
    answer_tokens: int
    think_s: float = 0.0  # mean think time before each later turn
    answers: list[list[int]] = field(default_factory=list)  # filled as answers come

    def prompt(self, turn: int) -> list[int]:
        """Turn `turn`'s prompt: the prefix, earlier turns with their answers, this turn."""
        ids = list(self.prefix)
        for t in range(turn):
            ids += self.turns[t] + self.answers[t]
        return ids + self.turns[turn]


@dataclass
class TraceSizes:
    """Knobs of the synthetic traces (tokens)."""

    groups: int = 8  # apps, documents or preamble groups
    prefix_tokens: int = 480  # chat system prompt, group preamble
    doc_min_tokens: int = 1000
    doc_max_tokens: int = 2000
    turns: int = 4
    user_tokens: int = 40
    answer_tokens: int = 32
    think_s: float = 2.0
    suffix_tokens: int = 60  # groups / hot: the unique part
    hot_share: float = 0.5


def _ids(rng: random.Random, n: int) -> list[int]:
    return [i % VOCAB for i in array("H", rng.randbytes(2 * n))]


def _zipf_weights(n: int) -> list[float]:
    """Cumulative weights of [0, n) where index i is drawn in proportion to 1 / (i + 1)."""
    total, out = 0.0, []
    for i in range(n):
        total += 1.0 / (i + 1)
        out.append(total)
    return out


def build(kind: str, count: int, seed: int, sizes: TraceSizes | None = None,
          pool_seed: int | None = None,
          live_sizes: WorkloadSizes | None = None) -> list[SimSession]:
    """`count` sessions of trace `kind`, identical for identical arguments."""
    return list(islice(sessions(kind, seed, sizes, pool_seed, live_sizes), count))


def sessions(kind: str, seed: int, sizes: TraceSizes | None = None,
             pool_seed: int | None = None,
             live_sizes: WorkloadSizes | None = None) -> Iterator[SimSession]:
    """Trace `kind`'s sessions, made as they are needed: the users and what they ask from
    `seed`, the shared prefixes from `pool_seed` (default `seed`), as bench/harness/workloads.py."""
    s = sizes or TraceSizes()
    pool_seed = seed if pool_seed is None else pool_seed
    if kind == "chat_live":
        yield from chat_live(seed, pool_seed, live_sizes or WorkloadSizes())
        return
    if kind not in WORKLOADS:
        raise ValueError(f"unknown trace {kind!r}; one of {', '.join(WORKLOADS)}")
    pool = random.Random(f"{kind}:pool:{pool_seed}")
    zipf = _zipf_weights(s.groups)
    rng = random.Random(f"{kind}:{seed}")
    if kind == "rag":
        prefixes = [_ids(pool, pool.randint(s.doc_min_tokens, s.doc_max_tokens))
                    for _ in range(s.groups)]
    else:
        prefixes = [_ids(pool, s.prefix_tokens) for _ in range(s.groups + (kind == "hot"))]
    i = 0
    while True:
        i += 1
        if kind == "chat":
            g = rng.randrange(s.groups)
            yield SimSession(f"chat-{i}", f"app{g}", prefixes[g],
                             [_ids(rng, s.user_tokens) for _ in range(s.turns)],
                             s.answer_tokens, s.think_s)
        elif kind == "rag":
            d = rng.choices(range(s.groups), cum_weights=zipf)[0]
            yield SimSession(f"rag-{i}", f"doc{d}", prefixes[d], [_ids(rng, s.user_tokens)],
                             s.answer_tokens)
        else:
            hot = kind == "hot" and rng.random() < s.hot_share
            g = 0 if hot else (kind == "hot") + rng.randrange(s.groups)
            yield SimSession(f"{kind}-{i}", f"g{g}", prefixes[g], [_ids(rng, s.suffix_tokens)],
                             s.answer_tokens)


def chat_live(seed: int, pool_seed: int, sizes: WorkloadSizes) -> Iterator[SimSession]:
    """`bench/harness/workloads.py`'s chat sessions (the live bench's seeds and sizes), tokenized
    through the bundled model's chat template (ChatML: each message is its own run of
    tokens). The tokenizer is read here, not at import: synthetic traces need no torch."""
    from engine import load_tokenizer

    tok = load_tokenizer(None)

    def message(role: str, text: str) -> list[int]:
        return tok.encode(f"<|im_start|>{role}\n{text}<|im_end|>\n")

    opening = tok.encode("<|im_start|>assistant\n")
    prefixes: dict[str, list[int]] = {}
    # session i depends only on the sessions before it, so a longer list starts like a
    # shorter one (the live run builds as many as it has arrivals): make more when needed
    made, count = 0, 256
    while True:
        for session in build_sessions("chat", count, seed, sizes, pool_seed=pool_seed)[made:]:
            system = session.system or ""
            prefix = prefixes.setdefault(system, message("system", system))
            turns = [message("user", t.user) + opening for t in session.turns]
            yield SimSession(session.id, session.group, prefix, turns,
                             sizes.max_tokens_for("chat"), sizes.think_s)
        made, count = count, count * 2


def answer_ids(session: SimSession, rng: random.Random) -> list[int]:
    """The tokens an answer adds to the conversation: its text and the end of the turn."""
    return _ids(rng, session.answer_tokens) + [2, 198]  # <|im_end|>, newline
