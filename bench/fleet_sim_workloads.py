"""Traces for the fleet simulator: sessions of token ids, from a seed.

A session is a shared prefix (an app's system prompt, a document, a group's preamble) and
one or more turns; turn t's prompt is everything before it (the prefix, earlier turns and
their answers) plus its own tokens, as a chat template lays a conversation out. Token ids
are synthetic (random ids stand for text; only equality matters to a prefix cache), except
in `chat_live`, which tokenizes `bench/workloads.py`'s chat sessions with the real model's
tokenizer and chat template: the very prompts the live fleet bench sends.

- `chat`: apps with shared system prompts, multi-turn sessions with think time;
- `rag`: documents of 1,000-2,000 tokens, Zipf popular, one question each;
- `groups`: shared-prefix groups (a long preamble, a short unique suffix), equally popular;
- `hot`: one prefix takes `hot_share` of the traffic, the rest is spread over groups.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

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
    return [rng.randrange(VOCAB) for _ in range(n)]


def _zipf(rng: random.Random, n: int) -> int:
    return rng.choices(range(n), weights=[1.0 / (i + 1) for i in range(n)])[0]


def build(kind: str, count: int, seed: int, sizes: TraceSizes | None = None) -> list[SimSession]:
    """`count` sessions of trace `kind`, identical for identical arguments."""
    s = sizes or TraceSizes()
    if kind == "chat_live":
        return chat_live(count, seed)
    pool = random.Random(f"{kind}:pool:{seed}")
    rng = random.Random(f"{kind}:{seed}")
    if kind == "chat":
        prefixes = [_ids(pool, s.prefix_tokens) for _ in range(s.groups)]
        return [SimSession(f"chat-{i}", f"app{g}", prefixes[g],
                           [_ids(rng, s.user_tokens) for _ in range(s.turns)], s.answer_tokens,
                           s.think_s)
                for i in range(count) for g in [rng.randrange(s.groups)]]
    if kind == "rag":
        docs = [_ids(pool, pool.randint(s.doc_min_tokens, s.doc_max_tokens))
                for _ in range(s.groups)]
        return [SimSession(f"rag-{i}", f"doc{d}", docs[d], [_ids(rng, s.user_tokens)],
                           s.answer_tokens)
                for i in range(count) for d in [_zipf(rng, s.groups)]]
    if kind in ("groups", "hot"):
        prefixes = [_ids(pool, s.prefix_tokens) for _ in range(s.groups + 1)]
        sessions = []
        for i in range(count):
            hot = kind == "hot" and rng.random() < s.hot_share
            g = 0 if hot else 1 + rng.randrange(s.groups)
            sessions.append(SimSession(f"{kind}-{i}", f"g{g}", prefixes[g],
                                       [_ids(rng, s.suffix_tokens)], s.answer_tokens))
        return sessions
    raise ValueError(f"unknown trace {kind!r}; one of {', '.join(WORKLOADS)}")


def chat_live(count: int, seed: int) -> list[SimSession]:
    """`bench/workloads.py`'s chat sessions (the live bench's `seed`), tokenized through the
    bundled model's chat template (ChatML: each message is its own run of tokens)."""
    from bench.workloads import WorkloadSizes, build_sessions
    from gateway.fleet.prompt_tokens import load_tokenizer

    tok = load_tokenizer(None)
    sizes = WorkloadSizes()

    def message(role: str, text: str) -> list[int]:
        return tok.encode(f"<|im_start|>{role}\n{text}<|im_end|>\n")

    opening = tok.encode("<|im_start|>assistant\n")
    out = []
    for session in build_sessions("chat", count, seed, sizes, pool_seed=seed):
        turns = [message("user", t.user) + opening for t in session.turns]
        out.append(SimSession(session.id, session.group, message("system", session.system or ""),
                              turns, sizes.max_tokens_for("chat"), sizes.think_s))
    return out


def answer_ids(session: SimSession, rng: random.Random) -> list[int]:
    """The tokens an answer adds to the conversation: its text and the end of the turn."""
    return _ids(rng, session.answer_tokens) + [2, 198]  # <|im_end|>, newline
