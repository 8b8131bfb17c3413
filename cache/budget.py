"""A route's error budget: how far under the verifier's threshold its entries may be served,
learned from judged grey-zone pairs within `max_false_hit_rate`.

vCache's idea ("verified semantic prompt caching"): a threshold per cached entry, learned
online from checked outcomes, kept under an error bound the user sets. Here an entry may be
served under the route's threshold only when its own judged outcomes allow it
(`Evidence.loosens`: a "yes", and no "no" at or above the candidate's band), and only down
to the route's learned band: the lowest band b such that the 95% upper bound of the "no"
share among all judged pairs scoring in b or above (the verifier's calibration on this
route's traffic), times how many candidates of such entries the route sees there, stays
within `max_false_hit_rate` of the route's semantic hits:

    est(b) = upper(no_b / judged_b) * eligible_b / (hits_at_threshold + eligible_b)

`eligible_b` counts the candidates whose entries could loosen: those judged (scaled up by
the pairs shed unjudged) and those already served under the threshold. Hits at or above the
verifier's own threshold count as right: its held-out sets serve no near miss (0 of 536).
A route's band is learned per gateway replica, from the judgements it made; every judgement
counts, so the band tightens again when "no"s come in (one would-be hit in `EXPLORE_EVERY`
under the threshold is answered as a miss and judged, so the evidence keeps coming).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cache.evidence import BANDS, Evidence

MIN_JUDGED = 40  # judged candidates a band and those above it need before it loosens
MIN_IN_BAND = 5  # judged candidates of its own a band needs: none loosens on others' evidence
EXPLORE_EVERY = 8  # one would-be hit in this many under the threshold is judged instead
Z = 1.645  # one-sided 95%


def upper_bound(k: int, n: int, z: float = Z) -> float:
    """The Wilson score upper bound of a rate of k in n (1.0 with nothing seen)."""
    if n == 0:
        return 1.0
    p = k / n
    centre = p + z * z / (2 * n)
    half = z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5)
    return min(1.0, (centre + half) / (1 + z * z / n))


@dataclass
class RouteBudget:
    """One route's judged counts (of candidates whose entry could loosen), hits and band."""

    max_false_hit_rate: float = 0.01
    yes: list[int] = field(default_factory=lambda: [0] * len(BANDS))  # judged, by band
    no: list[int] = field(default_factory=lambda: [0] * len(BANDS))
    eligible: list[int] = field(default_factory=lambda: [0] * len(BANDS))  # of those judged
    learned: list[int] = field(default_factory=lambda: [0] * len(BANDS))  # hits under
    hits: int = 0  # semantic hits at or above the verifier's threshold
    judged: int = 0
    shed: int = 0  # grey-zone pairs dropped unjudged
    band: int | None = None  # the lowest band served under the threshold; None: none
    _explore: int = 0

    def bar(self, evidence: Evidence | None, threshold: float) -> float:
        """The verifier score a candidate of an entry with `evidence` needs: `threshold`,
        or lower where the entry's evidence and the route's band both allow."""
        if self.band is None or evidence is None or evidence.said_yes == 0:
            return threshold
        lowest = max(self.band, evidence.veto() + 1)
        return min(threshold, BANDS[lowest]) if lowest < len(BANDS) else threshold

    def explore(self) -> bool:
        """Whether this would-be hit under the threshold is answered as a miss and judged."""
        self._explore = (self._explore + 1) % EXPLORE_EVERY
        return self._explore == 0

    def record_hit(self, band: int | None) -> None:
        """A semantic hit: at the threshold (`band` None) or in `band` under it."""
        if band is None:
            self.hits += 1
        else:
            self.learned[band] += 1
            self.band = self.learn()  # what is served under the threshold spends the budget

    def record_judgement(self, band: int, same: bool, eligible: bool) -> None:
        """One judged candidate; `eligible`: its entry could have loosened to its band."""
        self.judged += 1
        if 0 <= band < len(BANDS):
            (self.yes if same else self.no)[band] += 1
            self.eligible[band] += eligible
            self.band = self.learn()

    def record_shed(self) -> None:
        self.shed += 1

    def seen(self, lowest: int) -> float:
        """Candidates of entries that could loosen, in bands >= `lowest`: those judged,
        scaled up by the pairs shed unjudged, and those served under the threshold."""
        scale = (self.judged + self.shed) / self.judged if self.judged else 1.0
        return sum(self.eligible[lowest:]) * scale + sum(self.learned[lowest:])

    def learn(self) -> int | None:
        """The lowest band with judgements of its own whose estimate, and that of every
        band above it with enough judgements, stays within the bound (see the module's
        docstring)."""
        found = None
        for b in range(len(BANDS) - 1, -1, -1):
            n = sum(self.yes[b:]) + sum(self.no[b:])
            if n < MIN_JUDGED or self.yes[b] + self.no[b] < MIN_IN_BAND:
                continue
            seen = self.seen(b)
            if upper_bound(sum(self.no[b:]), n) * seen / (self.hits + seen) \
                    > self.max_false_hit_rate:
                break
            found = b
        return found

    def estimate(self) -> float:
        """The estimated share of this route's semantic hits that were wrong: the hits
        served under the threshold times the "no" share judged in their bands (Laplace),
        over all semantic hits."""
        under = sum(self.learned)
        if not under:
            return 0.0
        lowest = min(b for b, n in enumerate(self.learned) if n)
        n = sum(self.yes[lowest:]) + sum(self.no[lowest:])
        rate = (sum(self.no[lowest:]) + 1) / (n + 2)
        return rate * under / (self.hits + under)


class Budgets:
    """The routes' budgets, made on first use with the route's bound."""

    def __init__(self) -> None:
        self._routes: dict[str, RouteBudget] = {}

    def route(self, name: str, max_false_hit_rate: float = 0.01) -> RouteBudget:
        found = self._routes.get(name)
        if found is None:
            found = self._routes[name] = RouteBudget(max_false_hit_rate)
        return found

    def snapshot(self) -> dict[str, tuple[float, float | None]]:
        """{route: (estimated false-hit share, lowest bar served or None)}."""
        return {name: (b.estimate(), BANDS[b.band] if b.band is not None else None)
                for name, b in sorted(self._routes.items())}
