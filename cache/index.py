"""The semantic cache's vector index: one faiss index per partition, with TTL expiry.

Entries are also filed by their question's normal form (`cache.question.form_key`, computed
once when the entry is stored), so a repeat that reads the same once normalised is found
without embedding it (`same_text`), and by their question's key words (content-word stems
and numbers, `cache.question.key_words`), so the entry sharing most of a new question's
words is found without one too (`lexical`).
Small partitions use exact inner-product search (`IndexFlatIP`); a partition that grows
past `approx_after` vectors is rebuilt as an HNSW graph (`IndexHNSWFlat`), whose search
cost grows far slower. HNSW cannot delete, so removals there are tombstones filtered from
results, and the partition is rebuilt once tombstones pass a quarter of it. Entries leave
the index when their TTL passes (a heap of expiry times, swept on every call).
"""

from __future__ import annotations

import heapq
import time
from collections import Counter
from dataclasses import dataclass

import faiss
import numpy as np

from cache.keys import TURN_SEP
from cache.question import form_key, key_words

APPROX_AFTER = 20_000  # measured in bench/cache/cache_bench.py: flat search passes ~1 ms near here
COMMON = 2_000  # a key word filed for more entries of a partition than this is not counted:
# it tells little, and counting it would cost a lexical search about a millisecond


@dataclass
class IndexedEntry:
    key: str
    partition: str
    question: str
    expires_at: float
    form: int | None = None  # form_key(question); worked out on `add` when not given
    words: int = 0  # how many key words `add` filed it by (0: a conversation, not filed)
    # set on an entry a judge touched only (plain class attributes, not fields: an entry
    # nobody judged carries nothing more than before)
    alias_of = None  # str: a promoted question's entry, whose answer it serves
    evidence = None  # cache.evidence.Evidence: what judges said of its candidates


@dataclass
class Neighbour:
    entry: IndexedEntry
    similarity: float | None  # cosine; None for a neighbour found by its words


class _Partition:
    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.flat = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
        self.hnsw: faiss.IndexHNSWFlat | None = None
        self.hnsw_ids: np.ndarray = np.zeros(0, dtype=np.int64)  # hnsw row -> id
        self.dead: set[int] = set()

    @property
    def size(self) -> int:
        return self.flat.ntotal

    def add(self, ident: int, vec: np.ndarray) -> None:
        self.flat.add_with_ids(vec.reshape(1, -1), np.array([ident], dtype=np.int64))
        if self.hnsw is not None:
            self.hnsw.add(vec.reshape(1, -1))
            self.hnsw_ids = np.append(self.hnsw_ids, ident)

    def remove(self, ident: int) -> None:
        self.flat.remove_ids(np.array([ident], dtype=np.int64))
        if self.hnsw is not None:
            self.dead.add(ident)
            if len(self.dead) * 4 > len(self.hnsw_ids):
                self.hnsw = None  # rebuilt on the next search if still large

    def search(self, vec: np.ndarray, k: int, approx_after: int) -> list[tuple[int, float]]:
        if self.size == 0:
            return []
        q = vec.reshape(1, -1)
        if self.size >= approx_after:
            if self.hnsw is None:
                self._build_hnsw()
            assert self.hnsw is not None
            sims, rows = self.hnsw.search(q, k + len(self.dead))
            hits = [(int(self.hnsw_ids[r]), float(s)) for r, s in zip(rows[0], sims[0], strict=True)
                    if r >= 0 and int(self.hnsw_ids[r]) not in self.dead]
            return hits[:k]
        sims, ids = self.flat.search(q, min(k, self.size))
        return [(int(i), float(s)) for i, s in zip(ids[0], sims[0], strict=True) if i >= 0]

    def _build_hnsw(self) -> None:
        ids = faiss.vector_to_array(self.flat.id_map).astype(np.int64)
        vecs = self.flat.index.reconstruct_n(0, self.flat.ntotal)
        self.hnsw = faiss.IndexHNSWFlat(self.dim, 32, faiss.METRIC_INNER_PRODUCT)
        self.hnsw.hnsw.efSearch = 64
        self.hnsw.add(vecs)
        self.hnsw_ids, self.dead = ids, set()


