"""What the judging tests share: a route with a judge, a grey-zone pair (CAPITAL, SEAT), a
judge whose verdict the test sets, and a miss asked and stored as the gateway does it."""

from __future__ import annotations

from cache.grey import GreyPair
from cache.judgement import Judgement
from cache.keys import CacheRequest
from cache.settings import CacheSettings

S = CacheSettings(route="r", exact_enabled=True, semantic_enabled=True, judge="scripted")
CAPITAL = "What is the capital of Australia?"
SEAT = "Which city serves as Australia's seat of government?"  # the verifier: about 0.52
SEAT_AGAIN = "which city serves as australia's seat of government"  # the same once normalised


def ask(text: str, **kw) -> CacheRequest:
    return CacheRequest(route=kw.pop("route", "r"), model="m",
                        messages=[{"role": "user", "content": text}],
                        params={"temperature": 0}, **kw)


class Scripted:
    """A judge whose verdict the test sets (None: it fails to answer)."""

    name = "scripted"

    def __init__(self, same: bool | None) -> None:
        self.same, self.asked = same, 0

    async def __call__(self, pair, entry):  # noqa: ANN001 - the Judge protocol's
        self.asked += 1
        return None if self.same is None else Judgement(self.same, self.name, "labelled")


async def grey_miss(cache, text: str, settings: CacheSettings = S, **kw) -> GreyPair:
    """Ask `text`, store its own answer as the gateway would, return its pair to judge."""
    req = ask(text, **kw)
    found = await cache.lookup(req, settings)
    assert found.status == "miss" and found.grey is not None
    await cache.store(req, {"content": f"fresh answer to {text}"}, settings, vector=found.vector)
    return GreyPair(req, settings, found.grey, {"content": f"fresh answer to {text}"},
                    found.vector)


