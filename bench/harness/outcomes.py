"""What became of the requests of a load run, for the reliability benchmarks
(bench/experiments/overload.py, bench/experiments/soak.py): answered, shed (429), a server error (5xx) or another
failure; with the answered ones' TTFT. Also starts `headstart serve` on a config, and
makes SIGTERM stop what the benchmark started."""

from __future__ import annotations

import signal
import sys
from dataclasses import dataclass, field

from bench.harness.stats import RequestRecord, percentile
from bench.harness.targets import _write_yaml
from tests.support.processes import ServerProcess, free_port, headstart_cmd


@dataclass
class Tally:
    offered: int = 0
    answered: int = 0
    shed: int = 0
    server_errors: int = 0
    other_errors: int = 0
    ttfts_s: list[float] = field(default_factory=list, repr=False)

    def add(self, record: RequestRecord) -> None:
        """Count one load-generator record (its `error` is the SDK's exception text)."""
        self.offered += 1
        error = record.error or ""
        if record.ok:
            self.answered += 1
            if record.ttft_s is not None:
                self.ttfts_s.append(record.ttft_s)
        elif error.startswith("RateLimitError"):
            self.shed += 1
        elif error.startswith("InternalServerError") or "Error code: 5" in error:
            self.server_errors += 1
        else:
            self.other_errors += 1

    def to_json(self) -> dict:
        return {"offered": self.offered, "answered": self.answered, "shed": self.shed,
                "server_errors": self.server_errors, "other_errors": self.other_errors,
                "ttft_p50_ms": self.ttft_ms(50), "ttft_p95_ms": self.ttft_ms(95)}

    def ttft_ms(self, p: float) -> float | None:
        value = percentile([t * 1000 for t in self.ttfts_s], p)
        return None if value is None else round(value, 1)


def serve(config: dict, prefix: str) -> ServerProcess:
    """`headstart serve` on `config` (a dict written to a YAML file), once healthy."""
    port = free_port()
    path = _write_yaml(config, prefix)
    return ServerProcess(headstart_cmd("serve", "--config", path, "--port", str(port),
                                       "--log-level", "warning"), port).start()


def stop_servers_on_sigterm() -> None:
    """SIGTERM ends the benchmark through its `finally` blocks, which stop the servers it
    started (by default it would leave them running)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
