"""Per-request records and the run summary: percentiles, throughput, goodput, cache outcomes.

A request that failed or never produced a token missed every TTFT target, so it counts as
an infinite TTFT in the percentiles and as outside the SLO in goodput; an overloaded
server cannot look good by dropping requests. A request still streaming when the run ends
keeps the TTFT it had (it is only missing from end-to-end numbers and throughput).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field

INF = math.inf


@dataclass
class RequestRecord:
    """What the load generator saw for one streamed request (times in seconds)."""

    session_id: str
    turn: int
    sent_s: float  # when it was sent, from the start of the run
    ttft_s: float | None = None  # first content token
    e2e_s: float | None = None  # last byte
    itl_s: list[float] = field(default_factory=list)  # gaps between content chunks
    completion_tokens: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    cache: str = "none"  # the `x-cache` header; "none" when the server sends none
    error: str | None = None
    warmup: bool = False
    unfinished: bool = False  # the run ended (drain timeout) before the answer did

    @property
    def ok(self) -> bool:
        return self.error is None and self.e2e_s is not None

    def tpot_s(self) -> float | None:
        """Time per output token after the first (None for one-token answers)."""
        if not self.ok or self.ttft_s is None or self.completion_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.completion_tokens - 1)


def percentile(values: list[float], p: float) -> float | None:
    """The p-th percentile (0–100) with linear interpolation, as numpy's default."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100.0
    lo, hi = math.floor(rank), math.ceil(rank)
    if lo == hi or ordered[hi] == ordered[lo]:
        return ordered[lo]
    if math.isinf(ordered[hi]):
        return INF
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


def goodput_share(ttfts_s: list[float], slo_ms: float) -> float:
    """Share of requests whose TTFT met the SLO (failed requests carry an infinite TTFT)."""
    if not ttfts_s:
        return 0.0
    return sum(1 for t in ttfts_s if t * 1000.0 <= slo_ms) / len(ttfts_s)


def effective_ttft_s(record: RequestRecord) -> float:
    """The TTFT the user saw; infinite when no token came (error, or cut off waiting)."""
    return INF if record.ttft_s is None or record.error is not None else record.ttft_s


def _ms_percentiles(values_s: list[float]) -> dict[str, float | None]:
    out = {}
    for p in (50, 95, 99):
        v = percentile(values_s, p)
        out[f"p{p}"] = None if v is None else (INF if math.isinf(v) else round(v * 1000.0, 2))
    return out


@dataclass
class RunSummary:
    """The numbers of one run of one workload at one rate against one target."""

    target: str
    workload: str
    rate: float
    duration_s: float
    requests: int
    errors: int
    unfinished: int  # still streaming when the run ended; their TTFT counts
    ttft_ms: dict[str, float | None]
    tpot_ms: dict[str, float | None]
    itl_ms: dict[str, float | None]
    e2e_ms: dict[str, float | None]
    throughput_rps: float
    output_tokens_per_s: float
    goodput: float  # share of requests within the TTFT SLO
    goodput_rps: float
    slo_ms: float
    cache: dict[str, int]
    prompt_tokens: int
    cached_tokens: int
    ttfts_ms: list[float] = field(default_factory=list)  # every measured TTFT, for CDFs
    error_samples: list[str] = field(default_factory=list)  # up to 3 distinct errors

    def p95_ttft_ms(self) -> float:
        v = self.ttft_ms.get("p95")
        return INF if v is None else v

    def within_slo(self) -> bool:
        return self.requests > 0 and self.p95_ttft_ms() <= self.slo_ms

    def to_dict(self) -> dict:
        return _json_safe(asdict(self))

    @classmethod
    def from_dict(cls, data: dict) -> RunSummary:
        """Read back `to_dict()` output (a report.json run)."""
        return cls(**_from_json(data))


def _json_safe(value):
    """JSON has no infinity: write it as the string "inf"."""
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def _from_json(value):
    if value == "inf":
        return INF
    if isinstance(value, dict):
        return {k: _from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    return value


def summarize(records: list[RequestRecord], *, target: str, workload: str, rate: float,
              duration_s: float, slo_ms: float) -> RunSummary:
    """Summarise the measured (non-warm-up) records of one run of `duration_s` seconds."""
    measured = [r for r in records if not r.warmup]
    ttfts = [effective_ttft_s(r) for r in measured]
    ok = [r for r in measured if r.ok]
    tpots = [t for r in ok if (t := r.tpot_s()) is not None]
    itls = [gap for r in ok for gap in r.itl_s]
    duration = max(duration_s, 1e-9)
    share = goodput_share(ttfts, slo_ms)
    return RunSummary(
        target=target, workload=workload, rate=rate, duration_s=duration_s,
        requests=len(measured), errors=sum(r.error is not None for r in measured),
        unfinished=sum(r.unfinished for r in measured),
        ttft_ms=_ms_percentiles(ttfts), tpot_ms=_ms_percentiles(tpots),
        itl_ms=_ms_percentiles(itls), e2e_ms=_ms_percentiles([r.e2e_s for r in ok]),
        throughput_rps=round(len(ok) / duration, 3),
        output_tokens_per_s=round(sum(r.completion_tokens for r in ok) / duration, 2),
        goodput=round(share, 4), goodput_rps=round(share * len(measured) / duration, 3),
        slo_ms=slo_ms, cache=dict(Counter(r.cache for r in measured)),
        prompt_tokens=sum(r.prompt_tokens for r in ok),
        cached_tokens=sum(r.cached_tokens for r in ok),
        ttfts_ms=[round(t * 1000.0, 2) if not math.isinf(t) else INF for t in ttfts],
        error_samples=list(dict.fromkeys(r.error for r in measured if r.error))[:3],
    )
