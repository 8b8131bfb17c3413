"""Task decomposition: plan sub-requests that can run in parallel.

Multi-question turns: a user turn holding a numbered list of tasks, or several independent
question sentences, becomes one sub-request per item. Every sub-request repeats the
conversation before the turn and the turn's preamble byte for byte, so the engine's prefix
cache serves that shared part once. Questions that lean on each other ("its", "that one")
are not split. Map-reduce: a document too long for the context window is cut into chunks;
the question is mapped over the chunks and a final call reduces the partial answers.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from prompts.interfaces import Message, message_text
from prompts.select import split_passages

_ITEM = re.compile(r"^\s*(?:\d{1,2}[.)]|[-*•])\s+(\S.*)$")
_QUESTION = re.compile(r"[^.?!\n]*\?")
_REFERS_BACK = re.compile(
    r"\b(it|its|they|them|their|that|this|those|these|he|she|his|her|there|then|also|above|"
    r"previous|same|both|each other|former|latter)\b", re.IGNORECASE)


@dataclass
class Decomposition:
    preamble: str  # text before the list, shared by every part
    parts: list[str]
    kind: str  # "list" | "questions"


def split_turn(text: str, max_parts: int = 6) -> Decomposition | None:
    """The independent items of a user turn, or None when it should go as one request."""
    return _split_list(text, max_parts) or _split_questions(text, max_parts)


def _split_list(text: str, max_parts: int) -> Decomposition | None:
    lines = text.strip().split("\n")
    first = next((i for i, line in enumerate(lines) if _ITEM.match(line)), None)
    if first is None:
        return None
    items: list[str] = []
    for line in lines[first:]:
        match = _ITEM.match(line)
        if match:
            items.append(match.group(1).strip())
        elif line.strip() and items:
            return None  # text after or between items: a list that is part of something else
    if not 2 <= len(items) <= max_parts:
        return None
    if any(_REFERS_BACK.search(item) for item in items[1:]):
        return None
    return Decomposition("\n".join(lines[:first]).strip(), items, "list")


def _split_questions(text: str, max_parts: int) -> Decomposition | None:
    stripped = text.strip()
    if "\n\n" in stripped or not stripped.endswith("?"):
        return None
    questions = [q.strip() for q in _QUESTION.findall(stripped)]
    if not 2 <= len(questions) <= max_parts:
        return None
    start = stripped.find(questions[0])
    preamble, rest = stripped[:start].strip(), stripped[start:]
    for q in questions:
        rest = rest.replace(q, "", 1)
    if rest.strip():
        return None  # statements between the questions: they may tie the questions together
    if any(len(q.split()) < 3 or _REFERS_BACK.search(q) for q in questions[1:]):
        return None
    return Decomposition(preamble, questions, "questions")


def sub_request_messages(messages: list[Message], plan: Decomposition, index: int) -> list[Message]:
    """The conversation with its last user turn narrowed to part `index` (shared prefix first)."""
    last = max(i for i, m in enumerate(messages) if m.get("role") == "user")
    part = plan.parts[index]
    text = f"{plan.preamble}\n{part}" if plan.preamble else part
    return [*messages[:last], {**messages[last], "content": text}, *messages[last + 1:]]


def part_heading(plan: Decomposition, index: int) -> str:
    """How part `index` opens in the merged answer."""
    if plan.kind == "list":
        return f"{index + 1}. "
    return f"**{plan.parts[index]}**\n"


# ---------------------------------------------------------------- map-reduce

MAP_INSTRUCTION = ("Below is part {k} of {n} of a long document, then a question. Answer from "
                   "this part only; if it does not contain the answer, reply exactly: NOT FOUND.")
REDUCE_INSTRUCTION = ("Partial answers to one question, each from a different part of a long "
                      "document, follow. Combine them into one answer to the question; ignore "
                      "parts that say NOT FOUND.")


def split_document(text: str) -> tuple[str, str]:
    """(document, question): the question is the last paragraph of the turn."""
    body, _, last = text.strip().rpartition("\n\n")
    return (body, last) if body else ("", text.strip())


def chunk_document(document: str, count: Callable[[str], int], chunk_tokens: int) -> list[str]:
    """Consecutive chunks of at most about `chunk_tokens`, cut between passages."""
    chunks: list[str] = []
    current: list[str] = []
    used = 0
    for passage in split_passages(document, count, max_tokens=max(32, chunk_tokens // 4)):
        if current and used + passage.tokens > chunk_tokens:
            chunks.append("\n\n".join(current))
            current, used = [], 0
        current.append(passage.text)
        used += passage.tokens
    if current:
        chunks.append("\n\n".join(current))
    return chunks


def map_messages(system: list[Message], chunk: str, question: str, k: int, n: int) -> list[Message]:
    instruction = MAP_INSTRUCTION.format(k=k + 1, n=n)
    return [*system, {"role": "user",
                      "content": f"{instruction}\n\n{chunk}\n\nQuestion: {question}"}]


def reduce_messages(system: list[Message], question: str, partials: list[str]) -> list[Message]:
    found = [p for p in partials if "NOT FOUND" not in p.upper()] or partials
    listing = "\n\n".join(f"Part {i + 1}: {p.strip()}" for i, p in enumerate(found))
    return [*system, {"role": "user",
                      "content": f"{REDUCE_INSTRUCTION}\n\n{listing}\n\nQuestion: {question}"}]


def last_user_text(messages: list[Message]) -> str:
    users = [m for m in messages if m.get("role") == "user"]
    return message_text(users[-1]) if users else ""
