"""LLMEngine and Scheduler arguments, and the prompt forms: the right answer, or a clear error
that changes nothing.

Each error case checks that nothing moved (no request queued, every block still free) and that a
request run afterwards gets exactly the tokens of a control run.
"""

import numpy as np
import pytest
import torch

from minillm.engine import LLMEngine
from minillm.kv_cache import generate
from minillm.paged import BlockPool
from minillm.sampling import SamplingParams
from minillm.scheduler import Scheduler

VOCAB = 512
PROMPT = [5, 6, 7, 8, 9]
PARAMS = SamplingParams(max_tokens=6)


@pytest.fixture(scope="module")
def model(tiny_model):
    return tiny_model(seed=5, vocab_size=VOCAB)


@pytest.fixture(scope="module")
def control(model):
    return generate(model, PROMPT, 6)


def assert_untouched_and_working(engine, control):
    """Nothing queued, every block free, and a request now gets exactly the control's tokens."""
    assert not engine.has_unfinished()
    assert engine.scheduler.pool.num_free == engine.scheduler.pool.num_blocks
    assert engine.generate([PROMPT], PARAMS)[0].token_ids == control


# ---- constructor arguments
#   ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(block_size=0), "block_size is 0: expected an int >= 1"),  # was ZeroDivisionError
        (
            dict(block_size=2.5),
            "block_size is 2.5: expected an int >= 1",
        ),  # was an engine failing on its first step
        (dict(block_size=True), "block_size is True: expected an int >= 1"),
        (dict(block_size="16"), "block_size is '16': expected an int >= 1"),
        (dict(num_blocks=0), "num_blocks is 0: expected an int >= 1"),
        (
            dict(max_num_batched_tokens=1.5),
            "max_num_batched_tokens is 1.5: expected an int >= 1",
        ),
        (dict(max_num_batched_tokens=0), "max_num_batched_tokens is 0: expected an int >= 1"),
        (dict(max_num_seqs=-2), "max_num_seqs is -2: expected an int >= 1"),
        (
            dict(max_model_len=0),
            "max_model_len is 0: expected an int >= 1",
        ),  # was silently 4096
        (
            dict(max_model_len=5000),
            r"max_model_len is 5000: expected an int <= 4096",
        ),  # beyond max_position_embeddings
        (dict(kv_cache_bytes=0), "kv_cache_bytes is 0: expected an int >= 1"),
        (dict(seed=-1), "seed is -1: expected an int >= 0"),
        (dict(eos_token_id=-3), "eos_token_id is -3: expected an int >= 0"),
        (dict(eos_token_id="2"), "eos_token_id is '2': expected a list of ints"),
        (dict(eos_token_id=[1, -1]), r"eos_token_id\[1\] is -1: expected an int >= 0"),
        (dict(dtype="float32"), "dtype is 'float32': expected a torch.dtype"),
        (dict(tokenizer=5), "tokenizer is 5: expected a Hugging Face tokenizer"),
        (dict(record_plans="yes"), "record_plans is 'yes': expected True or False"),
        (dict(device="meta"), "device is 'meta' but the model is on cpu"),
    ],
)
def test_bad_engine_argument_is_named_and_a_later_engine_is_unaffected(
    model, control, kwargs, message
):
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=message):
        LLMEngine(model, **kwargs)
    assert all(torch.equal(v, weights[k]) for k, v in model.state_dict().items())
    assert_untouched_and_working(LLMEngine(model), control)


def test_numpy_and_tensor_integers_are_accepted_as_sizes(model, control):
    engine = LLMEngine(
        model,
        block_size=np.int64(4),
        num_blocks=torch.tensor(40),
        max_num_seqs=np.int32(3),
        max_num_batched_tokens=np.uint16(8),
        max_model_len=np.int64(64),
    )
    assert (engine.block_size, engine.max_model_len) == (4, 64) and type(
        engine.block_size
    ) is int
    assert_untouched_and_working(engine, control)


