"""Seeded filler text for workloads: English-looking sentences of a requested token size.

Workloads need long, stable, realistic-sized prompts (system prompts, documents) without
shipping data files. Sizes are in approximate tokens: common English words average about
1.15 SmolLM2 (GPT-2 style BPE) tokens with punctuation, so `words_for_tokens` converts.
"""

from __future__ import annotations

import random

TOKENS_PER_WORD = 1.15

WORDS = """
account access action address advice agent answer app area article assistant audit
balance bank batch benefit bill billing board book branch budget build business button
cache call card care case catalog change channel charge check city claim client cloud
code comment company contract cost country course credit customer dashboard data date
deadline delivery department design detail device discount document domain draft driver
email employee engine entry error estimate event export feature fee field file filter
flight form fund goal group guide history holiday hotel hour image import invoice issue
item key language ledger license limit link list loan location login manager market
meeting member message method metric model month network note notice number offer office
order owner package page partner password payment period permission phone plan platform
policy portal price printer priority process product profile project purchase quality
query quota rate receipt record refund region report request reservation review right
risk role route rule sale schedule score screen search season security server service
session setting share shipment site size space staff status step storage store subscription
supplier support system table task tax team template term ticket time token tool total
training transfer trip update upload user value vendor version warehouse week window
workflow year zone
""".split()

VERBS = """
allows applies approves archives blocks books calculates cancels changes checks collects
confirms connects covers creates defines delivers describes enables ensures exports follows
handles includes keeps limits lists manages moves notifies opens processes protects
provides records reduces renews replaces reports requires returns reviews schedules sends
shows stores supports tracks transfers updates uses validates verifies
""".split()

LINKS = "and but because while when after before unless so although if".split()


def words_for_tokens(tokens: int) -> int:
    """How many filler words make roughly `tokens` BPE tokens."""
    return max(1, round(tokens / TOKENS_PER_WORD))


def sentence(rng: random.Random, min_words: int = 8, max_words: int = 18) -> str:
    """One capitalised sentence: subject, verb, objects, an optional clause."""
    n = rng.randint(min_words, max_words)
    parts = ["the", rng.choice(WORDS), rng.choice(VERBS)]
    while len(parts) < n:
        if rng.random() < 0.12 and len(parts) < n - 3:
            parts += [rng.choice(LINKS), "the", rng.choice(WORDS), rng.choice(VERBS)]
        else:
            parts.append(rng.choice(WORDS))
    text = " ".join(parts[:n])
    return text[0].upper() + text[1:] + "."


def paragraph(rng: random.Random, tokens: int) -> str:
    """Sentences adding up to about `tokens` tokens."""
    target = words_for_tokens(tokens)
    out: list[str] = []
    count = 0
    while count < target:
        left = target - count
        s = sentence(rng, max(3, min(8, left)), max(3, min(18, left)))
        out.append(s)
        count += len(s.split())
    return " ".join(out)


def paragraphs(rng: random.Random, tokens: int, per_paragraph: int = 120) -> str:
    """Text of about `tokens` tokens split into paragraphs of about `per_paragraph`."""
    blocks = []
    left = tokens
    while left > 0:
        size = min(per_paragraph, left)
        blocks.append(paragraph(rng, size))
        left -= size
    return "\n\n".join(blocks)


def title(rng: random.Random, words: int = 2) -> str:
    """A short capitalised name such as `Ledger Portal`."""
    return " ".join(rng.choice(WORDS).capitalize() for _ in range(words))