class VectorIndex:
    """Partition -> faiss index of entry vectors; ids map to `IndexedEntry`s."""

    def __init__(self, dim: int = 384, approx_after: int = APPROX_AFTER) -> None:
        self.dim, self.approx_after = dim, approx_after
        self._parts: dict[str, _Partition] = {}
        self._entries: dict[int, IndexedEntry] = {}
        self._ids: dict[str, int] = {}  # key -> id
        self._forms: dict[int, list[int]] = {}  # hash((partition, form)) -> ids
        self._words: dict[int, int | list[int]] = {}  # hash((partition, key word)) -> id(s)
        self._expiry: list[tuple[float, int]] = []
        self._next_id = 1

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._ids

    def add(self, entry: IndexedEntry, vector: np.ndarray) -> None:
        """Add (or replace) `entry.key`; an already-expired entry is ignored."""
        if entry.expires_at <= time.time():
            return
        self.remove(entry.key)
        ident, self._next_id = self._next_id, self._next_id + 1
        vec = np.ascontiguousarray(vector, dtype=np.float32).reshape(-1)
        part = self._parts.setdefault(entry.partition, _Partition(self.dim))
        part.add(ident, vec)
        self._entries[ident] = entry
        self._ids[entry.key] = ident
        if entry.form is None:
            entry.form = form_key(entry.question)
        self._forms.setdefault(hash((entry.partition, entry.form)), []).append(ident)
        if TURN_SEP not in entry.question:  # conversations are found by their embedding
            words = key_words(entry.question)
            entry.words = len(words)
            for word in words:
                filed = hash((entry.partition, word))
                ids = self._words.get(filed)
                if ids is None:
                    self._words[filed] = ident  # most words file one entry: no list
                elif isinstance(ids, int):
                    self._words[filed] = [ids, ident]
                else:
                    ids.append(ident)
        heapq.heappush(self._expiry, (entry.expires_at, ident))

    def remove(self, key: str) -> bool:
        ident = self._ids.pop(key, None)
        if ident is None:
            return False
        entry = self._entries.pop(ident)
        filed = hash((entry.partition, entry.form))
        self._forms[filed].remove(ident)
        if not self._forms[filed]:
            del self._forms[filed]
        if entry.words:
            for word in key_words(entry.question):
                filed = hash((entry.partition, word))
                ids = self._words[filed]
                if isinstance(ids, int):
                    del self._words[filed]
                else:
                    ids.remove(ident)
                    if len(ids) == 1:
                        self._words[filed] = ids[0]
        part = self._parts.get(entry.partition)
        if part is not None:
            part.remove(ident)
            if part.size == 0:
                del self._parts[entry.partition]
        return True

    def get(self, key: str) -> IndexedEntry | None:
        ident = self._ids.get(key)
        return self._entries.get(ident) if ident is not None else None

    def search(self, partition: str, vector: np.ndarray, k: int = 4) -> list[Neighbour]:
        """The `k` nearest live entries of `partition`, most similar first."""
        self.expire()
        part = self._parts.get(partition)
        if part is None:
            return []
        vec = np.ascontiguousarray(vector, dtype=np.float32).reshape(-1)
        found = part.search(vec, k, self.approx_after)
        return [Neighbour(self._entries[i], s) for i, s in found if i in self._entries]

    def count(self, partition: str) -> int:
        """How many live entries `partition` has."""
        self.expire()
        part = self._parts.get(partition)
        return part.size if part is not None else 0

    def same_text(self, partition: str, form: int) -> list[IndexedEntry]:
        """The live entries of `partition` whose question's `form_key` is `form`."""
        self.expire()
        found = (self._entries[i] for i in self._forms.get(hash((partition, form)), ()))
        return [e for e in found if e.partition == partition and e.form == form]

    def lexical(self, partition: str, words: frozenset[str],
                at_least: float) -> IndexedEntry | None:
        """The live entry of `partition` whose key words overlap `words` the most (Jaccard:
        shared / either), when that overlap is at least `at_least`; words filed for more
        than COMMON entries are not counted."""
        self.expire()
        shared: Counter[int] = Counter()
        for word in words:
            ids = self._words.get(hash((partition, word)), ())
            if isinstance(ids, int):
                shared[ids] += 1
            elif len(ids) <= COMMON:
                shared.update(ids)
        need = at_least * len(words)  # with n shared of its k >= n words, n / (len + k - n)
        best, best_overlap = None, at_least  # reaches at_least only when n >= need
        for ident, n in shared.items():
            if n < need:
                continue
            entry = self._entries[ident]
            overlap = n / (len(words) + entry.words - n)
            if overlap >= best_overlap and entry.partition == partition:
                best, best_overlap = entry, overlap
        return best

    def expire(self, now: float | None = None) -> int:
        """Drop entries whose TTL has passed; returns how many left."""
        now = time.time() if now is None else now
        dropped = 0
        while self._expiry and self._expiry[0][0] <= now:
            _, ident = heapq.heappop(self._expiry)
            entry = self._entries.get(ident)
            if entry is not None and entry.expires_at <= now:
                dropped += self.remove(entry.key)
        return dropped

    def clear(self) -> None:
        self.__init__(self.dim, self.approx_after)  # type: ignore[misc]

    def partitions(self) -> int:
        return len(self._parts)
