"""Summaries of dropped turns, written once per conversation prefix and reused.

The anchored window (prompts/window.py) drops the same prefix on every request until its
next jump, so the summary of that prefix is asked for once: the key is a hash of the dropped
messages, concurrent requests for the same prefix share one in-flight call, and the text
stays byte-identical across turns (which keeps the engine's prefix cache hitting).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import OrderedDict

from prompts.interfaces import Message, Summarizer, message_text

SUMMARY_INSTRUCTION = (
    "Summarise the conversation below in a few sentences. Keep names, numbers, decisions and "
    "open questions; leave out pleasantries.\n\n"
)


def transcript(messages: list[Message]) -> str:
    """The dropped turns as plain text for the summariser."""
    lines = []
    for m in messages:
        text = message_text(m)
        if m.get("tool_calls"):
            calls = ", ".join(c["function"]["name"] for c in m["tool_calls"] if "function" in c)
            text = f"{text} [called tools: {calls}]".strip()
        lines.append(f"{m.get('role', 'user')}: {text}")
    return "\n".join(lines)


def prefix_key(messages: list[Message], salt: str = "") -> str:
    blob = json.dumps([salt, messages], sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


class SummaryCache:
    """LRU of summary texts by conversation prefix, with single-flight computation."""

    def __init__(self, max_entries: int = 1024) -> None:
        self.max_entries = max_entries
        self._done: OrderedDict[str, str] = OrderedDict()
        self._inflight: dict[str, asyncio.Future[str]] = {}
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._done)

    async def summary(self, dropped: list[Message], summarizer: Summarizer,
                      salt: str = "") -> str:
        """The summary of `dropped`, computing it only if no request has done so yet."""
        key = prefix_key(dropped, salt)
        if key in self._done:
            self._done.move_to_end(key)
            self.hits += 1
            return self._done[key]
        pending = self._inflight.get(key)
        if pending is not None:
            self.hits += 1
            return await asyncio.shield(pending)
        self.misses += 1
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            text = (await summarizer.summarize(SUMMARY_INSTRUCTION + transcript(dropped))).strip()
        except asyncio.CancelledError:
            future.cancel()
            raise
        except Exception as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved: waiters re-raise it, nobody else must
            raise
        finally:
            self._inflight.pop(key, None)
        future.set_result(text)
        self._done[key] = text
        while len(self._done) > self.max_entries:
            self._done.popitem(last=False)
        return text
