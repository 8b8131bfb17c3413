"""Grammar-constrained decoding: structured outputs (`response_format` json_object and
json_schema) and forced tool calls, on llguidance.

A request carries a `GrammarSpec` in its `SamplingParams`; `GrammarCompiler` turns it into a
matcher once per distinct grammar (an LRU of compiled templates, each request a cheap copy);
each step `apply_grammar_masks` cuts every constrained row of the logits down to the tokens
its matcher allows, before sampling, and the engine feeds the sampled token back.
"""

from engine.grammar.compiler import GrammarCompiler, GrammarError
from engine.grammar.masks import apply_grammar_masks
from engine.grammar.matcher import GrammarMatcher
from engine.grammar.spec import GrammarSpec, json_object_grammar, json_schema_grammar

__all__ = ["GrammarCompiler", "GrammarError", "GrammarMatcher", "GrammarSpec",
           "apply_grammar_masks", "json_object_grammar", "json_schema_grammar"]
