"""structured_output/params.py — StructuredOutputsParams: the structure one request asks for.

vLLM's name and fields (vllm/sampling_params.py, `StructuredOutputsParams`): exactly one of
`json` (a JSON schema), `regex`, `choice` (a list of strings), `grammar` (EBNF, in xgrammar's
dialect) or `json_object` (any JSON object), plus `disable_any_whitespace` (JSON without free
whitespace between tokens: see the chapter's whitespace trap). Everything that can be checked
without a tokenizer is checked here, when the params are made; a regex or a grammar that
xgrammar cannot parse is refused when the request is added (grammar.py), before it is queued.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

KINDS = ("json", "regex", "choice", "grammar", "json_object")


@dataclass(frozen=True)
class StructuredOutputsParams:
    json: str | dict | None = None  # a JSON schema; kept as compact JSON text (hashable)
    regex: str | None = None  # the output matches this regular expression
    choice: tuple[str, ...] | None = None  # the output is exactly one of these strings
    grammar: str | None = None  # an EBNF grammar whose start rule is `root`
    json_object: bool | None = None  # True: any JSON object
    disable_any_whitespace: bool = False  # JSON with fixed separators, no free whitespace

    def __post_init__(self):
        set_ = object.__setattr__
        given = [k for k in KINDS if getattr(self, k) not in (None, False)]
        if len(given) != 1:
            raise ValueError(
                f"structured_outputs sets {given or 'nothing'}: expected exactly one of "
                f"{list(KINDS)}"
            )
        if self.json is not None:
            set_(self, "json", _check_schema(self.json))
        if self.regex is not None and not (isinstance(self.regex, str) and self.regex):
            raise ValueError(
                f"structured_outputs.regex is {self.regex!r}: expected a non-empty string"
            )
        if self.grammar is not None and not (isinstance(self.grammar, str) and self.grammar):
            raise ValueError(
                f"structured_outputs.grammar is {self.grammar!r}: expected a non-empty EBNF "
                "string"
            )
        if self.choice is not None:
            set_(self, "choice", _check_choice(self.choice))
        for name in ("json_object", "disable_any_whitespace"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, bool):
                raise ValueError(
                    f"structured_outputs.{name} is {value!r}: expected True or False"
                )

    @classmethod
    def from_dict(cls, spec) -> StructuredOutputsParams:
        """The params from a dict (the server's JSON, vLLM's names); unknown keys raise."""
        if isinstance(spec, cls):
            return spec
        if not isinstance(spec, dict):
            raise ValueError(
                f"structured_outputs is {spec!r}: expected an object such as "
                '{"json": {...schema...}} or {"choice": ["yes", "no"]}'
            )
        unknown = sorted(set(spec) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(
                f"structured_outputs has unknown keys {unknown}: expected some of "
                f"{sorted(cls.__dataclass_fields__)}"
            )
        return cls(**spec)

    @property
    def kind(self) -> str:
        return next(k for k in KINDS if getattr(self, k) not in (None, False))

    @property
    def key(self) -> tuple:
        """What a compiled grammar depends on: equal keys share one compiled grammar."""
        value = getattr(self, self.kind)
        return (self.kind, value, self.disable_any_whitespace)


def _check_schema(schema) -> str:
    """A JSON schema (dict or JSON text) checked against its metaschema, as compact JSON text.

    The keys keep their order: xgrammar writes an object's properties in the schema's order.
    """
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as e:
            raise ValueError(
                f"structured_outputs.json is not valid JSON ({e.msg} at character {e.pos}): "
                "expected a JSON schema"
            ) from None
    if not isinstance(schema, dict):
        raise ValueError(
            f"structured_outputs.json is {schema!r}: expected a JSON schema object"
        )
    import jsonschema  # imported here: only requests that bring a schema pay for it

    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as e:
        where = "/".join(str(p) for p in e.path) or "the top level"
        raise ValueError(
            f"structured_outputs.json is not a valid JSON schema at {where}: {e.message}"
        ) from None
    return json.dumps(schema, separators=(",", ":"))


def _check_choice(choice) -> tuple[str, ...]:
    ok = (
        isinstance(choice, (list, tuple))
        and choice
        and all(isinstance(c, str) and c for c in choice)
    )
    if not ok:
        raise ValueError(
            f"structured_outputs.choice is {choice!r}: expected a non-empty list of non-empty "
            "strings"
        )
    return tuple(choice)
