"""The sampling fields OpenAI's API exposes, in the engine: prompt logprobs, logprobs,
penalties, min_p,
logit_bias, and n sequences sharing their prompt's blocks."""

from __future__ import annotations

import pytest
import torch

from minillm.checks.reference import hf_logits
from minillm.engine import LLMEngine
from minillm.sampling import SamplingParams, apply_min_p, apply_penalties

PROMPT = [
    3,
    17,
    99,
    250,
    4,
    4,
    61,
    300,
    12,
    7,
    480,
    33,
    33,
    2,
    9,
    150,
    77,
    5,
    201,
    44,
]  # 20 tokens


@pytest.fixture(scope="module")
def path(tiny_checkpoint):
    return tiny_checkpoint(seed=3)


@pytest.mark.parametrize(
    "chunk", [512, 7]
)  # one prefill, and a prefill chunked 7 tokens at a time
def test_prompt_logprobs_equal_transformers_log_softmax(path, chunk):
    engine = LLMEngine(path, block_size=4, max_num_batched_tokens=chunk, eos_token_id=[])
    out = engine.generate([PROMPT, PROMPT[:9]], SamplingParams(max_tokens=1, prompt_logprobs=3))
    for o in out:
        ids = o.prompt_ids
        ref = hf_logits(path, ids).float().log_softmax(-1)  # [T, V]
        assert o.prompt_logprobs[0] is None and len(o.prompt_logprobs) == len(ids)
        got = torch.tensor([lp for lp, _ in o.prompt_logprobs[1:]])
        want = ref[torch.arange(len(ids) - 1), torch.tensor(ids[1:])]
        assert (got - want).abs().max() < 1e-4
        for p, (_, top) in enumerate(o.prompt_logprobs[1:]):
            v, i = ref[p].topk(3)
            assert [t for t, _ in top] == i.tolist()
            assert max(abs(a - b) for (_, a), b in zip(top, v.tolist())) < 1e-4


def test_prompt_logprobs_skip_the_prefix_cache_and_stay_exact(path):
    engine = LLMEngine(path, block_size=4, enable_prefix_caching=True, eos_token_id=[])
    engine.generate([PROMPT], SamplingParams(max_tokens=1))
    out = engine.generate([PROMPT], SamplingParams(max_tokens=1, prompt_logprobs=0))[0]
    assert out.num_cached_tokens == 0 and len(out.prompt_logprobs) == len(PROMPT)
    assert all(top == [] for _, top in out.prompt_logprobs[1:])


def test_sampled_logprobs_are_the_raw_logits_log_softmax(path):
    engine = LLMEngine(path, block_size=4, eos_token_id=[])
    out = engine.generate([PROMPT], SamplingParams(max_tokens=5, logprobs=2))[0]
    ids = PROMPT + out.token_ids
    ref = hf_logits(path, ids).float().log_softmax(-1)
    for j, (lp, top) in enumerate(out.logprobs):
        row = ref[len(PROMPT) - 1 + j]
        assert abs(lp - row[out.token_ids[j]].item()) < 1e-4
        assert [t for t, _ in top] == row.topk(2).indices.tolist()
        assert top[0][0] == out.token_ids[j]  # greedy picks the most likely


