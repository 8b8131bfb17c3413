"""The four benchmark workloads, generated from a seed: chat, rag, faq and unique.

Every workload is a list of `Session`s; a session is one user's conversation (one turn for
rag, faq and unique). The load generator sends a session's turns in order, appending each
answer to the history, so `chat` reuses system prompts across users and earlier turns
within a session, `rag` reuses documents, `faq` repeats and rewords questions (exact and
semantic cache hits) and `unique` reuses nothing.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, fields

from bench.harness.text import paragraph, paragraphs, sentence, title

WORKLOADS = ("chat", "rag", "faq", "unique")
# FAQ answers must be able to finish (`finish_reason: stop`): a cut answer is never cached.
DEFAULT_MAX_TOKENS = {"chat": 32, "rag": 32, "faq": 128, "unique": 32}


@dataclass
class WorkloadSizes:
    """Knobs for every workload (tokens are approximate); `--size key=value` sets them."""

    max_tokens: int = 0  # 0: the workload's default (DEFAULT_MAX_TOKENS)
    temperature: float = 0.0
    # chat
    apps: int = 4
    system_tokens: int = 400
    turns: int = 4
    user_tokens: int = 30
    think_s: float = 2.0  # mean think time between turns (exponential)
    # rag
    docs: int = 8
    doc_min_tokens: int = 1000
    doc_max_tokens: int = 2000
    questions_per_doc: int = 4
    # faq
    faq_questions: int = 30
    reword_prob: float = 0.5
    # unique
    prompt_tokens: int = 200

    def max_tokens_for(self, kind: str) -> int:
        return self.max_tokens or DEFAULT_MAX_TOKENS.get(kind, 32)

    def update(self, pairs: dict[str, str]) -> WorkloadSizes:
        """Set fields from strings, with the field's type; unknown names raise ValueError."""
        types = {f.name: type(getattr(self, f.name)) for f in fields(self)}
        for key, raw in pairs.items():
            if key not in types:
                raise ValueError(f"unknown workload size {key!r}; known: {sorted(types)}")
            setattr(self, key, types[key](raw))
        return self


@dataclass
class Turn:
    user: str
    think_s: float = 0.0  # wait this long after the previous answer before sending


@dataclass
class Session:
    id: str
    system: str | None
    turns: list[Turn] = field(default_factory=list)
    group: str = ""  # the app, document or question family this session draws on


def build_sessions(kind: str, count: int, seed: int, sizes: WorkloadSizes | None = None,
                   pool_seed: int | None = None) -> list[Session]:
    """`count` sessions of workload `kind`, identical for identical arguments.

    The shared pool (apps' system prompts, documents, FAQ questions) comes from `pool_seed`
    (default: `seed`), the users and what they ask from `seed`: runs of a sweep keep one
    corpus, as a deployment does, and vary the traffic."""
    sizes = sizes or WorkloadSizes()
    builders = {"chat": _chat, "rag": _rag, "faq": _faq, "unique": _unique}
    if kind not in builders:
        raise ValueError(f"unknown workload {kind!r}; choose one of {', '.join(WORKLOADS)}")
    pool = random.Random(f"{kind}:pool:{seed if pool_seed is None else pool_seed}")
    sessions = builders[kind](count, pool, random.Random(f"{kind}:{seed}"), sizes)
    for i, session in enumerate(sessions):  # ids never repeat across runs of other seeds
        session.id = f"{kind}-{seed}-{i}"
    return sessions


def _zipf_choice(rng: random.Random, n: int) -> int:
    """An index in [0, n) where low indexes are popular (weights 1/(i+1))."""
    return rng.choices(range(n), weights=[1.0 / (i + 1) for i in range(n)])[0]


