"""serving/protocol.py — the request and response shapes of OpenAI's API, and its error JSON.

Requests are pydantic models (vLLM's `protocol.py` does the same), so FastAPI turns a bad body
into a list of errors; `validation_error` words the first one in this book's style and OpenAI's
shape:

    {"error": {"message": "temperature is 7: expected a number <= 2", "type":
    "invalid_request_error",
               "param": "temperature", "code": 400}}

As vLLM does, a field this server does not know is accepted and logged ("present in the request
but ignored"), while a field that would change the answer and is not implemented (`tools`,
`suffix`, `best_of`, ...) is a 400 saying "not supported by this server". `response_format`
(`json_object`, `json_schema`) and vLLM's `structured_outputs` become the request's
StructuredOutputsParams (chapter 12). vLLM's extensions accepted here: `top_k`, `min_p`,
`repetition_penalty`, `ignore_eos`, `stop_token_ids`, `cache_salt` (chapter 7's prefix-cache
salt), `return_token_ids` (each chunk then carries the ids it covers, which is how
`bench-serve` counts tokens on a model without a tokenizer) and
`stream_options.continuous_usage_stats` (usage on every chunk).
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    conlist,
    field_validator,
    model_validator,
)

from minillm.sampling import MAX_LOGPROBS, SamplingParams
from minillm.structured_output import StructuredOutputsParams

logger = logging.getLogger("minillm.serving.server")


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")
    include_usage: StrictBool = False
    continuous_usage_stats: StrictBool = False  # vLLM's: usage (so far) on every chunk


def _active(name: str, v) -> bool:
    """Whether an unsupported field asks for something (an empty or neutral value changes
    nothing)."""
    if v is None or v == [] or v == "" or v == {}:
        return False
    if name in ("tool_choice", "function_call"):
        return v not in ("none", "auto")
    if name == "best_of":
        return v != 1
    if name == "modalities":
        return v != ["text"]
    return True


UNSUPPORTED = (
    "tools",
    "tool_choice",
    "functions",
    "function_call",
    "suffix",
    "best_of",
    "guided_json",
    "guided_regex",
    "guided_choice",
    "guided_grammar",
    "audio",
    "modalities",
    "prediction",
    "prompt_embeds",
    "lora_request",
)
IGNORED = (
    "user",
    "metadata",
    "store",
    "service_tier",
    "parallel_tool_calls",
)  # no effect on the answer here


class SamplingFields(BaseModel):
    """The fields completions and chat completions share."""

    model_config = ConfigDict(extra="allow")
    model: StrictStr | None = None  # optional: this server serves one model
    max_tokens: StrictInt | None = Field(None, ge=0)
    max_completion_tokens: StrictInt | None = Field(
        None, ge=1
    )  # chat's newer name for max_tokens
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: StrictInt | None = Field(
        None, ge=0
    )  # vLLM's extension; 0 (and OpenAI's absence) keeps all
    min_p: float | None = Field(None, ge=0, le=1)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    repetition_penalty: float | None = Field(None, gt=0, le=2)
    logit_bias: dict[str, float] | None = None
    seed: StrictInt | None = Field(None, ge=0)
    stop: StrictStr | conlist(StrictStr, max_length=16) | None = None
    stop_token_ids: list[StrictInt] | None = None
    ignore_eos: StrictBool = False
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    n: StrictInt = Field(1, ge=1, le=64)
    return_token_ids: StrictBool = False
    cache_salt: StrictStr | None = Field(
        None, min_length=1
    )  # vLLM's: only equal salts share cached blocks
    response_format: dict | None = None  # OpenAI's: {"type": "json_schema", ...} (chapter 12)
    structured_outputs: dict | None = None  # vLLM's: {"json": ...}, {"regex": ...}, ...

    @field_validator("stop")
    @classmethod
    def _no_empty_stop(cls, v):
        if v == "" or (isinstance(v, list) and "" in v):
            raise ValueError("stop holds an empty string: expected non-empty stop strings")
        return v

    @field_validator("stop_token_ids")
    @classmethod
    def _ids_non_negative(cls, v):
        if v is not None and any(t < 0 for t in v):
            raise ValueError(f"stop_token_ids is {v}: expected token ids >= 0")
        return v

    @field_validator("logit_bias")
    @classmethod
    def _bias(cls, v):
        for k, b in (v or {}).items():
            if not k.isdigit():
                raise ValueError(
                    f"logit_bias has the key {k!r}: expected token ids (as strings) >= 0"
                )
            if not -100 <= b <= 100:
                raise ValueError(f"logit_bias[{k}] is {b}: expected a bias in [-100, 100]")
        return v

    def check_fields(self) -> None:
        """A 400 for an answer-changing field this server lacks; a warning for fields it does
        not know."""
        extra = dict(self.model_extra or {})
        for name in UNSUPPORTED:
            if name in extra and _active(name, extra[name]):
                raise FieldError(f"{name} is not supported by this server", name)
        unknown = sorted(k for k in extra if k not in UNSUPPORTED and k not in IGNORED)
        if self.stream_options is not None and self.stream_options.model_extra:
            unknown += [f"stream_options.{k}" for k in sorted(self.stream_options.model_extra)]
        if unknown:  # vLLM's wording (vllm/entrypoints/serve/engine/protocol.py, vLLM 0.34.0)
            logger.warning(
                "The following fields were present in the request but ignored: %s", unknown
            )

    def sampling_params(
        self,
        defaults: SamplingParams,
        max_tokens: int | None = None,
        logprobs=None,
        prompt_logprobs=None,
    ) -> SamplingParams:
        """The engine's SamplingParams: fields the request leaves out come from the checkpoint's
        defaults
        (max_tokens: the request's, else the given default, else the checkpoint's)."""
        asked = (
            self.max_completion_tokens
            if self.max_completion_tokens is not None
            else self.max_tokens
        )
        max_tokens = (
            asked
            if asked is not None
            else max_tokens
            if max_tokens is not None
            else defaults.max_tokens
        )

        def pick(name):  # the request's value, else the checkpoint's default
            return (
                getattr(self, name)
                if getattr(self, name) is not None
                else getattr(defaults, name)
            )

        return SamplingParams(
            max_tokens=max(1, max_tokens),
            temperature=pick("temperature"),
            top_p=pick("top_p"),
            top_k=pick("top_k"),
            min_p=pick("min_p"),
            presence_penalty=pick("presence_penalty"),
            frequency_penalty=pick("frequency_penalty"),
            repetition_penalty=pick("repetition_penalty"),
            logit_bias={int(k): b for k, b in (self.logit_bias or {}).items()},
            stop_token_ids=tuple(self.stop_token_ids or ()),
            seed=self.seed,
            ignore_eos=self.ignore_eos,
            n=self.n,
            logprobs=logprobs,
            prompt_logprobs=prompt_logprobs,
            structured_outputs=self.structured_spec(),
        )

    def structured_spec(self) -> StructuredOutputsParams | None:
        """response_format or structured_outputs as the engine's params (a FieldError naming
        the field and the problem if the spec is bad)."""
        fmt, so = self.response_format, self.structured_outputs
        kind = fmt.get("type") if fmt is not None else None
        if fmt is not None and kind not in ("text", "json_object", "json_schema"):
            raise FieldError(
                f"response_format.type is {kind!r}: expected 'text', 'json_object' or "
                "'json_schema'",
                "response_format",
            )
        if kind in ("json_object", "json_schema") and so is not None:
            raise FieldError(
                "response_format and structured_outputs are both set: expected at most one",
                "structured_outputs",
            )
        try:
            if so is not None:
                return StructuredOutputsParams.from_dict(so)
            if kind == "json_object":
                return StructuredOutputsParams(json_object=True)
            if kind == "json_schema":
                js = fmt.get("json_schema")
                if not isinstance(js, dict) or "schema" not in js:
                    raise FieldError(
                        f"response_format.json_schema is {_shown(js)}: expected an object "
                        'with a "schema" (and a "name")',
                        "response_format",
                    )
                return StructuredOutputsParams(json=js["schema"])
        except FieldError:
            raise
        except (ValueError, TypeError) as e:
            param = "structured_outputs" if so is not None else "response_format"
            text = (
                str(e)
                if so is not None
                else str(e).replace(
                    "structured_outputs.json ", "response_format.json_schema.schema "
                )
            )
            raise FieldError(text, param) from None
        return None

    @property
    def stop_strings(self) -> list[str]:
        return (
            []
            if self.stop is None
            else [self.stop]
            if isinstance(self.stop, str)
            else list(self.stop)
        )

    @property
    def usage_every_chunk(self) -> bool:
        return bool(
            self.stream_options
            and self.stream_options.include_usage
            and self.stream_options.continuous_usage_stats
        )


class FieldError(ValueError):
    """A request field the server refuses after validation; param names it."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.param = param


