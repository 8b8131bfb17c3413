"""A prompt's KV blocks copied out of one engine's pool and into another's: the two ends of a
prefill/decode handover (`headstart engine --role prefill|decode`).

Blocks are named by their hashes (engine/block_hash.py), so two engines agree on which block
holds which tokens without sharing block ids. The copies are the second tier's lossless
ones (`SlotStore`, engine/kv_tier_store.py) over a buffer of whole blocks, which the wire
(engine/kv_handover_wire.py) carries as it is:

    prefill pool --save--> [n, layers, 2, block_size, kv_heads, head_dim] --TCP--> --load--> decode pool

A prompt's last partial block is never in the prefix cache: the prefill engine keeps a copy
of it when the request ends (`TailStore`, a few hundred at most, oldest dropped first) under
its `tail_hash`, and serves it after the full blocks. With it and the prefill's first token
the decode engine computes none of the prompt (`Sequence.handed`), and its answer is the
one a single engine would have given, bit for bit.

Both ends run on their engine's step thread (`AsyncEngine.executor`), between two steps, so
no step reads a block while it is copied. Nothing here waits on the network.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence as Seq
from dataclasses import dataclass

import torch
from torch import Tensor

from engine.block_hash import extend_block_hashes, tail_hash
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


class TailStore:
    """The last partial blocks of the prompts a prefill engine read for a decode engine, by
    `tail_hash`, the `capacity` newest. `keep` is the engine's `LLMEngine.keep_tail`."""

    def __init__(self, llm: LLMEngine, capacity: int = 256) -> None:
        self.llm = llm
        self.capacity = capacity
        self.tails: OrderedDict[int, Tensor] = OrderedDict()

    def keep(self, seq: Sequence) -> None:
        """Copy the finished `seq`'s prompt tail out of the pool. Step thread."""
        kv, prompt = self.llm.kv, seq.token_ids[:seq.num_prompt_tokens]
        key = tail_hash(kv.compute_block_hashes(seq), prompt, kv.block_size, seq.cache_salt)
        index = seq.num_prompt_tokens // kv.block_size
        if key is None or seq.num_computed_tokens < seq.num_prompt_tokens \
                or index >= len(seq.block_table):
            return
        self.tails[key] = self.llm.runner.kv_cache[:, :, seq.block_table[index]].clone()
        self.tails.move_to_end(key)
        while len(self.tails) > self.capacity:
            self.tails.popitem(last=False)

    def get(self, key: int) -> Tensor | None:
        return self.tails.get(key)


def export_blocks(llm: LLMEngine, hashes: Seq[int],
                  tails: TailStore | None = None) -> tuple[int, bytearray]:
    """(count, buffer): the leading run of `hashes` the pool holds, copied out block by
    block, and then, when the run reaches the last hash and `tails` keeps it, that prompt
    tail. Step thread."""
    block_ids = llm.kv.pool_blocks(hashes)
    tail = None
    if tails is not None and len(block_ids) == len(hashes) - 1:
        tail = tails.get(hashes[-1])
    count = len(block_ids) + (tail is not None)
    layout = BlockLayout.of(llm.runner.kv_cache)
    buffer = bytearray(count * layout.bytes_per_block)
    slots = layout.slots(buffer, count)
    SlotStore(llm.runner.kv_cache, slots).save(block_ids, list(range(len(block_ids))))
    if tail is not None:
        slots[-1].copy_(tail)
    return count, buffer


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