def _chat(count: int, pool: random.Random, rng: random.Random,
          sizes: WorkloadSizes) -> list[Session]:
    apps = []
    for a in range(sizes.apps):
        name = title(pool)
        prompt = (f"You are the assistant of {name}, app number {a}. Answer briefly and "
                  f"politely. Follow these rules.\n\n" + paragraphs(pool, sizes.system_tokens))
        apps.append(prompt)
    sessions = []
    for _ in range(count):
        app = rng.randrange(sizes.apps)
        turns = [Turn(user=_question(rng, sizes.user_tokens),
                      think_s=_think_time(rng, sizes.think_s) if t else 0.0)
                 for t in range(sizes.turns)]
        sessions.append(Session(id="", system=apps[app], turns=turns, group=f"app{app}"))
    return sessions


def _think_time(rng: random.Random, mean_s: float) -> float:
    return rng.expovariate(1.0 / mean_s) if mean_s > 0 else 0.0


def _question(rng: random.Random, tokens: int) -> str:
    text = paragraph(rng, tokens).rstrip(".")
    return text + "?"


RAG_SYSTEM = "Answer the question using only the document the user gives. Be brief."


def _rag(count: int, pool: random.Random, rng: random.Random,
         sizes: WorkloadSizes) -> list[Session]:
    docs = []
    for d in range(sizes.docs):
        tokens = pool.randint(sizes.doc_min_tokens, sizes.doc_max_tokens)
        name = title(pool)
        questions = [f"What does the document say about the {title(pool, 1).lower()} "
                     f"of {name}?" for _ in range(sizes.questions_per_doc)]
        docs.append((f"Document {d}: {name}\n\n{paragraphs(pool, tokens)}", questions))
    sessions = []
    for _ in range(count):
        d = _zipf_choice(rng, len(docs))
        doc, questions = docs[d]
        user = f"{doc}\n\nQuestion: {rng.choice(questions)}"
        sessions.append(Session(id="", system=RAG_SYSTEM, turns=[Turn(user)],
                                group=f"doc{d}"))
    return sessions


FAQ_SYSTEM = ("You are the help desk of an online store. Answer customer questions in two "
              "sentences or fewer.")
FAQ_ACTIONS = ["reset", "change", "update", "cancel", "export", "delete", "recover", "enable",
               "disable", "share", "download", "renew", "verify", "transfer"]
FAQ_OBJECTS = ["my password", "my subscription", "my billing address", "two-factor login",
               "my account email", "an invoice", "my order", "the mobile app", "my saved data",
               "a team member's access", "my gift card", "my shipping address"]
FAQ_TEMPLATES = ["How do I {a} {o}?", "How can I {a} {o}?", "What is the way to {a} {o}?",
                 "Could you explain how to {a} {o}?", "I need to {a} {o}. How do I do that?",
                 "What are the steps to {a} {o}?", "Is there a way to {a} {o}?"]


def _faq(count: int, pool: random.Random, rng: random.Random,
         sizes: WorkloadSizes) -> list[Session]:
    pairs = [(a, o) for a in FAQ_ACTIONS for o in FAQ_OBJECTS]
    pool.shuffle(pairs)
    pool = pairs[: max(1, sizes.faq_questions)]
    sessions = []
    for _ in range(count):
        q = _zipf_choice(rng, len(pool))
        action, obj = pool[q]
        template = (rng.choice(FAQ_TEMPLATES[1:]) if rng.random() < sizes.reword_prob
                    else FAQ_TEMPLATES[0])
        user = template.format(a=action, o=obj)
        sessions.append(Session(id="", system=FAQ_SYSTEM, turns=[Turn(user)],
                                group=f"q{q}"))
    return sessions


def _unique(count: int, pool: random.Random, rng: random.Random,
            sizes: WorkloadSizes) -> list[Session]:
    sessions = []
    for _ in range(count):
        nonce = f"{rng.getrandbits(48):012x}"
        user = f"Request {nonce}. {paragraph(rng, sizes.prompt_tokens)} {sentence(rng)}"
        sessions.append(Session(id="", system=None, turns=[Turn(user)],
                                group=nonce))
    return sessions