def test_max_model_len_defaults_to_the_model_and_may_equal_it(model):
    assert LLMEngine(model).max_model_len == 4096  # SMALL's max_position_embeddings
    assert LLMEngine(model, max_model_len=4096).max_model_len == 4096


@pytest.mark.parametrize(
    "args, message",
    [
        (("pool", 4, 8, 2, 64), "pool is 'pool': expected a BlockPool"),
        ((None, 0, 8, 2, 64), "block_size is 0"),
        ((None, 4, 2.5, 2, 64), "max_num_batched_tokens is 2.5"),
        ((None, 4, 8, 0, 64), "max_num_seqs is 0"),
        ((None, 4, 8, 2, True), "max_model_len is True"),
    ],
)
def test_bad_scheduler_argument_is_named(args, message):
    pool = BlockPool(8)
    with pytest.raises(ValueError, match=message):
        Scheduler(pool if args[0] is None else args[0], *args[1:])
    assert pool.num_free == 8


# ---- prompt forms: the same answer through add_request, generate and stream
#   ----------------------


def via_add_request(engine, prompt, params=PARAMS):
    rid = engine.add_request(prompt, params)
    outs = []
    while engine.has_unfinished():
        outs += [ev.output for ev in engine.step() if ev.output is not None]
    return [o.token_ids for o in outs if o.request_id == rid]


def via_generate(engine, prompt, params=PARAMS):
    return [o.token_ids for o in engine.generate(prompt, params)]


def via_stream(engine, prompt, params=PARAMS):
    got = {}
    for rid, token, _ in engine.stream(prompt, params):
        got.setdefault(rid, []).append(token)
    return list(got.values())


ONE_PROMPT = {
    "list": PROMPT,
    "tuple": tuple(PROMPT),
    "numpy int64": np.array(PROMPT),
    "numpy int32": np.array(PROMPT, dtype=np.int32),
    "1-D tensor": torch.tensor(PROMPT),
    "list of numpy ints": [np.int64(t) for t in PROMPT],
    "list of 0-d tensors": [torch.tensor(t) for t in PROMPT],
    "range": range(5, 10),
}


@pytest.mark.parametrize("how", [via_add_request, via_generate, via_stream])
@pytest.mark.parametrize("form", list(ONE_PROMPT))
def test_every_prompt_form_gives_the_same_tokens_everywhere(model, control, how, form):
    assert how(LLMEngine(model), ONE_PROMPT[form]) == [control]


MANY = [PROMPT, [1, 2, 3], [400, 3, 77, 12]]
MANY_FORMS = {
    "list of lists": lambda: MANY,
    "tuple of tuples": lambda: tuple(tuple(p) for p in MANY),
    "generator": lambda: (p for p in MANY),
    "map": lambda: map(list, MANY),
    "list of tensors": lambda: [torch.tensor(p) for p in MANY],
    "list of arrays": lambda: [np.array(p) for p in MANY],
    "2-D array (rows)": lambda: np.array([p[:3] for p in MANY]),
    "2-D tensor (rows)": lambda: torch.tensor([p[:3] for p in MANY]),
}


@pytest.mark.parametrize("how", [via_generate, via_stream])
@pytest.mark.parametrize("form", list(MANY_FORMS))
def test_any_iterable_of_prompts_is_accepted(model, how, form):
    prompts = [p[:3] for p in MANY] if "2-D" in form else MANY
    assert how(LLMEngine(model), MANY_FORMS[form]()) == [generate(model, p, 6) for p in prompts]


def test_no_prompts_is_no_outputs(model):
    assert LLMEngine(model).generate([], PARAMS) == []