PROMPT_FORMS = "a string, a list of strings, a list of token ids, or a list of token-id lists"


def _is_id(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


class CompletionRequest(SamplingFields):
    # OpenAI's four forms, kept as a list of prompts: each a string or a list of token ids
    prompt: Any
    echo: StrictBool = False
    logprobs: StrictInt | None = Field(None, ge=0, le=MAX_LOGPROBS)

    @field_validator("prompt", mode="before")
    @classmethod
    def _prompts(cls, v):
        if isinstance(v, str) or (isinstance(v, list) and v and all(_is_id(t) for t in v)):
            v = [v]
        ok = (
            isinstance(v, list)
            and v
            and (
                all(isinstance(p, str) for p in v)
                or all(isinstance(p, list) and all(_is_id(t) for t in p) for p in v)
            )
        )  # one form, not a mix
        if not ok:
            shown = repr(v) if len(repr(v)) < 60 else repr(v)[:57] + "..."
            raise ValueError(f"prompt is {shown}: expected {PROMPT_FORMS}")
        empty = next((i for i, p in enumerate(v) if len(p) == 0), None)
        if empty is not None:
            raise ValueError(
                f"prompt{'' if len(v) == 1 else f'[{empty}]'} is empty: expected at least one "
                "token"
            )
        return v


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "user", "assistant", "developer"]
    content: Any = None
    name: StrictStr | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _text(cls, v):
        """A string, or a list of text parts ([{"type": "text", "text": ...}]) joined by
        newlines as vLLM does."""
        if isinstance(v, str):
            return v
        if not isinstance(v, list) or not all(isinstance(p, dict) for p in v):
            raise ValueError(
                f"content is {v!r}: expected a string or a list of text parts "
                '[{"type": "text", "text": ...}]'
            )
        texts = []
        for p in v:
            if p.get("type") != "text":
                raise ValueError(
                    f"content part type {p.get('type')!r} is not supported by this server: "
                    "expected 'text'"
                )
            if not isinstance(p.get("text"), str):
                raise ValueError(f"content part {p!r}: expected a 'text' string")
            texts.append(p["text"])
        return "\n".join(texts)


