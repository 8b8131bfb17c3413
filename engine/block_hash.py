"""Block hashes: what names a full KV block in every process (the block manager's prefix
index, KV events, a fleet's router, the second tier)."""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Sequence as Seq


def hash_block(parent_hash: int | None, token_ids: Seq[int]) -> int:
    """A stable 128-bit hash of a block's tokens chained to its parent's (same in every process)."""
    h = hashlib.blake2b(digest_size=16)
    h.update((parent_hash or 0).to_bytes(16, "little"))
    h.update(array("q", token_ids).tobytes())
    return int.from_bytes(h.digest(), "little")


def salt_root(cache_salt: str | None) -> int | None:
    """The parent hash of a salted sequence's first block (None: unsalted). A request's
    `cache_salt` enters its first block's hash, so its whole chain differs from the same
    tokens under another salt: tenants with different salts never share a prefix."""
    if cache_salt is None:
        return None
    return int.from_bytes(hashlib.blake2b(b"cache_salt:" + cache_salt.encode(),
                                          digest_size=16).digest(), "little")


def extend_block_hashes(hashes: list[int], token_ids: Seq[int], block_size: int,
                        cache_salt: str | None) -> list[int]:
    """Extend `hashes` (the chain so far) to cover every full block of `token_ids`."""
    for i in range(len(hashes), len(token_ids) // block_size):
        parent = hashes[i - 1] if i else salt_root(cache_salt)
        hashes.append(hash_block(parent, token_ids[i * block_size:(i + 1) * block_size]))
    return hashes


def tail_hash(hashes: Seq[int], token_ids: Seq[int], block_size: int,
              cache_salt: str | None) -> int | None:
    """The hash of the last partial block of `token_ids` (None when they end on a block
    boundary), chained to the full blocks' `hashes` as a full block is: what a prefill
    engine keeps a prompt's tail under for the decode engine it hands the prompt to. Fewer
    tokens than a block, so it never names a full block."""
    num_full = len(token_ids) // block_size
    if len(token_ids) == num_full * block_size:
        return None
    parent = hashes[num_full - 1] if num_full else salt_root(cache_salt)
    return hash_block(parent, token_ids[num_full * block_size:])
