"""structured_output/grammar.py — compiling a request's spec with xgrammar, once per key.

Compiling is the expensive part: xgrammar walks the grammar against the whole vocabulary and
sorts tokens into those whose fate never depends on the parser's stack (context-independent:
their accept or reject is stored per grammar position, the adaptive token mask cache) and the
few that must be checked against the stack at each step. Requests with the same spec (every
request of a tool call, a LangChain schema) share one compiled grammar: `GrammarCache` keeps
them by `StructuredOutputsParams.key`, as vLLM's StructuredOutputManager does.
"""

from __future__ import annotations

import json

from minillm.structured_output.matcher import RequestGrammar
from minillm.structured_output.params import StructuredOutputsParams


class GrammarCache:
    """xgrammar's view of one tokenizer, and every grammar compiled for it, by key."""

    def __init__(self, tokenizer, vocab_size: int, max_threads: int = 2):
        """tokenizer: a Hugging Face tokenizer; vocab_size: the model's logits width (may exceed
        the tokenizer's: padding rows, which the mask always forbids)."""
        import xgrammar as xgr  # here, not at the top: `import minillm` stays light

        if tokenizer is None:
            raise ValueError(
                "structured_outputs needs the model's tokenizer: expected an engine made with "
                "one (a checkpoint folder with tokenizer files, or tokenizer=...)"
            )
        self.vocab_size = vocab_size
        self.info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
        self.compiler = xgr.GrammarCompiler(self.info, max_threads=max_threads)
        self.compiled: dict[tuple, object] = {}
        self.hits = self.misses = 0

    def compile(self, spec: StructuredOutputsParams):
        """The compiled grammar for spec (a ValueError naming the field if xgrammar refuses
        it)."""
        if spec.key in self.compiled:
            self.hits += 1
            return self.compiled[spec.key]
        try:
            compiled = self._compile(spec)
        except (
            RuntimeError
        ) as e:  # xgrammar's parse errors: keep the message, drop the C++ path
            reason = str(e).strip().split(": ", 1)[-1]
            raise ValueError(
                f"structured_outputs.{spec.kind} cannot be compiled: {reason}"
            ) from None
        self.misses += 1
        self.compiled[spec.key] = compiled
        return compiled

    def _compile(self, spec: StructuredOutputsParams):
        any_ws = not spec.disable_any_whitespace
        if spec.json is not None:
            return self.compiler.compile_json_schema(spec.json, any_whitespace=any_ws)
        if spec.json_object:  # any object: keys the schema does not name are allowed
            return self.compiler.compile_json_schema(
                '{"type": "object"}', any_whitespace=any_ws, strict_mode=False
            )
        if spec.regex is not None:
            return self.compiler.compile_regex(spec.regex)
        if spec.choice is not None:  # one alternative per choice; JSON escapes are EBNF's too
            return self.compiler.compile_grammar(
                "root ::= " + " | ".join(json.dumps(c) for c in spec.choice)
            )
        return self.compiler.compile_grammar(spec.grammar)

    def matcher(
        self, spec: StructuredOutputsParams, stop_token_ids, request_id: str = ""
    ) -> RequestGrammar:
        """A fresh matcher for one request: its grammar ends with one of stop_token_ids (the
        request's stop tokens and the model's EOS), or, with none, as soon as it is complete."""
        return RequestGrammar(self.compile(spec), sorted(stop_token_ids), request_id)