BAD_PROMPTS = [
    (None, "prompt is None: expected a string, a list of token ids, or a 1-D array or tensor"),
    (5, "prompt is 5: expected a string"),
    (2.5, "prompt is 2.5: expected a string"),
    (b"hello", "prompt is b'hello': expected a string"),
    ({"ids": [1]}, "prompt is {'ids': \\[1\\]}: expected"),
    ([1.5, 2], r"prompt\[0\] is 1.5: expected an int >= 0"),
    ([1, -1], r"prompt\[1\] is -1: expected an int >= 0"),
    ([1, VOCAB], rf"prompt\[1\] is token id {VOCAB}: expected an id < {VOCAB}"),
    ([True, 2], r"prompt\[0\] is True: expected an int"),
    (np.array([1.0, 2.0]), r"prompt\[0\] is 1.0: expected an int"),
    (
        torch.tensor([[1, 2]]),
        r"prompt has shape \(1, 2\): expected a string, a list of token ids",
    ),
    (torch.tensor(3), r"prompt has shape \(\): expected"),
    ([[1, 2], [3]], r"prompt\[0\] is \[1, 2\]: expected an int"),
    ([], "empty prompt"),
    ("text", "no tokenizer"),
]


def kv_bytes(engine):
    return [t.clone() for t in [*engine.kv.k, *engine.kv.v]]


@pytest.mark.parametrize("prompt, message", BAD_PROMPTS)
def test_bad_prompt_to_add_request_changes_nothing(model, control, prompt, message):
    engine = LLMEngine(model)
    engine.add_request([7, 7, 7], PARAMS, request_id="busy")
    engine.step()  # a request mid-flight: its cache bytes must survive the bad call
    kv, free = kv_bytes(engine), engine.scheduler.pool.num_free
    with pytest.raises(ValueError, match=message):
        engine.add_request(prompt, PARAMS)
    assert (
        all(torch.equal(a, b) for a, b in zip(kv, kv_bytes(engine)))
        and engine.scheduler.pool.num_free == free
    )
    outs = []
    while engine.has_unfinished():
        outs += [ev.output for ev in engine.step() if ev.output is not None]
    assert [o.token_ids for o in outs] == [generate(model, [7, 7, 7], 6)], (
        "the busy request did not notice"
    )
    assert_untouched_and_working(engine, control)


@pytest.mark.parametrize(
    "kwargs",
    [dict(temperature=-1e-45), dict(stop_token_ids=5), dict(max_tokens=0), dict(top_p=2.0)],
)
def test_bad_sampling_params_fail_before_reaching_the_engine(model, control, kwargs):
    engine = LLMEngine(model)
    with pytest.raises(ValueError):
        engine.add_request(PROMPT, SamplingParams(**kwargs))
    assert_untouched_and_working(engine, control)


@pytest.mark.parametrize(
    "prompts, message",
    [
        (None, "prompts is None: expected one prompt"),
        (5, "prompts is 5: expected one prompt"),
        (
            np.zeros((2, 2, 2), dtype=np.int64),
            r"prompts has shape \(2, 2, 2\): expected 1-D \(one prompt\) or 2-D",
        ),
        ([PROMPT, None], "prompt is None"),
        ([PROMPT, [1, VOCAB]], f"token id {VOCAB}"),
        (
            lambda: (p for p in [PROMPT, [], [3]]),
            "empty prompt",
        ),  # a generator, made fresh for each call
    ],
)
@pytest.mark.parametrize("call", ["generate", "stream"])
def test_bad_prompts_to_generate_or_stream_queue_nothing(
    model, control, prompts, message, call
):
    engine = LLMEngine(model)
    prompts = prompts() if callable(prompts) else prompts
    with pytest.raises(ValueError, match=message):
        result = getattr(engine, call)(prompts, PARAMS)
        list(result) if call == "stream" else None
    assert_untouched_and_working(engine, control)


def test_a_string_prompt_goes_through_the_tokenizer_everywhere(tiny_default_path):
    from minillm.checkpoints import load_tokenizer
    from minillm.model import Transformer

    model, tok = (
        Transformer.from_pretrained(tiny_default_path),
        load_tokenizer(tiny_default_path),
    )
    sp = SamplingParams(max_tokens=4, ignore_eos=True)
    want = generate(model, tok("Hello, world").input_ids, 4)
    for how in (via_add_request, via_generate, via_stream):
        assert how(LLMEngine(model, tokenizer=tok), "Hello, world", sp) == [want], how.__name__
