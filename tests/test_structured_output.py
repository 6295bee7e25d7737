"""Chapter 12: structured output. Every constrained token is one the grammar allows, whatever
the engine does around it (batching, preemption, prefix caching, aborts, n > 1, speculation);
unconstrained requests in the same steps get exactly their tokens alone."""

from __future__ import annotations

import json

import jsonschema
import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from minillm.engine import LLMEngine
from minillm.sampling import SamplingParams
from minillm.structured_output import StructuredOutputsParams
from minillm.structured_output.bitmask import (
    apply_bitmask,
    backend_for,
    pack_bitmask,
    unpack_bitmask,
    words_for,
)
from minillm.structured_output.grammar import GrammarCache

EOS = 151645  # <|im_end|>, the tiny Qwen3's end of sequence
PROMPTS = ["Hello", "The answer in JSON:", [1, 2, 3, 4, 5, 6, 7], "Write a list"]


@pytest.fixture(scope="module")
def grammars(tokenizer, model):
    return GrammarCache(tokenizer, model.cfg.vocab_size)


@pytest.fixture(scope="module")
def make_engine(model, tokenizer, grammars):
    def make(**kw):
        engine = LLMEngine(model, tokenizer=tokenizer, **kw)
        engine._grammars = grammars  # one compiled grammar per schema for the whole module
        return engine

    return make


def replay(grammars, spec, tokens, stop_ids=(EOS,)) -> tuple[bool, bool]:
    """(every token accepted by a fresh matcher, grammar terminated): checked independently."""
    m = grammars.matcher(spec, stop_ids)
    for t in tokens:
        try:
            m.accept(t)
        except RuntimeError:
            return False, False
    return True, m.is_terminated


def check_output(grammars, spec, out, schema=None):
    ok, terminated = replay(grammars, spec, out.token_ids)
    assert ok, f"{out.request_id}: tokens {out.token_ids} leave the grammar"
    if out.finish_reason == "stop":
        assert terminated and out.token_ids[-1] == EOS
        if schema is not None:
            value = json.loads(grammars_text(out))
            jsonschema.validate(value, schema)
            return value
    else:
        assert out.finish_reason == "length" and not terminated
    return None


def grammars_text(out) -> str:
    return out.text.removesuffix("<|im_end|>")


# ---- random JSON schemas ------------------------------------------------------------------
NAMES = st.sampled_from(["id", "name", "tags", "ok", "x", "y", "score", "kind"])
LEAVES = st.one_of(
    st.just({"type": "boolean"}),
    st.just({"type": "null"}),
    st.tuples(st.integers(-50, 50), st.integers(0, 60)).map(
        lambda t: {"type": "integer", "minimum": t[0], "maximum": t[0] + t[1]}
    ),
    st.integers(0, 9).map(lambda lo: {"type": "number", "minimum": lo, "maximum": lo + 10}),
    st.integers(0, 4).map(lambda n: {"type": "string", "maxLength": n}),
    st.lists(
        st.sampled_from(["red", "green", "blue", 1, 2, None]),
        min_size=1,
        max_size=4,
        unique=True,
    ).map(lambda v: {"enum": v}),
)


def objects(children):
    @st.composite
    def build(draw):
        names = draw(st.lists(NAMES, min_size=1, max_size=3, unique=True))
        props = {n: draw(children) for n in names}
        required = [n for n in names if draw(st.booleans())]  # the rest are optional
        return {"type": "object", "properties": props, "required": required}

    return build()


SCHEMAS = st.recursive(
    LEAVES,
    lambda children: st.one_of(
        objects(children),
        st.integers(0, 3).flatmap(
            lambda n: children.map(lambda c: {"type": "array", "items": c, "maxItems": n})
        ),
    ),
    max_leaves=5,
).map(
    lambda s: (
        s
        if s.get("type") == "object"
        else {"type": "object", "properties": {"v": s}, "required": ["v"]}
    )
)