class ChatCompletionRequest(SamplingFields):
    messages: conlist(ChatMessage, min_length=1)
    max_tokens: StrictInt | None = Field(None, ge=1)
    logprobs: StrictBool | None = False
    top_logprobs: StrictInt | None = Field(None, ge=0, le=MAX_LOGPROBS)


class TokenizeRequest(BaseModel):
    """vLLM's /tokenize: a prompt, or chat messages (through the chat template)."""

    model_config = ConfigDict(extra="allow")
    model: StrictStr | None = None
    prompt: StrictStr | None = None
    messages: conlist(ChatMessage, min_length=1) | None = None
    add_special_tokens: StrictBool = True
    add_generation_prompt: StrictBool = True

    @model_validator(mode="after")
    def _one_of(self):
        if (self.messages is None) == (self.prompt is None):
            raise FieldError("prompt: expected exactly one of prompt and messages", "prompt")
        return self


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: StrictStr | None = None
    tokens: list[StrictInt]


# ---- responses: plain dicts in OpenAI's shapes (the openai client parses them)
#   ----------------------


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def usage(num_prompt: int, num_output: int) -> dict:
    return {
        "prompt_tokens": num_prompt,
        "completion_tokens": num_output,
        "total_tokens": num_prompt + num_output,
    }


def completion_choice(
    index: int, text: str, finish_reason, logprobs: dict | None = None, token_ids=None
) -> dict:
    choice = {
        "index": index,
        "text": text,
        "logprobs": logprobs,
        "finish_reason": finish_reason,
    }
    if token_ids is not None:
        choice["token_ids"] = token_ids
    return choice


def completion_body(rid, model, choices: list[dict], usage_: dict | None) -> dict:
    return {
        "id": rid,
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": usage_,
    }


def chat_choice(index: int, text: str, finish_reason, logprobs: dict | None = None) -> dict:
    return {
        "index": index,
        "message": {"role": "assistant", "content": text},
        "logprobs": logprobs,
        "finish_reason": finish_reason,
    }


def chat_body(rid, model, choices: list[dict], usage_: dict) -> dict:
    return {
        "id": rid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": usage_,
    }


def chat_chunk(
    rid,
    model,
    index: int,
    delta: dict,
    finish_reason=None,
    token_ids=None,
    logprobs=None,
    usage_: dict | None = None,
) -> dict:
    choice = {
        "index": index,
        "delta": delta,
        "logprobs": logprobs,
        "finish_reason": finish_reason,
    }
    if token_ids is not None:
        choice["token_ids"] = token_ids
    return {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": usage_,
    }


def usage_chunk(rid, model, obj: str, num_prompt: int, num_output: int) -> dict:
    """The last chunk when stream_options.include_usage is set: no choices, only the counts."""
    return {
        "id": rid,
        "object": obj,
        "created": int(time.time()),
        "model": model,
        "choices": [],
        "usage": usage(num_prompt, num_output),
    }


