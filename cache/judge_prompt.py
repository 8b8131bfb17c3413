"""What a judge upstream is asked about a grey-zone pair, and how its reply is read.

The judge sees the new question, the question the cached answer was written for, and the
cached answer, and is asked for one word: whether the cached answer fully answers the new
question. The reply is read strictly: once surrounding spaces, quotes, asterisks and a final
full stop are cut, it must be "yes" or "no" (any case). Anything else ("Yes, but...",
"Probably", an empty reply) is unparseable and counts as no: a judge that hedges promotes
nothing.
"""

from __future__ import annotations

import re

from cache.judgement import Judgement

SYSTEM = ("You check answers kept in a cache. You are shown a new question and an answer "
          "that was written for an earlier question. Reply with exactly one word: yes or no.")
ASK = ("New question:\n{new}\n\nEarlier question:\n{cached}\n\nAnswer written for the earlier "
       "question:\n{answer}\n\nDoes this answer fully and correctly answer the new question, "
       "with nothing missing or different? Reply with one word: yes or no.")
MAX_ANSWER_CHARS = 4000  # a longer cached answer is cut (its start is what it says first)
MAX_TOKENS = 3  # "yes", "no", and room to see that more was coming
_TRIM = re.compile(r"^[\s\"'`*_]+|[\s\"'`*_.!]+$")


def messages(new: str, cached: str, answer: str) -> list[dict[str, str]]:
    """The chat messages that ask the judge about one pair."""
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": ASK.format(new=new, cached=cached,
                                                  answer=answer[:MAX_ANSWER_CHARS])}]


def read_verdict(reply: str, judge: str, finished: bool = True) -> Judgement:
    """The judge's reply as a verdict: exactly "yes" or "no" once trimmed (`_TRIM`); a reply
    cut off by the token limit (`finished` false) was saying more: unparseable."""
    word = _TRIM.sub("", reply).lower()
    if finished and word in ("yes", "no"):
        return Judgement(word == "yes", judge, word)  # type: ignore[arg-type]
    return Judgement(False, judge, "unparseable")
