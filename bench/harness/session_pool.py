"""Which conversation each arriving request belongs to.

Requests arrive open-loop at the offered rate. Each arrival continues the conversation that
has been ready longest — its previous answer is back and its user's think time is over —
or, when none is ready, starts the next new session. So the request rate is the offered
rate from the first second, while every conversation still goes turn by turn, each turn
carrying the earlier answers.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from bench.harness.workloads import Session


@dataclass
class ActiveSession:
    """A conversation in progress: its history and the turn it sends next."""

    session: Session
    next_turn: int = 0
    history: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.session.system and not self.history:
            self.history.append({"role": "system", "content": self.session.system})

    @property
    def headers(self) -> dict[str, str]:
        """Multi-turn sessions say who they are, so the engine can keep their KV blocks."""
        return {"x-session-id": self.session.id} if len(self.session.turns) > 1 else {}

    def start_turn(self) -> tuple[int, list[dict]]:
        """The turn index and the messages to send for it."""
        turn = self.next_turn
        self.history.append({"role": "user", "content": self.session.turns[turn].user})
        return turn, list(self.history)

    def finish_turn(self, answer: str) -> None:
        self.history.append({"role": "assistant", "content": answer})
        self.next_turn += 1

    @property
    def finished(self) -> bool:
        return self.next_turn >= len(self.session.turns)


class SessionPool:
    """Hands out conversations to arrivals; deterministic for a given order of events."""

    def __init__(self, sessions: list[Session]) -> None:
        self._new = iter(sessions)
        self._ready: list[tuple[float, int, ActiveSession]] = []  # (ready_at, seq, session)
        self._seq = 0
        self.started = 0

    def take(self, now: float) -> ActiveSession | None:
        """The session for a request arriving at `now`; None when no session is left."""
        if self._ready and self._ready[0][0] <= now:
            return heapq.heappop(self._ready)[2]
        session = next(self._new, None)
        if session is None:
            return None
        self.started += 1
        return ActiveSession(session)

    def release(self, active: ActiveSession, now: float, ok: bool) -> None:
        """A request of `active` ended at `now`; it is ready again after the think time."""
        if not ok or active.finished:
            return
        ready_at = now + active.session.turns[active.next_turn].think_s
        self._seq += 1
        heapq.heappush(self._ready, (ready_at, self._seq, active))

    def waiting(self) -> int:
        """Conversations with turns left, waiting for think time or an arrival."""
        return len(self._ready)
