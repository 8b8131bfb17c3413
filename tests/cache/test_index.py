"""The vector index: partitions, removal, TTL expiry, and the switch to HNSW."""

import time

import numpy as np

from cache import index as index_module
from cache.index import IndexedEntry, VectorIndex
from cache.keys import TURN_SEP
from cache.question import form_key, key_words


def unit(seed: int, dim: int = 8) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return v / np.linalg.norm(v)


def entry(key: str, part: str = "p", ttl: float = 60.0) -> IndexedEntry:
    return IndexedEntry(key, part, f"q {key}", time.time() + ttl)


def test_search_is_per_partition_and_best_first():
    index = VectorIndex(dim=8)
    index.add(entry("a", "p1"), unit(1))
    index.add(entry("b", "p1"), unit(2))
    index.add(entry("c", "p2"), unit(1))
    found = index.search("p1", unit(1), k=4)
    assert [n.entry.key for n in found] == ["a", "b"]
    assert abs(found[0].similarity - 1.0) < 1e-5
    assert [n.entry.key for n in index.search("p2", unit(2))] == ["c"]
    assert index.search("nope", unit(1)) == []


def test_remove_and_replace():
    index = VectorIndex(dim=8)
    index.add(entry("a"), unit(1))
    index.add(entry("a"), unit(2))  # same key: replaced, not duplicated
    assert len(index) == 1 and index.search("p", unit(2))[0].similarity > 0.999
    assert index.remove("a") and not index.remove("a")
    assert index.search("p", unit(2)) == [] and index.partitions() == 0 and index.count("p") == 0


def test_ttl_expiry_leaves_the_index():
    index = VectorIndex(dim=8)
    index.add(entry("old", ttl=0.05), unit(1))
    index.add(entry("new", ttl=60), unit(2))
    index.add(entry("dead", ttl=-1), unit(3))  # already expired: never added
    assert len(index) == 2
    assert index.expire(now=time.time() + 1) == 1
    assert "old" not in index and [n.entry.key for n in index.search("p", unit(1))] == ["new"]
    assert index.count("p") == 1 and index.expire(now=time.time() + 120) == 1
    assert index.count("p") == 0


def test_entries_are_found_by_normal_form_per_partition_until_removed_or_expired():
    index = VectorIndex(dim=8)
    index.add(IndexedEntry("a", "p1", "How do I reset my password?", time.time() + 60), unit(1))
    index.add(IndexedEntry("b", "p1", "um, how do I reset my password", time.time() + 0.05),
              unit(2))
    index.add(IndexedEntry("c", "p2", "How do I reset my password?", time.time() + 60), unit(3))
    form = form_key("HOW DO I RESET MY PASSWORD")
    assert [e.key for e in index.same_text("p1", form)] == ["a", "b"]
    assert index.same_text("p1", form_key("How do I reset my PIN?")) == []
    time.sleep(0.06)
    assert [e.key for e in index.same_text("p1", form)] == ["a"]  # "b" expired
    index.remove("a")
    assert index.same_text("p1", form) == [] and [e.key for e in index.same_text("p2", form)] == ["c"]
    index.clear()
    assert index.same_text("p2", form) == []


def test_the_entry_sharing_most_key_words_is_found_per_partition_until_removed():
    index, later = VectorIndex(dim=8), time.time() + 60
    index.add(IndexedEntry("b", "p1", "How do I reset my router?", later), unit(1))
    index.add(IndexedEntry("a", "p1", "How do I reset my router password?", later), unit(2))
    index.add(IndexedEntry("c", "p2", "Reset the router password, how?", later), unit(3))
    index.add(IndexedEntry("t", "p1", f"reset router password{TURN_SEP}hi", later), unit(4))
    words = key_words("What are the steps to reset my router password?")
    assert words == {"reset", "router", "password"}
    assert index.lexical("p1", words, 0.5).key == "a"  # 3 of 3 shared, "b" 2 of 3
    assert index.lexical("p2", words, 0.5).key == "c"
    index.remove("a")
    assert index.lexical("p1", words, 0.5).key == "b"  # a conversation ("t") is not filed
    assert index.lexical("p1", words, 0.7) is None
    index.remove("b")
    assert index.lexical("p1", words, 0.0) is None and index.lexical("p3", words, 0.0) is None
    index.remove("c")
    assert index._words == {}  # every word unfiled, lists and single ids alike


def test_a_key_word_filed_for_too_many_entries_is_not_counted(monkeypatch):
    monkeypatch.setattr(index_module, "COMMON", 1)
    index, later = VectorIndex(dim=8), time.time() + 60
    index.add(IndexedEntry("a", "p", "How do I reset my router password?", later), unit(1))
    assert index.lexical("p", key_words("reset router password"), 1.0).key == "a"
    index.add(IndexedEntry("b", "p", "How do I reset my modem?", later), unit(2))
    assert index.lexical("p", key_words("reset router password"), 1.0) is None  # "reset": 2
    assert index.lexical("p", key_words("reset router password"), 0.5).key == "a"  # 2 of 4


def test_large_partitions_switch_to_hnsw_and_still_find_and_forget():
    index = VectorIndex(dim=8, approx_after=50)
    for i in range(80):
        index.add(entry(f"k{i}"), unit(i))
    assert index.search("p", unit(7), k=1)[0].entry.key == "k7"
    assert index._parts["p"].hnsw is not None
    index.remove("k7")
    assert all(n.entry.key != "k7" for n in index.search("p", unit(7), k=3))
    index.add(entry("k999"), unit(999))
    assert index.search("p", unit(999), k=1)[0].entry.key == "k999"