SETTINGS = settings(
    max_examples=4,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],  # an engine run per example: shrinking is too slow
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@pytest.mark.slow
@SETTINGS
@given(schemas=st.lists(SCHEMAS, min_size=2, max_size=2), seed=st.integers(0, 1000))
def test_random_schemas_give_valid_json_greedy_and_sampled_with_preemption(
    make_engine, grammars, schemas, seed
):
    # Two long unconstrained requests first: 16 blocks of 4 tokens cannot hold them and the
    # constrained ones together, so the newest requests are preempted (the constrained ones,
    # unless their schema is so short that they finish first; then the unconstrained ones are).
    engine = make_engine(block_size=4, num_blocks=16, max_num_seqs=6, seed=seed)
    specs = [StructuredOutputsParams(json=s, disable_any_whitespace=True) for s in schemas]
    free = SamplingParams(max_tokens=40, ignore_eos=True)
    params = [free, free] + [
        SamplingParams(max_tokens=24, structured_outputs=sp, temperature=t, seed=seed + i)
        for i, sp in enumerate(specs)
        for t in (0.0, 1.0)
    ]
    outs = engine.generate([PROMPTS[i % 4] for i in range(len(params))], params)
    assert sum(o.num_preemptions for o in outs) > 0  # the pool was too small for the step
    outs, params = outs[2:], params[2:]
    for o, p in zip(outs, params):
        check_output(grammars, p.structured_outputs, o, json.loads(p.structured_outputs.json))


@pytest.mark.slow
@SETTINGS
@given(schema=SCHEMAS, seed=st.integers(0, 1000))
def test_greedy_constrained_tokens_are_the_same_with_speculation_and_caching(
    make_engine, grammars, schema, seed
):
    spec = StructuredOutputsParams(json=schema, disable_any_whitespace=True)
    params = [
        SamplingParams(max_tokens=40, structured_outputs=spec),
        SamplingParams(max_tokens=40, temperature=0.8, seed=seed, structured_outputs=spec),
    ]
    prompts = ["The answer in JSON:", "Hello"]
    plain = make_engine().generate(prompts, params)
    spec_engine = make_engine(
        speculative_config={"method": "ngram", "num_speculative_tokens": 3},
        enable_prefix_caching=True,
        num_blocks=8,
        max_num_seqs=2,
    )
    fast = spec_engine.generate(prompts, params)
    assert fast[0].token_ids == plain[0].token_ids  # greedy: speculation changes no token
    for o in (*plain, *fast):
        check_output(grammars, spec, o, schema)
    assert spec_engine.spec_stats.num_draft_tokens > 0  # speculation did run


def test_unconstrained_requests_get_their_tokens_alone(make_engine):
    spec = {
        "json": {"type": "object", "properties": {"a": {"type": "integer"}}},
        "disable_any_whitespace": True,
    }
    free = [
        SamplingParams(max_tokens=12),
        SamplingParams(max_tokens=12, temperature=1.0, seed=5),
    ]
    alone = make_engine().generate(["Hello", "Hi"], free)
    mixed = make_engine().generate(
        ["Hello", "JSON:", "Hi", "JSON:"],
        [
            free[0],
            SamplingParams(max_tokens=12, structured_outputs=spec),
            free[1],
            SamplingParams(max_tokens=12, temperature=1.0, seed=9, structured_outputs=spec),
        ],
    )
    assert [mixed[0].token_ids, mixed[2].token_ids] == [o.token_ids for o in alone]
    assert mixed[1].token_ids[0] != alone[0].token_ids[0] or mixed[1].text.startswith("{")


def test_grammar_that_ends_stops_the_request_with_stop(make_engine, grammars):
    choice = StructuredOutputsParams(choice=["yes", "no", "maybe"])
    outs = make_engine().generate(
        ["Hello"] * 3,
        [
            SamplingParams(max_tokens=10, temperature=1.0, seed=s, structured_outputs=choice)
            for s in range(3)
        ],
    )
    for o in outs:
        assert o.finish_reason == "stop" and grammars_text(o) in choice.choice
    # without any stop token the grammar terminates as soon as it is complete
    out = make_engine(eos_token_id=[]).generate(
        ["Hello"], SamplingParams(max_tokens=10, structured_outputs={"regex": "[0-9]{3}"})
    )[0]
    assert out.finish_reason == "stop" and len(out.text) == 3 and out.text.isdigit()


