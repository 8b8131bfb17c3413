"""Where the second KV tier keeps block contents: host RAM as int8, or a file on disk.

`Int8Store` (`--kv-offload-mb N`): each block's K and V as int8 with one float32 scale per
token, layer and head (absmax over the head's dimensions / 127): 1.06 bytes per value
instead of the pool's 2, so the tier holds about twice the blocks its megabytes would hold
in bfloat16. Lossy, within the int8 limits the engine holds itself to
(tests/engine/test_kv_tier_store.py). `DiskStore` (`--kv-offload-dir DIR` as well): the
blocks' own bytes in one file under DIR, memory-mapped, so a reload is exact and the
page cache keeps the hot part in RAM while the rest can go to disk. Both copy a block at a
time (its 2 x layers runs of block_size x kv_heads x head_dim values: memcpy-sized, where
torch's index ops along the pool's block axis go element by element) through a scratch
buffer made once, so a flush allocates nothing. The block manager queues the copies
(engine/kv_tier.py).

    pool  kv_cache [layers, 2, blocks, block_size, kv_heads, head_dim]   (the runner's)
    tier  [slots, layers, 2, block_size, kv_heads, head_dim]            (a block a slot)
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from engine.config import BYTES_PER_MB, EngineConfig
from engine.kv_tier import SecondTier

_INT_VIEW = {2: (torch.int16, np.int16), 4: (torch.int32, np.int32)}


@contextmanager
def one_thread(kv_cache: Tensor) -> Iterator[None]:
    """Copies of one block on the CPU run on one thread: split over more, each small op
    waits on the slowest thread, and on a busy host one descheduled thread stalls every op
    (126 blocks took 11 s on two threads beside other work, 0.2 s on one)."""
    threads = torch.get_num_threads()
    if kv_cache.device.type != "cpu" or threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class Int8Store:
    """Blocks as int8 in host RAM, one scale per (token, layer, K|V, head)."""

    medium = "CPU"

    def __init__(self, kv_cache: Tensor, capacity: int) -> None:
        self.kv_cache = kv_cache
        layers, two, _, block, heads, dim = kv_cache.shape
        self.q = torch.zeros(capacity, layers, two, block, heads, dim, dtype=torch.int8)
        self.scale = torch.zeros(capacity, layers, two, block, heads, 1, dtype=torch.float32)
        self._x = torch.empty(layers, two, block, heads, dim, dtype=torch.float32)  # scratch
        self._abs = torch.empty_like(self._x)

    @staticmethod
    def block_bytes(kv_cache: Tensor) -> int:
        layers, two, _, block, heads, dim = kv_cache.shape
        return layers * two * block * heads * (dim + 4)

    @property
    def bytes_per_block(self) -> int:
        return self.block_bytes(self.kv_cache)

    def save(self, block_ids: list[int], slots: list[int]) -> None:
        x = self._x
        with one_thread(self.kv_cache):
            for block_id, slot in zip(block_ids, slots, strict=True):
                x.copy_(self.kv_cache[:, :, block_id])
                scale = self.scale[slot]
                torch.amax(torch.abs(x, out=self._abs), -1, keepdim=True, out=scale)
                scale.clamp_(min=1e-30).div_(127.0)
                self.q[slot].copy_(x.div_(scale).round_().clamp_(-127, 127))

    def load(self, slots: list[int], block_ids: list[int]) -> None:
        x = self._x
        with one_thread(self.kv_cache):
            for slot, block_id in zip(slots, block_ids, strict=True):
                x.copy_(self.q[slot]).mul_(self.scale[slot])
                self.kv_cache[:, :, block_id].copy_(x)


class SlotStore:
    """Blocks byte for byte in `slots` [n, layers, 2, block_size, kv_heads, head_dim] of the
    pool's dtype: lossless. The disk tier's file is such a tensor; so is a KV handover's
    buffer between two engines (engine/kv_handover.py)."""

    medium = "CPU"

    def __init__(self, kv_cache: Tensor, slots: Tensor) -> None:
        assert slots.dtype == kv_cache.dtype and slots.shape[1:] == kv_cache[:, :, 0].shape, \
            f"slots {tuple(slots.shape)} {slots.dtype} do not hold this pool's blocks"
        self.kv_cache = kv_cache
        self.slots = slots

    @staticmethod
    def block_bytes(kv_cache: Tensor) -> int:
        return kv_cache[:, :, 0].numel() * kv_cache.element_size()

    @property
    def bytes_per_block(self) -> int:
        return self.block_bytes(self.kv_cache)

    def save(self, block_ids: list[int], slots: list[int]) -> None:
        with one_thread(self.kv_cache):
            for block_id, slot in zip(block_ids, slots, strict=True):
                self.slots[slot].copy_(self.kv_cache[:, :, block_id])

    def load(self, slots: list[int], block_ids: list[int]) -> None:
        with one_thread(self.kv_cache):
            for slot, block_id in zip(slots, block_ids, strict=True):
                self.kv_cache[:, :, block_id].copy_(self.slots[slot])


class DiskStore(SlotStore):
    """Blocks byte for byte in one memory-mapped file under `directory` (unlinked once open,
    so nothing is left behind)."""

    medium = "DISK"

    def __init__(self, kv_cache: Tensor, capacity: int, directory: str) -> None:
        _, np_int = _INT_VIEW[kv_cache.element_size()]
        layers, two, _, block, heads, dim = kv_cache.shape
        path = Path(directory) / f"headstart-kv-tier-{os.getpid()}-{id(self):x}.bin"
        self.file = np.memmap(path, dtype=np_int, mode="w+",
                              shape=(capacity, layers, two, block, heads, dim))
        path.unlink()
        super().__init__(kv_cache, torch.from_numpy(self.file).view(kv_cache.dtype))


def open_tier(config: EngineConfig, kv_cache: Tensor) -> SecondTier | None:
    """The second tier `config` asks for (`kv_offload_mb`, `kv_offload_dir`), or None."""
    if not config.kv_offload_mb:
        return None
    budget = config.kv_offload_mb * BYTES_PER_MB
    if config.kv_offload_dir:
        capacity = budget // DiskStore.block_bytes(kv_cache)
        if capacity < 1:
            raise ValueError(f"kv_offload_mb {config.kv_offload_mb} holds no KV block")
        try:
            return SecondTier(capacity, DiskStore(kv_cache, capacity, config.kv_offload_dir))
        except OSError as exc:
            raise ValueError(f"kv_offload_dir {config.kv_offload_dir}: cannot hold a "
                             f"{config.kv_offload_mb} MB tier: {exc.strerror or exc}") from None
    capacity = budget // Int8Store.block_bytes(kv_cache)
    if capacity < 1:
        raise ValueError(f"kv_offload_mb {config.kv_offload_mb} holds no KV block")
    return SecondTier(capacity, Int8Store(kv_cache, capacity))