def completion_logprobs(
    token_texts: list[str], entries: list, decode, text_offset: int = 0
) -> dict:
    """OpenAI's completions logprobs: tokens, token_logprobs, top_logprobs ({text: logprob}, the
    token's own
    included, as vLLM does) and text_offset (where each token starts in the choice's text).

    entries[i] is (logprob, [(id, logprob)]) or None (the first prompt token: nothing scores
    it).
    """
    out = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for text, e in zip(token_texts, entries):
        out["tokens"].append(text)
        out["text_offset"].append(text_offset)
        text_offset += len(text)
        if e is None:
            out["token_logprobs"].append(None)
            out["top_logprobs"].append(None)
            continue
        lp, top = e
        tops = {decode(t): v for t, v in top}
        tops.setdefault(text, lp)
        out["token_logprobs"].append(lp)
        out["top_logprobs"].append(tops)
    return out


def chat_logprobs(token_texts: list[str], entries: list | None, decode) -> dict:
    """OpenAI's chat logprobs: {"content": [{token, logprob, bytes, top_logprobs: [...]}]}.
    entries None: a delta with no tokens (the last of a request cut off for a slow reader)."""
    item = lambda text, lp: {"token": text, "logprob": lp, "bytes": list(text.encode())}  # noqa: E731
    return {
        "content": [
            dict(item(text, lp), top_logprobs=[item(decode(t), v) for t, v in top])
            for text, (lp, top) in zip(token_texts, entries or [])
        ]
    }


ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    500: "server_error",
    503: "server_error",
}


def error_body(status: int, message: str, param: str | None = None) -> dict:
    return {
        "error": {
            "message": message,
            "type": ERROR_TYPES.get(status, "invalid_request_error"),
            "param": param,
            "code": status,
        }
    }


_KINDS = {
    "int": "an integer",
    "float": "a number",
    "string": "a string",
    "bool": "true or false",
    "list": "a list",
    "dict": "an object",
    "model": "an object",
    "literal": "one of",
}
_BOUNDS = {
    "greater_than_equal": (">=", "ge"),
    "greater_than": (">", "gt"),
    "less_than_equal": ("<=", "le"),
    "less_than": ("<", "lt"),
}


def _shown(x) -> str:
    text = repr(x) if not isinstance(x, bool) else str(x).lower()
    return text if len(text) <= 60 else text[:57] + "..."


def describe(err: dict, param: str | None) -> str:
    """One pydantic error in this book's words: "<field> is <value>: expected <what>"."""
    kind, ctx, value = err.get("type", ""), err.get("ctx") or {}, err.get("input")
    head = f"{param} is {_shown(value)}" if param else "the request"
    if kind == "missing":
        return f"{param} is required"
    if kind == "value_error":
        text = str(ctx.get("error", err.get("msg", "invalid")))
        return text if not param or text.startswith(param) else f"{param}: {text}"
    if kind in _BOUNDS:
        op, key = _BOUNDS[kind]
        return f"{head}: expected a number {op} {ctx.get(key)}"
    if kind == "literal_error":
        return f"{head}: expected one of {ctx.get('expected')}"
    if kind in ("too_short", "too_long"):
        which = "at least" if kind == "too_short" else "at most"
        n = ctx.get("min_length") if kind == "too_short" else ctx.get("max_length")
        return f"{param} has {ctx.get('actual_length')} items: expected {which} {n}"
    if kind == "string_too_short":
        return f"{head}: expected a non-empty string"
    for name, words in _KINDS.items():
        if kind.startswith(name + "_"):
            return f"{head}: expected {words}"
    return f"{head}: expected a valid value"


def validation_error(errors: list[dict]) -> dict:
    """FastAPI's list of pydantic errors as one OpenAI error naming the first bad field (no
    pydantic wording)."""
    first = errors[0] if errors else {"loc": (), "type": ""}
    if first.get("type") == "json_invalid":  # the location is a character offset, not a field
        return error_body(
            400, f"the request body is not valid JSON ({first.get('ctx', {}).get('error', '')})"
        )
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    # pydantic adds the union member it tried ("str", "list[int]") to the location: keep the
    # field's path
    loc = [
        p
        for p in loc
        if not any(ch in p for ch in "[]")
        and p not in ("str", "int", "float", "bool")
        and not p.startswith(("constrained-", "function-"))
    ]
    param = ".".join(loc) or None
    if param is None and first.get("type") in ("dict_type", "model_attributes_type"):
        return error_body(
            400,
            "the request body is not a JSON object: expected {...} with the request's fields",
        )
    return error_body(400, describe(first, param), param)