def test_regex_and_grammar_hold(make_engine):
    outs = make_engine().generate(
        ["Hello", "Hello"],
        [
            SamplingParams(
                max_tokens=20,
                temperature=1.0,
                seed=1,
                structured_outputs={"regex": r"[a-c]{2}-[0-9]{2}"},
            ),
            SamplingParams(
                max_tokens=20,
                temperature=1.0,
                seed=2,
                structured_outputs={"grammar": 'root ::= "(" [xy]+ ")"'},
            ),
        ],
    )
    import re

    assert re.fullmatch(r"[a-c]{2}-[0-9]{2}", grammars_text(outs[0]))
    assert outs[1].finish_reason == "length" or re.fullmatch(
        r"\([xy]+\)", grammars_text(outs[1])
    )


def test_n_samples_each_follow_their_own_matcher(make_engine, grammars):
    spec = StructuredOutputsParams(
        json={
            "type": "object",
            "properties": {"k": {"enum": ["a", "b", "c", "d"]}},
            "required": ["k"],
        },
        disable_any_whitespace=True,
    )
    engine = make_engine(block_size=4)
    outs = engine.generate(
        ["a prompt long enough to share two blocks"],
        SamplingParams(max_tokens=20, temperature=1.5, seed=3, n=4, structured_outputs=spec),
    )
    assert len(outs) == 4
    for o in outs:
        check_output(grammars, spec, o, json.loads(spec.json))


def test_abort_mid_request_leaves_the_others_right(make_engine, grammars):
    spec = StructuredOutputsParams(json_object=True, disable_any_whitespace=True)
    engine = make_engine()
    a = engine.add_request("Hello", SamplingParams(max_tokens=30, structured_outputs=spec))
    b = engine.add_request("Hi", SamplingParams(max_tokens=30, structured_outputs=spec))
    engine.step()
    engine.step()
    engine.abort_request(a)
    outs = []
    while engine.has_unfinished():
        outs += [ev.output for ev in engine.step() if ev.output is not None]
    assert [o.request_id for o in outs] == [b]
    alone = make_engine().generate(
        ["Hi"], SamplingParams(max_tokens=30, structured_outputs=spec)
    )
    assert outs[0].token_ids == alone[0].token_ids
    check_output(grammars, spec, outs[0])


def test_whitespace_trap_is_measured_not_hidden(make_engine, grammars):
    """Free whitespace lets random weights wander; the strict form still never leaves JSON."""
    loose = StructuredOutputsParams(json_object=True)
    out = make_engine().generate(
        ["Hello"], SamplingParams(max_tokens=24, structured_outputs=loose)
    )[0]
    assert out.finish_reason == "length" and grammars_text(out).startswith("{")
    assert replay(grammars, loose, out.token_ids)[0]


