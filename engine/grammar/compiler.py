"""Grammars compiled once, matchers handed out per request.

llguidance compiles a grammar against the tokenizer into a matcher; copying a compiled
matcher costs ~10 µs where compiling a schema costs 0.5-5 ms, so the compiler keeps one
compiled template per distinct grammar (an LRU of `MAX_CACHED_GRAMMARS`, keyed by the
canonical grammar) and every request gets a copy. A grammar llguidance cannot enforce in
full (a keyword it does not implement, a regex it cannot read, an unsatisfiable schema) is
refused with `GrammarError` naming where; nothing is ever left unconstrained in silence.

llguidance's view of the vocabulary (`LLTokenizer`, built from the tokenizer's JSON) takes
~0.4 s and holds the GIL, so it is built once per tokenizer on a thread of its own as soon
as an engine is made, not in the first constrained request.
"""

from __future__ import annotations

import json
import logging
import threading
import weakref
from collections import OrderedDict
from concurrent.futures import Future
from typing import TYPE_CHECKING

import llguidance

from engine.grammar.matcher import GrammarMatcher
from engine.grammar.schema_paths import keyword_path
from engine.grammar.spec import GrammarSpec

if TYPE_CHECKING:
    from engine.tokenizer import Tokenizer

log = logging.getLogger(__name__)

MAX_CACHED_GRAMMARS = 256
# JSON as a small model writes it best: `{"a": 1, "b": [2, 3]}`. Free whitespace lets a
# model loop on blank lines until its token limit; the keywords that cannot be enforced
# are refused, never skipped (`lenient`).
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": ",
                "lenient": False}

_vocabularies: weakref.WeakKeyDictionary[Tokenizer, Future[llguidance.LLTokenizer]] = \
    weakref.WeakKeyDictionary()
_vocabularies_lock = threading.Lock()


class GrammarError(ValueError):
    """A grammar the library cannot enforce; `path` locates the cause inside a JSON schema
    (`.properties.tags.uniqueItems`, "" when it cannot be placed)."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.path = path


def vocabulary(tokenizer: Tokenizer) -> Future[llguidance.LLTokenizer]:
    """llguidance's tokenizer for `tokenizer`, built once per tokenizer on a daemon thread."""
    with _vocabularies_lock:
        future = _vocabularies.get(tokenizer)
        if future is None:
            future = _vocabularies[tokenizer] = Future()
            threading.Thread(target=_build, args=(tokenizer, future), daemon=True,
                             name="grammar-vocabulary").start()
    return future


def _build(tokenizer: Tokenizer, future: Future[llguidance.LLTokenizer]) -> None:
    try:
        future.set_result(llguidance.LLTokenizer(
            tokenizer.backend.to_str(), n_vocab=tokenizer.vocab_size,
            eos_token=list(tokenizer.eos_token_ids)))
    except Exception as exc:  # noqa: BLE001 - reported to every compile that needs it
        log.warning("grammar: llguidance cannot read this tokenizer (%s); constrained "
                    "requests will be refused", exc)
        future.set_exception(exc)


class GrammarCompiler:
    """`matcher(spec)`: a fresh llguidance matcher for one request's grammar."""

    def __init__(self, tokenizer: Tokenizer, capacity: int = MAX_CACHED_GRAMMARS) -> None:
        self.vocabulary = vocabulary(tokenizer)
        self.vocab_size = tokenizer.vocab_size
        self.eos_ids = list(tokenizer.eos_token_ids)
        self.capacity = capacity
        self._compiled: OrderedDict[tuple[str, str], llguidance.LLMatcher] = OrderedDict()
        self._lock = threading.Lock()
        self.compiles = 0  # grammars compiled (misses of the LRU), for tests and benches

    def matcher(self, spec: GrammarSpec) -> GrammarMatcher:
        """A matcher at the start of `spec`'s grammar; GrammarError when it cannot be kept."""
        with self._lock:
            template = self._compiled.get(spec.key)
            if template is not None:
                self._compiled.move_to_end(spec.key)
                return self._fresh(template)
        template = self._compile(spec)
        with self._lock:
            self._compiled[spec.key] = template
            self._compiled.move_to_end(spec.key)
            while len(self._compiled) > self.capacity:
                self._compiled.popitem(last=False)
            self.compiles += 1
        return self._fresh(template)

    def _fresh(self, template: llguidance.LLMatcher) -> GrammarMatcher:
        return GrammarMatcher(template.deep_copy(), self.vocab_size, self.eos_ids)

    def __len__(self) -> int:
        return len(self._compiled)

    def _compile(self, spec: GrammarSpec) -> llguidance.LLMatcher:
        try:
            vocab = self.vocabulary.result()
        except Exception as exc:
            raise GrammarError(f"structured output is not available for this model's "
                               f"tokenizer: {exc}") from exc
        try:
            if spec.kind == "json_schema":
                grammar = llguidance.LLMatcher.grammar_from_json_schema(
                    spec.source, overrides=JSON_OPTIONS)
            else:
                grammar = llguidance.LLMatcher.grammar_from_lark(spec.source)
        except ValueError as exc:
            raise GrammarError(str(exc)) from exc
        matcher = llguidance.LLMatcher(vocab, grammar, log_level=0)
        if matcher.is_error():
            message = matcher.get_error()
            path = keyword_path(json.loads(spec.source), message) \
                if spec.kind == "json_schema" else ""
            raise GrammarError(message.split("\n<state>")[0].strip(), path)
        return matcher
