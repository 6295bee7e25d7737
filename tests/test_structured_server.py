"""Chapter 12 through the server: OpenAI's response_format and vLLM's structured_outputs, with
the official openai client and LangChain's with_structured_output."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from minillm.bench.server_process import LaunchedServer
from minillm.checkpoints import TINY_NAME, load_tokenizer, smollm2
from minillm.structured_output import StructuredOutputsParams
from minillm.structured_output.grammar import GrammarCache

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 6},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "admin": {"type": "boolean"},
    },
    "required": ["name", "age", "admin"],
}


@pytest.fixture(scope="module")
def server(tiny_default_path):
    srv = LaunchedServer(tiny_default_path, extra=["--max-model-len", "256"])
    try:
        yield srv.wait_ready(timeout=300)
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


@pytest.fixture(scope="module")
def grammars(tiny_default_path):
    return GrammarCache(load_tokenizer(tiny_default_path), 151_936)


def prefix_allowed(grammars, spec, text: str) -> bool:
    """A fresh matcher accepts the text (a prefix of the grammar's language, or all of it)."""
    return grammars.matcher(spec, []).matcher.accept_string(text)


def test_response_format_json_schema_with_the_openai_client(client, grammars):
    out = client.chat.completions.create(
        model=TINY_NAME,
        messages=[{"role": "user", "content": "Who are you?"}],
        max_tokens=40,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "person", "schema": PERSON, "strict": True},
        },
    )
    text = out.choices[0].message.content
    # Free whitespace between JSON tokens lets random weights wander (the chapter's
    # whitespace trap): a "length" answer is still a prefix the grammar accepts.
    assert prefix_allowed(grammars, StructuredOutputsParams(json=PERSON), text), text
    if out.choices[0].finish_reason == "stop":
        jsonschema.validate(json.loads(text), PERSON)
    else:
        assert out.choices[0].finish_reason == "length" and text.startswith("{")


def test_structured_outputs_extra_field_gives_valid_json(client):
    out = client.chat.completions.create(
        model=TINY_NAME,
        messages=[{"role": "user", "content": "Who are you?"}],
        max_tokens=60,
        extra_body={"structured_outputs": {"json": PERSON, "disable_any_whitespace": True}},
    )
    assert out.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(out.choices[0].message.content), PERSON)


def test_completions_take_response_format_and_choice(client, grammars):
    out = client.completions.create(
        model=TINY_NAME,
        prompt="JSON:",
        max_tokens=20,
        extra_body={"response_format": {"type": "json_object"}},
    )
    text = out.choices[0].text
    assert text.startswith("{")
    assert prefix_allowed(grammars, StructuredOutputsParams(json_object=True), text)
    out = client.completions.create(
        model=TINY_NAME,
        prompt="Yes or no?",
        max_tokens=5,
        n=3,
        temperature=1.0,
        seed=1,
        extra_body={"structured_outputs": {"choice": ["yes", "no"]}},
    )
    assert all(c.text in ("yes", "no") and c.finish_reason == "stop" for c in out.choices)


def test_streamed_answer_is_the_same_json(client):
    body = dict(
        model=TINY_NAME,
        messages=[{"role": "user", "content": "Who are you?"}],
        max_tokens=60,
        extra_body={"structured_outputs": {"json": PERSON, "disable_any_whitespace": True}},
    )
    whole = client.chat.completions.create(**body).choices[0].message.content
    parts = client.chat.completions.create(stream=True, **body)
    assert "".join(c.choices[0].delta.content or "" for c in parts if c.choices) == whole


@pytest.mark.parametrize(
    "extra, param, words",
    [
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {
                        "name": "x",
                        "schema": {"type": "object", "required": "name"},
                    },
                }
            },
            "response_format",
            "response_format.json_schema.schema is not a valid JSON schema at required",
        ),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
            "response_format",
            'expected an object with a "schema"',
        ),
        ({"response_format": {"type": "xml"}}, "response_format", "response_format.type is"),
        (
            {"structured_outputs": {"regex": "a(b"}},
            "structured_outputs",
            "structured_outputs.regex cannot be compiled",
        ),
        (
            {"structured_outputs": {"choice": []}},
            "structured_outputs",
            "structured_outputs.choice is []",
        ),
        (
            {
                "structured_outputs": {"json_object": True},
                "response_format": {"type": "json_object"},
            },
            "structured_outputs",
            "both set",
        ),
    ],
)
def test_bad_spec_is_a_400_naming_the_problem(client, extra, param, words):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model=TINY_NAME,
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=5,
            extra_body=extra,
        )
    body = err.value.body
    assert body["param"] == param and words in body["message"], body


def test_response_format_text_is_plain_text(client):
    out = client.chat.completions.create(
        model=TINY_NAME,
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=5,
        response_format={"type": "text"},
    )
    assert out.choices[0].finish_reason == "length"


@pytest.mark.slow
def test_langchain_with_structured_output_on_the_real_model():
    from langchain_openai import ChatOpenAI
    from pydantic import BaseModel, Field

    class Capital(BaseModel):
        city: str = Field(max_length=30)
        country: str = Field(max_length=30)

    with LaunchedServer("smollm2", extra=["--max-model-len", "512"]) as srv:
        srv.wait_ready(timeout=300)
        llm = ChatOpenAI(
            model=smollm2.FOLDER_NAME,
            base_url=srv.url + "/v1",
            api_key="none",
            temperature=0,
            max_retries=0,
            timeout=300,
            max_tokens=60,
        )
        answer = llm.with_structured_output(Capital, method="json_schema").invoke(
            "What is the capital of France? Answer with the city and its country."
        )
    assert isinstance(answer, Capital) and answer.city == "Paris"
