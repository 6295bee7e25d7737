"""structured_output/ — chapter 12: generation constrained by a grammar (a JSON schema, a
regex,
a choice list, an EBNF grammar), through a token bitmask applied in the batched sampler.

params.py    StructuredOutputsParams: what a request asks for (vLLM's name and fields), checked
grammar.py   GrammarCache: a request's spec compiled by xgrammar once, then reused by key
matcher.py   RequestGrammar: one request's matcher, which follows the request's tokens
bitmask.py   the packed int32 bitmask: filling it for a step's rows and applying it to logits

xgrammar is imported only when a request asks for structure, so `import minillm` stays light.
"""

from minillm.structured_output.params import StructuredOutputsParams

__all__ = ["StructuredOutputsParams"]
