"""A prompt's KV blocks copied out of one engine's pool and into another's: the two ends of a
prefill/decode handover (`headstart engine --role prefill|decode`).

Blocks are named by their hashes (engine/block_hash.py), so two engines agree on which block
holds which tokens without sharing block ids. The copies are the second tier's lossless
ones (`SlotStore`, engine/kv_tier_store.py) over a buffer of whole blocks, which the wire
(engine/kv_handover_wire.py) carries as it is:

    prefill pool --save--> [n, layers, 2, block_size, kv_heads, head_dim] --TCP--> --load--> decode pool

Both ends run on their engine's step thread (`AsyncEngine.executor`), between two steps, so
no step reads a block while it is copied. Nothing here waits on the network.
"""

from __future__ import annotations

from collections.abc import Sequence as Seq
from dataclasses import dataclass

import torch
from torch import Tensor

from engine.block_hash import extend_block_hashes
from engine.kv_tier_store import SlotStore
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from engine.sequence import Sequence


@dataclass
class HandoverStats:
    """What moved, both ways (the `headstart_engine_kv_handover_*` series). Blocks sent are
    counted on the step thread, blocks received on the event loop: one writer each."""

    sent_blocks: int = 0
    sent_bytes: int = 0
    sent_s: float = 0.0  # copying out of the pool
    received_blocks: int = 0
    received_bytes: int = 0
    received_s: float = 0.0  # fetching over the wire and loading into the pool
    failures: int = 0  # handovers the decode engine gave up on (and computed instead)


class HandoverError(ValueError):
    """Blocks that cannot be loaded here (another model's, a short buffer): the decode
    engine computes those tokens itself instead."""


@dataclass(frozen=True)
class BlockLayout:
    """One block as a pool holds it: two engines hand blocks over only when theirs agree."""

    shape: tuple[int, ...]  # layers, 2, block_size, kv_heads, head_dim
    dtype: str  # torch's name: bfloat16, float32, ...

    @classmethod
    def of(cls, kv_cache: Tensor) -> BlockLayout:
        return cls(tuple(kv_cache[:, :, 0].shape), str(kv_cache.dtype).removeprefix("torch."))

    @property
    def bytes_per_block(self) -> int:
        count = 1
        for n in self.shape:
            count *= n
        return count * getattr(torch, self.dtype).itemsize

    def slots(self, buffer: bytearray | memoryview, count: int) -> Tensor:
        """`count` blocks of `buffer` as the tensor a `SlotStore` copies through."""
        if memoryview(buffer).nbytes < count * self.bytes_per_block:
            raise HandoverError(f"{len(buffer)} bytes cannot hold {count} blocks")
        dtype = getattr(torch, self.dtype)
        if count == 0:
            return torch.empty(0, *self.shape, dtype=dtype)
        flat = torch.frombuffer(buffer, dtype=dtype,
                                count=count * self.bytes_per_block // dtype.itemsize)
        return flat.view(count, *self.shape)


def prompt_sequence(token_ids: Seq[int], block_size: int,
                    cache_salt: str | None = None) -> Sequence:
    """A sequence standing for a prompt, with the hashes of its full blocks (as the block
    manager chains them), to name the blocks a handover carries and report them in KV
    events. Holds no blocks; never scheduled."""
    seq = Sequence("handover", list(token_ids), SamplingParams())
    seq.cache_salt = cache_salt
    extend_block_hashes(seq.block_hashes, seq.token_ids, block_size, cache_salt)
    return seq


def export_blocks(llm: LLMEngine, hashes: Seq[int]) -> tuple[int, bytearray]:
    """(count, buffer): the leading run of `hashes` the pool holds, copied out block by
    block. Step thread."""
    block_ids = llm.kv.pool_blocks(hashes)
    layout = BlockLayout.of(llm.runner.kv_cache)
    buffer = bytearray(len(block_ids) * layout.bytes_per_block)
    store = SlotStore(llm.runner.kv_cache, layout.slots(buffer, len(block_ids)))
    store.save(block_ids, list(range(len(block_ids))))
    return len(block_ids), buffer


def import_blocks(llm: LLMEngine, seq: Sequence, first: int, count: int,
                  layout: BlockLayout, buffer: bytearray | memoryview) -> int:
    """Load `count` handed blocks (blocks `first`.. of `seq`, in `buffer`) into fresh pool
    blocks, registered under their hashes: `seq`'s prompt then finds them as a cached
    prefix. Returns how many were loaded (fewer when the pool is short, or holds some).
    Step thread."""
    if layout != BlockLayout.of(llm.runner.kv_cache):
        raise HandoverError(f"blocks of {layout} cannot go into a pool of "
                            f"{BlockLayout.of(llm.runner.kv_cache)}")
    slots = layout.slots(buffer, count)
    taken = llm.kv.import_blocks(seq, first, count)
    if llm.tier is not None:
        llm.tier.flush()  # blocks evicted to make room are saved before they are overwritten
    SlotStore(llm.runner.kv_cache, slots).load([i - first for i, _ in taken],
                                               [block_id for _, block_id in taken])
    return len(taken)
