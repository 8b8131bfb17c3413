"""Context windowing: fit a conversation into a token budget without breaking it.

Kept: the leading system prompt, the last user turn and everything after it, and the newest
whole turns that fit. Never cut: between a tool call and its results (a cut only lands on a
user turn). Too big even then: `ContextOverflow` (the gateway answers
413, saying by how much), or the middle of the longest message is trimmed when asked.

Byte-stable prefix: a window that drops one old turn per new turn changes the prompt's start
every request and the engine's prefix cache never hits. Here the cut is *anchored*: it is
found by replaying the conversation message by message, and it moves only when the window
overflows the budget — then it jumps forward far enough to shrink the window to
`low_water` × budget. Earlier messages replay identically on every later request, so the
kept prefix stays byte-identical until the next jump (every ~(1 - low_water) × budget tokens).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prompts.interfaces import Message, TokenCounter, message_text

MESSAGE_OVERHEAD = 4  # role markers and separators a chat template adds around each message
SYSTEM_ROLES = ("system", "developer")


class ContextOverflow(Exception):
    """Even the system prompt plus the last turn exceed the budget."""

    def __init__(self, needed: int, budget: int) -> None:
        super().__init__(
            f"the system prompt and the last turn need {needed} tokens, {needed - budget} more "
            f"than this route's input budget of {budget} tokens")
        self.needed, self.budget, self.excess = needed, budget, needed - budget


@dataclass
class WindowSettings:
    max_input_tokens: int
    low_water: float = 0.6  # anchored mode: after a cut the window holds at most this share
    anchored: bool = True  # False: the naive sliding window (for measurements)
    reserve_tokens: int = 0  # kept free for a summary of the dropped turns
    trim_middle: bool = False


@dataclass
class WindowPlan:
    messages: list[Message]  # the window (without any summary; see `with_summary`)
    dropped: list[Message] = field(default_factory=list)
    system_count: int = 0  # leading system messages in `messages`
    trimmed_tokens: int = 0
    tokens: int = 0  # prompt tokens of `messages`

    def with_summary(self, summary: str) -> list[Message]:
        note = {"role": "system", "content": f"Summary of the earlier conversation: {summary}"}
        return [*self.messages[: self.system_count], note, *self.messages[self.system_count:]]


def message_cost(counter: TokenCounter, message: Message) -> int:
    """A message's own tokens plus template overhead (exactness is checked on the whole)."""
    cost = MESSAGE_OVERHEAD + counter.count_text(message_text(message))
    if message.get("tool_calls"):
        cost += counter.count_text(str(message["tool_calls"]))
    return cost


def plan_window(messages: list[Message], counter: TokenCounter, settings: WindowSettings,
                tools: list[dict] | None = None) -> WindowPlan:
    """The window for `messages` under `settings.max_input_tokens` (exact count checked)."""
    budget = settings.max_input_tokens
    total = counter.count_messages(messages, tools)
    sys_n = _leading_system(messages)
    if total <= budget:
        return WindowPlan(list(messages), system_count=sys_n, tokens=total)
    system, body = messages[:sys_n], messages[sys_n:]
    base = counter.count_messages(system, tools)  # system + template frame + generation prompt
    costs = [message_cost(counter, m) for m in body]
    allowed = budget - base - settings.reserve_tokens
    # cuts land on user turns only: the window opens with a user turn, and a tool call and
    # its results (which always follow the call, before the next user turn) stay together
    must = _last_user(body)
    boundaries = sorted({i for i, m in enumerate(body) if m.get("role") == "user"} | {must})
    if settings.anchored:
        cut = _anchored_cut(body, costs, boundaries, allowed, settings.low_water)
    else:
        cut = _newest_fit(costs, boundaries, allowed, len(body))
    cut = min(cut, must)
    while True:
        kept = [*system, *body[cut:]]
        tokens = counter.count_messages(kept, tools)
        if tokens + settings.reserve_tokens <= budget or cut >= must:
            break
        cut = next(b for b in boundaries if b > cut)  # estimate was short: drop one more turn
    plan = WindowPlan(kept, list(body[:cut]), sys_n, tokens=tokens)
    if tokens + settings.reserve_tokens > budget:
        if not settings.trim_middle:
            raise ContextOverflow(tokens + settings.reserve_tokens, budget)
        plan = _trim_longest(plan, counter, budget - settings.reserve_tokens, tools)
    return plan


def _leading_system(messages: list[Message]) -> int:
    n = 0
    while n < len(messages) - 1 and messages[n].get("role") in SYSTEM_ROLES:
        n += 1
    return n


def _last_user(body: list[Message]) -> int:
    for i in range(len(body) - 1, -1, -1):
        if body[i].get("role") == "user":
            return i
    return max(0, len(body) - 1)


def _newest_fit(costs: list[int], boundaries: list[int], allowed: int, end: int) -> int:
    """The naive window: the earliest boundary whose suffix fits."""
    suffix = sum(costs[:end])
    start = 0
    for b in boundaries:
        suffix -= sum(costs[start:b])
        start = b
        if suffix <= allowed:
            return b
    return boundaries[-1] if boundaries else 0


def _anchored_cut(body: list[Message], costs: list[int], boundaries: list[int],
                  allowed: int, low_water: float) -> int:
    """Replay the conversation; move the cut only on overflow, then down to the low-water mark."""
    prefix = [0]
    for c in costs:
        prefix.append(prefix[-1] + c)
    cut, last_user = 0, 0
    target = int(allowed * low_water)
    for end in range(1, len(body) + 1):
        if body[end - 1].get("role") == "user":
            last_user = end - 1
        if prefix[end] - prefix[cut] <= allowed:
            continue
        candidates = [b for b in boundaries if cut < b <= last_user]
        fitting = [b for b in candidates if prefix[end] - prefix[b] <= target]
        fitting = fitting or [b for b in candidates if prefix[end] - prefix[b] <= allowed]
        cut = fitting[0] if fitting else (candidates[-1] if candidates else cut)
    return cut


def _trim_longest(plan: WindowPlan, counter: TokenCounter, budget: int,
                  tools: list[dict] | None) -> WindowPlan:
    """Cut the middle out of the longest kept message until the window fits."""
    messages = [dict(m) for m in plan.messages]
    longest = max(range(len(messages)), key=lambda i: len(message_text(messages[i])))
    text = message_text(messages[longest])
    tokens = plan.tokens
    removed = 0
    for _ in range(8):
        excess = tokens - budget
        if excess <= 0:
            break
        chars_per_token = max(1.0, len(text) / max(1, counter.count_text(text)))
        drop = int((excess + 16) * chars_per_token * 1.1)
        if drop >= len(text):
            raise ContextOverflow(tokens, budget)
        head, tail = text[: (len(text) - drop) // 2], text[(len(text) + drop) // 2:]
        removed += excess
        text = f"{head}\n[... trimmed ...]\n{tail}"
        messages[longest]["content"] = text
        tokens = counter.count_messages(messages, tools)
    if tokens > budget:
        raise ContextOverflow(tokens, budget)
    return WindowPlan(messages, plan.dropped, plan.system_count, removed, tokens)
