"""Prime a target before a sweep: each shared prefix of the workload's pool read once.

A deployment has seen its apps' system prompts and its documents before; a benchmark that
starts cold measures the first visits instead, and only in whichever run happens to come
first. Priming sends, one at a time, the first turn of one session per group (an app, a
document, a question family) with `max_tokens=1`, unmeasured, so every target starts its
sweep with the same warm prefixes. One-token answers end in `length`, which no cache
stores: priming warms prefix caches, never response caches.
"""

from __future__ import annotations

import sys
import time

from openai import AsyncOpenAI

from bench.harness.loadgen import LoadConfig, normalize_base_url
from bench.harness.session_pool import ActiveSession
from bench.harness.workloads import Session, build_sessions

PRIMING_SEED_OFFSET = 7_919  # the priming users are not any run's users


def priming_sessions(config: LoadConfig, count: int = 200) -> list[Session]:
    """One session per shared group of the pool (a group at least two of `count` sampled
    sessions draw on: `unique` has none), in group order."""
    pool_seed = config.seed if config.pool_seed is None else config.pool_seed
    sessions = build_sessions(config.workload, count, config.seed + PRIMING_SEED_OFFSET,
                              config.sizes, pool_seed=pool_seed)
    groups: dict[str, list[Session]] = {}
    for session in sessions:
        groups.setdefault(session.group, []).append(session)
    return [members[0] for _, members in sorted(groups.items()) if len(members) > 1]


async def prime(config: LoadConfig) -> int:
    """Send each group's first turn once; returns how many succeeded."""
    sessions = priming_sessions(config)
    ok = 0
    t0 = time.perf_counter()
    async with AsyncOpenAI(base_url=normalize_base_url(config.base_url),
                           api_key=config.api_key, max_retries=0,
                           timeout=config.request_timeout_s) as client:
        for session in sessions:
            _, messages = ActiveSession(session).start_turn()
            try:
                await client.chat.completions.create(
                    model=config.model, messages=messages, max_tokens=1,
                    temperature=config.sizes.temperature,
                    extra_headers={"cache-control": "no-store"})
                ok += 1
            except Exception as exc:  # noqa: BLE001 - priming is best effort
                print(f"[bench] priming {session.group}: {type(exc).__name__}: {exc}",
                      file=sys.stderr)
    print(f"[bench] primed {ok}/{len(sessions)} {config.workload} groups in "
          f"{time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    return ok