# ---- the bitmask ---------------------------------------------------------------------------
@settings(deadline=None)  # the first call imports xgrammar
@given(st.integers(1, 200), st.integers(0, 1 << 30))
def test_unpack_bitmask_reads_bit_t_of_word_t_over_32(vocab, seed):
    g = torch.Generator().manual_seed(seed)
    allowed = torch.rand(2, vocab, generator=g) < 0.5
    packed = torch.zeros(2, words_for(vocab), dtype=torch.int32)
    for r in range(2):
        for t in allowed[r].nonzero()[:, 0].tolist():
            packed[r, t // 32] |= torch.tensor(1 << (t % 32)).to(torch.int32)
    assert torch.equal(unpack_bitmask(packed, vocab), allowed)
    logits = torch.randn(2, vocab, generator=g)
    masked = apply_bitmask(logits.clone(), packed, [1])
    assert torch.equal(masked[0], logits[0])  # a row not listed is untouched
    assert torch.equal(torch.isfinite(masked[1]), allowed[1])
    assert torch.equal(masked[1][allowed[1]], logits[1][allowed[1]])


@settings(deadline=None)
@given(st.integers(1, 200), st.floats(0.0, 1.0), st.integers(0, 1 << 30))
def test_pack_bitmask_sets_bit_t_of_word_t_over_32_and_unpacks_back(vocab, density, seed):
    g = torch.Generator().manual_seed(seed)
    allowed = torch.rand(3, vocab, generator=g) < density
    packed = pack_bitmask(allowed)
    assert packed.dtype == torch.int32 and packed.shape == (3, words_for(vocab))
    for r, t in allowed.nonzero().tolist():  # each allowed token's own bit, one at a time
        assert int(packed[r, t // 32]) >> (t % 32) & 1 == 1
    assert not unpack_bitmask(packed, words_for(vocab) * 32)[:, vocab:].any()  # padding: 0
    assert torch.equal(unpack_bitmask(packed, vocab), allowed)
    full = pack_bitmask(torch.ones(1, 64, dtype=torch.bool))
    assert full.tolist() == [[-1, -1]]  # bit 31 set: the int32 word is negative


def test_apply_backend_is_torch_on_cpu_and_xgrammars_choice_elsewhere():
    assert backend_for(torch.device("cpu")) == "torch_native"
    assert backend_for(torch.device("cuda", 0)) == "auto"  # xgrammar's device kernel, as vLLM


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_apply_bitmask_on_cuda_logits_equals_the_cpu_apply():
    g = torch.Generator().manual_seed(0)
    allowed = torch.rand(4, 1000, generator=g) < 0.3
    logits = torch.randn(4, 1000, generator=g)
    cpu = apply_bitmask(logits.clone(), pack_bitmask(allowed), [0, 2])
    gpu = apply_bitmask(logits.cuda(), pack_bitmask(allowed).cuda(), [0, 2])
    assert torch.equal(gpu.cpu(), cpu)


# ---- bad specs -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "spec, match",
    [
        ({}, r"sets nothing: expected exactly one of"),
        ({"json": {"type": "object"}, "regex": "a"}, r"sets \['json', 'regex'\]"),
        ({"json": {"type": "strin"}}, r"not a valid JSON schema at type: 'strin' is not valid"),
        ({"json": "{bad"}, r"json is not valid JSON"),
        ({"json": [1]}, r"expected a JSON schema object"),
        ({"choice": []}, r"choice is \[\]: expected a non-empty list"),
        ({"choice": ["a", 3]}, r"expected a non-empty list of non-empty strings"),
        ({"regex": ""}, r"regex is '': expected a non-empty string"),
        ({"json_object": "yes"}, r"json_object is 'yes': expected True or False"),
        ({"json_object": True, "whitespace": 1}, r"unknown keys \['whitespace'\]"),
    ],
)
def test_bad_structured_outputs_are_refused_by_name(spec, match):
    with pytest.raises(ValueError, match=match):
        SamplingParams(structured_outputs=spec)


@pytest.mark.parametrize(
    "spec, match",
    [
        ({"regex": "a(b"}, r"structured_outputs.regex cannot be compiled: .*parenthesis"),
        ({"grammar": 'root ::= "a" |'}, r"structured_outputs.grammar cannot be compiled"),
    ],
)
def test_uncompilable_spec_is_refused_when_added_and_nothing_is_queued(
    make_engine, spec, match
):
    engine = make_engine()
    with pytest.raises(ValueError, match=match):
        engine.add_request("Hello", SamplingParams(structured_outputs=spec))
    assert not engine.has_unfinished() and not engine.scheduler.seen_ids


def test_grammar_complete_before_any_token_without_a_stop_token_is_refused_when_added(
    make_engine,
):
    engine = make_engine()
    empty_ok = SamplingParams(ignore_eos=True, structured_outputs={"regex": "[a-z ]*"})
    with pytest.raises(ValueError, match=r"accepts the empty text .* no stop token"):
        engine.add_request("Hello", empty_ok)
    assert not engine.has_unfinished() and not engine.scheduler.seen_ids
    # with EOS as its stop token the grammar runs; without one, "[a-z ]+" ends after a token
    ok = [
        SamplingParams(max_tokens=4, structured_outputs={"regex": "[a-z ]*"}),
        SamplingParams(max_tokens=4, ignore_eos=True, structured_outputs={"regex": "[a-z ]+"}),
    ]
    outs = engine.generate(["Hello", "Hello"], ok)
    assert all(len(o.token_ids) >= 1 for o in outs)
    assert outs[1].finish_reason == "stop" and len(outs[1].token_ids) == 1


def test_compiled_grammars_are_shared_by_key(tokenizer, model):
    cache = GrammarCache(tokenizer, model.cfg.vocab_size)
    a = StructuredOutputsParams(
        json={"type": "object", "properties": {"a": {"type": "integer"}}}
    )
    b = StructuredOutputsParams(  # the same schema as text: spacing does not matter, order does
        json='{"type": "object", "properties": {"a": {"type": "integer"}}}'
    )
    cache.matcher(a, [EOS])
    cache.matcher(b, [EOS])
    cache.matcher(StructuredOutputsParams(json=a.json, disable_any_whitespace=True), [EOS])
    assert (cache.misses, cache.hits, len(cache.compiled)) == (2, 1, 2)


def test_engine_without_tokenizer_refuses_structured_requests(model):
    engine = LLMEngine(model)
    with pytest.raises(ValueError, match="structured_outputs needs the model's tokenizer"):
        engine.add_request([1, 2], SamplingParams(structured_outputs={"choice": ["a"]}))
    assert not engine.has_unfinished()


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 4},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "role": {"enum": ["admin", "user"]},
        "tags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2},
        "home": {
            "type": "object",
            "properties": {"x": {"type": "integer", "minimum": -9, "maximum": 9}},
            "required": [],
        },
    },
    "required": ["name", "age", "role", "tags"],
}


