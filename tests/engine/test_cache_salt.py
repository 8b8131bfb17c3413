"""`cache_salt` partitions the prefix cache: only requests with the same salt share blocks.

The block manager with tiny numbers (exact block ids), then the real model through
`AsyncEngine.generate` and through the engine's own server with the official SDK.
"""

from __future__ import annotations

import asyncio

import openai
import pytest

from engine.async_engine import AsyncEngine
from engine.block_manager import KVCacheManager, hash_block, salt_root
from engine.config import EngineConfig
from engine.errors import InvalidRequest
from engine.sampling_params import SamplingParams
from engine.sequence import Sequence
from engine.serving.server import create_engine_app
from tests.engine.test_serving_server import ThreadServer

DOC = ("The lighthouse keeper logged every ship that passed the northern cape, noting its flag, "
       "its cargo and the hour. ") * 12
MESSAGES = [{"role": "system", "content": DOC}, {"role": "user", "content": "Who kept the log?"}]
GREEDY = SamplingParams(temperature=0, max_tokens=2)


def salted(tokens: list[int], salt: str | None, name: str = "r") -> Sequence:
    seq = Sequence(name, tokens, SamplingParams())
    seq.cache_salt = salt
    return seq


def run(kv: KVCacheManager, seq: Sequence) -> list[int]:
    """Admit `seq` (adopting its cached prefix), compute it, release it; the adopted ids."""
    cached = kv.find_cached_prefix(seq)
    assert kv.allocate_slots(seq, seq.num_tokens - len(cached) * kv.block_size, cached)
    seq.num_computed_tokens = seq.num_tokens
    kv.cache_full_blocks(seq)
    kv.free(seq)
    return cached


def test_the_salt_enters_the_first_block_so_the_whole_chain_differs() -> None:
    kv = KVCacheManager(num_blocks=16, block_size=4)
    tokens = list(range(13))  # three full blocks and one token
    plain = kv.compute_block_hashes(salted(tokens, None))
    team_a = kv.compute_block_hashes(salted(tokens, "team-a"))
    team_a_again = kv.compute_block_hashes(salted(tokens, "team-a"))
    assert plain[0] == hash_block(None, tokens[:4])
    assert team_a[0] == hash_block(salt_root("team-a"), tokens[:4])
    assert team_a == team_a_again
    assert set(team_a).isdisjoint(plain)
    assert salt_root(None) is None and salt_root("a") != salt_root("b")


def test_another_salt_finds_nothing_and_the_same_salt_reuses_every_block() -> None:
    kv = KVCacheManager(num_blocks=16, block_size=4)
    tokens = list(range(13))
    assert run(kv, salted(tokens, "team-a", "a1")) == []
    assert run(kv, salted(tokens, "team-b", "b1")) == []  # same tokens, other tenant
    assert run(kv, salted(tokens, None, "plain")) == []  # and unsalted
    assert run(kv, salted(tokens, "team-a", "a2")) == [0, 1, 2]  # the first tenant's blocks


@pytest.fixture(scope="module")
def engine(smollm_bf16) -> AsyncEngine:
    eng = AsyncEngine(EngineConfig(kv_cache_memory_mb=64), loaded=tuple(smollm_bf16))
    yield eng
    asyncio.run(eng.shutdown())


async def cached_tokens(engine: AsyncEngine, salt: str | None) -> tuple[int, int]:
    """(prompt tokens, cached prompt tokens) of one request for MESSAGES under `salt`."""
    text = engine.tokenizer.apply_chat_template(MESSAGES)
    deltas = [d async for d in engine.generate(text, GREEDY, cache_salt=salt)]
    return deltas[0].prompt_tokens, deltas[0].cached_tokens


async def test_generate_keys_blocks_by_salt(engine: AsyncEngine) -> None:
    prompt_tokens, first = await cached_tokens(engine, "tenant-one")
    assert prompt_tokens > 200 and first == 0
    assert await cached_tokens(engine, "tenant-two") == (prompt_tokens, 0)
    assert await cached_tokens(engine, None) == (prompt_tokens, 0)
    _, repeat = await cached_tokens(engine, "tenant-one")
    assert repeat >= 0.9 * prompt_tokens


async def test_an_empty_salt_is_refused_before_queueing(engine: AsyncEngine) -> None:
    with pytest.raises(InvalidRequest) as err:
        await anext(engine.generate("hello", GREEDY, cache_salt=""))
    assert err.value.param == "cache_salt"


def test_the_engine_server_takes_cache_salt_in_the_body(smollm_bf16) -> None:
    engine = AsyncEngine(EngineConfig(kv_cache_memory_mb=64), loaded=tuple(smollm_bf16))
    server = ThreadServer(create_engine_app(engine, owns_engine=True)).start()
    try:
        client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused",
                               max_retries=0, timeout=120)

        def ask(salt: str) -> tuple[int, int]:
            answer = client.chat.completions.create(
                model="smollm2-135m-instruct", messages=MESSAGES, max_tokens=2, temperature=0,
                extra_body={"cache_salt": salt})
            usage = answer.usage
            return usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens

        prompt_tokens, first = ask("alpha")
        assert first == 0
        assert ask("beta") == (prompt_tokens, 0)
        assert ask("alpha")[1] >= 0.9 * prompt_tokens
        with pytest.raises(openai.BadRequestError) as err:
            ask("")
        assert err.value.body["param"] == "cache_salt"
    finally:
        server.stop()