def test_penalties_match_vllm_arithmetic_and_transformers_repetition_processor():
    from transformers import MinPLogitsWarper, RepetitionPenaltyLogitsProcessor

    torch.manual_seed(0)
    logits = torch.randn(2, 50)
    prompt, output = [1, 2, 3, 7], [7, 9, 9, 11]
    sp = SamplingParams(repetition_penalty=1.3)
    got = apply_penalties(logits.clone(), [sp, sp], [(prompt, output)] * 2)
    ref = RepetitionPenaltyLogitsProcessor(1.3)(
        torch.tensor([prompt + output] * 2), logits.clone()
    )
    assert (got - ref).abs().max() < 1e-6
    sp = SamplingParams(
        frequency_penalty=0.5, presence_penalty=0.25, logit_bias={3: 5.0, 4: -100}
    )
    got = apply_penalties(logits.clone(), [sp], [(prompt, output)])[0]
    want = logits[0].clone()
    want[3] += 5.0
    want[4] -= 100
    want[7] -= 0.5 + 0.25
    want[9] -= 2 * 0.5 + 0.25
    want[11] -= 0.5 + 0.25
    assert (got - want).abs().max() < 1e-6
    got = apply_min_p(logits.clone(), [0.2, 0.05])
    for i, p in enumerate([0.2, 0.05]):
        ref = MinPLogitsWarper(p)(
            torch.zeros(1, 1, dtype=torch.long), logits[i : i + 1].clone()
        )
        assert torch.equal(torch.isinf(got[i]), torch.isinf(ref[0]))


def test_a_penalty_changes_greedy_output_and_logit_bias_forces_a_token(path):
    engine = LLMEngine(path, block_size=4, eos_token_id=[])
    plain = engine.generate([PROMPT], SamplingParams(max_tokens=8))[0].token_ids
    forced = engine.generate([PROMPT], SamplingParams(max_tokens=8, logit_bias={123: 100}))[
        0
    ].token_ids
    assert forced == [123] * 8
    rep = engine.generate([PROMPT], SamplingParams(max_tokens=8, presence_penalty=2.0))[
        0
    ].token_ids
    assert len(set(rep)) >= len(set(plain))


@pytest.mark.parametrize(
    "field,value",
    [
        ("presence_penalty", 3),
        ("frequency_penalty", "x"),
        ("repetition_penalty", 0),
        ("min_p", 1.5),
        ("logprobs", -1),
        ("prompt_logprobs", 21),
        ("n", 0),
        ("logit_bias", {5: 101}),
        ("logit_bias", {-1: 1}),
    ],
)
def test_bad_values_name_the_field(field, value):
    with pytest.raises(ValueError, match=field.split("_")[0]):
        SamplingParams(**{field: value})


def test_n_sequences_share_their_prompt_blocks_and_equal_separate_seeded_requests(path):
    params = SamplingParams(max_tokens=6, temperature=1.0, seed=11, n=4)
    engine = LLMEngine(path, block_size=4, eos_token_id=[], record_plans=True)
    forked = engine.generate([PROMPT], params)
    assert len(forked) == 4
    # 20 prompt tokens: the first computes them all, each fork only the last block's 4 (the
    # shared ones: 16)
    prefill = [sum(c.num_new for c in p.chunks if c.kind == "prefill") for p in engine.plans]
    assert sum(prefill) == 20 + 3 * 4
    assert engine.scheduler.pool.num_free == engine.scheduler.pool.num_blocks
    alone = LLMEngine(path, block_size=4, eos_token_id=[])
    for i, o in enumerate(forked):
        one = alone.generate(
            [PROMPT], SamplingParams(max_tokens=6, temperature=1.0, seed=11 + i)
        )[0]
        assert o.token_ids == one.token_ids
    assert len({tuple(o.token_ids) for o in forked}) > 1


def test_forks_hold_the_shared_blocks_once(path):
    engine = LLMEngine(path, block_size=4, eos_token_id=[])
    engine.add_request(PROMPT, SamplingParams(max_tokens=20), request_id="a")
    engine.step()  # the parent's prefill: 20 tokens in 5 blocks (+1 for its first output)
    engine.add_request(PROMPT, SamplingParams(max_tokens=20), request_id="b", fork_of="a")
    engine.step()
    pool = engine.scheduler.pool
    shared = [b for b in range(pool.num_blocks) if pool.ref_counts[b] == 2]
    assert len(shared) == 4  # the 4 full blocks before the last prompt token
    assert (
        pool.num_allocated == 6 + 1
    )  # the parent's 6 (its first output needs a 6th), the fork's own last one
    with pytest.raises(ValueError, match="fork_of"):
        engine.add_request([1, 2, 3], SamplingParams(max_tokens=2), fork_of="a")
