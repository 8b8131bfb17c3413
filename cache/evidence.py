"""What judges said about one cached entry: counts of judged outcomes by verifier score band,
and the questions it must never serve.

A grey-zone candidate (the exact checks let it through, the verifier scored it under the
route's threshold) is judged off the request path (cache/judging.py). Each judgement is
counted on the entry it nearly matched, in the band of the verifier's score: a "yes" says
the entry's answer served a question that read this far from it, a "no" that a question
this close needed another answer. The counts travel with the entry (its meta, so every
replica reads them through the store) and die with it (TTL, purge). An entry's threshold
only loosens with them (cache/budget.py): never without a "yes", never down to the band of
its closest "no". A question judged "no" is kept by its normal form (`question.form_key`)
and never served this entry, whatever the threshold.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any

# lower edges of the score bands a grey zone is counted in; the top band ends at the
# route's threshold (the shipped one is 0.9868)
BANDS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98)
MAX_REFUSED = 64  # questions refused per entry, kept newest last


def band_of(score: float) -> int:
    """The band `score` falls in; -1 under the lowest edge."""
    return bisect_right(BANDS, score) - 1


@dataclass
class Evidence:
    """Judged outcomes of one entry: `yes[b]`, `no[b]` per band b, the refused forms."""

    yes: list[int] = field(default_factory=lambda: [0] * len(BANDS))
    no: list[int] = field(default_factory=lambda: [0] * len(BANDS))
    refused: list[int] = field(default_factory=list)

    @property
    def said_yes(self) -> int:
        return sum(self.yes)

    @property
    def said_no(self) -> int:
        return sum(self.no)

    def veto(self) -> int:
        """The highest band with a "no" (-1: none): the entry's threshold stays above it."""
        return max((b for b, n in enumerate(self.no) if n), default=-1)

    def loosens(self, band: int) -> bool:
        """Whether a candidate in `band` may be served under the route's threshold at all:
        the entry has a "yes" and no "no" at or above that band."""
        return self.said_yes > 0 and band > self.veto()

    def refuses(self, form: int) -> bool:
        return form in self.refused

    def record(self, band: int, same: bool, form: int | None = None) -> None:
        """Count one judgement; a "no" also refuses the question's form from now on."""
        if 0 <= band < len(BANDS):
            (self.yes if same else self.no)[band] += 1
        if not same and form is not None and form not in self.refused:
            self.refused.append(form)
            del self.refused[:-MAX_REFUSED]

    def to_meta(self) -> dict[str, Any]:
        """Compact JSON: the non-zero counts by band, the refused forms."""
        return {"yes": {str(b): n for b, n in enumerate(self.yes) if n},
                "no": {str(b): n for b, n in enumerate(self.no) if n},
                "refused": list(self.refused)}

    @classmethod
    def from_meta(cls, meta: dict[str, Any] | None) -> Evidence | None:
        """What `to_meta` wrote (None stays None: an entry nobody judged)."""
        if not meta:
            return None
        found = cls(refused=[int(f) for f in meta.get("refused") or []])
        for name in ("yes", "no"):
            counts = getattr(found, name)
            for b, n in (meta.get(name) or {}).items():
                if 0 <= int(b) < len(BANDS):
                    counts[int(b)] = int(n)
        return found