def test_a_nested_schema_completes_and_validates_greedy_and_sampled(make_engine, grammars):
    spec = StructuredOutputsParams(json=PERSON, disable_any_whitespace=True)
    params = [SamplingParams(max_tokens=120, structured_outputs=spec)] + [
        SamplingParams(max_tokens=120, temperature=0.7, seed=s, structured_outputs=spec)
        for s in range(3)
    ]
    outs = make_engine().generate(PROMPTS, params)
    values = [check_output(grammars, spec, o, PERSON) for o in outs]
    assert all(v is not None for v in values)  # every one completed, parsed, validated


def test_fill_counts_the_proposal_its_grammar_refuses_and_rolls_back(grammars, tokenizer):
    spec = StructuredOutputsParams(regex=r"[a-z]+")
    m = grammars.matcher(spec, [EOS])
    ok = tokenizer.encode("abc")
    bad = tokenizer.encode("1")
    bitmask = torch.zeros(4, words_for(grammars.vocab_size), dtype=torch.int32)
    assert m.fill(bitmask, 0, ok) == len(ok) + 1 and m.num_refused == 0
    assert m.fill(bitmask, 0, ok[:1] + bad + ok) == 2  # stops at the refused proposal
    assert m.num_refused == 1
    assert m.num_unchecked == len(ok)  # the proposals after the refused one
    m.fill(bitmask, 0, bad + bad + ok[:1])
    assert (m.num_refused, m.num_unchecked) == (2, len(ok) + 2)  # one refusal per verify
    assert m.fill(bitmask, 0, ok[:1] + [EOS] + ok) == 2  # the stop token ends the answer
    assert (m.num_refused, m.num_unchecked) == (2, 2 * len(ok) + 2)
    m.accept(ok[0])  # the proposals were rolled back: the first output token is accepted again


def test_char_automaton_token_mask_follows_its_three_rules():
    from minillm.structured_output.char_automaton import token_mask

    def step(state, ch):  # -?[0-2]+
        if ch in "012":
            return "digits"
        return "sign" if ch == "-" and state == "start" else None

    tokens = ["-", "1", "12", "-1", "1-", "a", "", "<eos>"]
    assert token_mask(step, {"digits"}, "start", tokens, 7).tolist() == [
        True, True, True, True, False, False, False, False
    ]  # fmt: skip
    assert token_mask(step, {"digits"}, "digits", tokens, 7).tolist() == [
        False, True, True, False, False, False, False, True
    ]  # fmt: skip


def test_mask_plan_counts_rows_in_plan_order_and_skips_free_requests():
    from types import SimpleNamespace as NS

    from minillm.structured_output.bitmask import mask_plan

    g1, g2 = object(), object()
    seqs = {
        "a": NS(grammar=g1),
        "b": NS(grammar=None),
        "c": NS(grammar=g2),
        "d": NS(grammar=g1),
    }
    chunks = [
        NS(request_id="a", num_logits=1, spec_token_ids=[]),
        NS(request_id="b", num_logits=4, spec_token_ids=[7, 8, 9]),  # free verify
        NS(request_id="c", num_logits=3, spec_token_ids=[5, 6]),  # constrained verify
        NS(request_id="d", num_logits=0, spec_token_ids=[]),  # a prefill chunk: no logits
    ]
    assert mask_plan(chunks, seqs) == [(g1, 0, []), (g2, 5, [5, 6])]
