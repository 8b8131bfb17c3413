"""Block keys: what the fleet's picker calls a block of a prompt, the same on every gateway.

A key is the engine's own block hash (`engine.block_manager.hash_block`: the block's token
ids chained to its parent's key), with one addition: a prompt's first block is chained to a
root made from its extra keys (the cache salt), as vLLM folds `cache_salt` into the first
block only. Gateways compute keys from the prompt's token ids; KV events are translated to
keys from the token ids they carry (`gateway/fleet/kv_subscriber.py`), so the picker never
depends on how a replica hashes (the bundled engine and vLLM hash differently).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from engine import hash_block


def root_key(extra: Any) -> int | None:
    """The parent of a first block: None without extra keys, else a hash of them."""
    if not extra:
        return None
    digest = hashlib.blake2b(repr(tuple(extra)).encode(), digest_size=16).digest()
    return int.from_bytes(digest, "little")


def salt_extra(salt: str | None) -> tuple[str, ...] | None:
    """The first block's extra keys for a cache salt, as `headstart engine` publishes them."""
    return (salt,) if salt else None


def block_keys(token_ids: Sequence[int], block_size: int, extra: Any = None,
               parent: int | None = None) -> list[int]:
    """Keys of every full block of `token_ids` (a partial last block has none); `parent` is
    the key of the block before them, else the first block hangs from `root_key(extra)`."""
    keys: list[int] = []
    if parent is None:
        parent = root_key(extra)
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash_block(parent, token_ids[start:start + block_size])
        keys.append(parent)
    return keys
