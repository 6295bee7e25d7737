"""Scheduler: budgets, chunked prefill, preemption, rejection, and invariants over random
workloads.

No model here: a step's "sampled" token is a made-up function of the request and its length,
which is all the scheduler needs to see.
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minillm.paged import BlockPool, num_blocks_for
from minillm.sampling import SamplingParams
from minillm.scheduler import Scheduler, Sequence


def make(num_blocks=64, block_size=4, budget=16, max_seqs=4, max_len=256):
    return Scheduler(BlockPool(num_blocks), block_size, budget, max_seqs, max_len)


def seq(rid, prompt_len, max_tokens=4, stop=()):
    return Sequence(
        rid,
        list(range(1, prompt_len + 1)),
        SamplingParams(max_tokens=max_tokens),
        stop_token_ids=frozenset(stop),
    )


def fake_token(s: Sequence) -> int:
    return (
        hash(s.request_id) + 7 * s.num_tokens
    ) % 1000 + 1000  # never a prompt token or a stop token


def run_step(sched: Scheduler):
    plan = sched.schedule()
    by_id = {s.request_id: s for s in sched.running}
    sampled = {
        c.request_id: fake_token(by_id[c.request_id]) for c in plan.chunks if c.need_logits
    }
    return plan, sched.update(plan, sampled)


def test_running_decodes_come_before_new_prefills():
    s = make(budget=16)
    s.add(seq("a", 5))
    run_step(s)  # a's whole prompt
    s.add(seq("b", 30))
    plan, _ = run_step(s)
    assert [(c.request_id, c.kind, c.num_new) for c in plan.chunks] == [
        ("a", "decode", 1),
        ("b", "prefill", 15),
    ]


def test_long_prompt_is_prefilled_in_chunks_that_fit_the_budget():
    s = make(budget=8)
    s.add(seq("a", 20, max_tokens=2))
    plans = [run_step(s)[0] for _ in range(3)]
    assert [(c.num_computed, c.num_new, c.need_logits) for p in plans for c in p.chunks] == [
        (0, 8, False),
        (8, 8, False),
        (16, 4, True),
    ]
    assert s.running[0].output_ids and s.running[0].num_computed == 20


def test_max_num_seqs_caps_the_running_set():
    s = make(budget=100, max_seqs=2)
    for r in "abc":
        s.add(seq(r, 3))
    plan, _ = run_step(s)
    assert [c.request_id for c in plan.chunks] == ["a", "b"]
    assert [w.request_id for w in s.waiting] == ["c"]


def test_every_step_respects_the_token_budget():
    s = make(budget=10, max_seqs=8)
    for i in range(6):
        s.add(seq(f"r{i}", 7, max_tokens=3))
    while s.has_unfinished():
        plan, _ = run_step(s)
        assert 0 < plan.num_tokens <= 10


def test_newest_running_request_is_preempted_when_blocks_run_out():
    s = make(num_blocks=4, block_size=4, budget=64, max_seqs=4)
    s.add(seq("old", 8, max_tokens=8))  # 2 blocks for its prompt
    s.add(seq("new", 8, max_tokens=8))  # 2 blocks: the pool is now full
    run_step(s)
    plan, _ = run_step(
        s
    )  # both decode position 8, which needs a third block: old gets one by evicting new
    assert plan.preempted == ["new"]
    assert [c.request_id for c in plan.chunks] == ["old"]
    new = s.waiting[0]
    assert (new.request_id, new.block_table, new.num_computed, new.status) == (
        "new",
        [],
        0,
        "waiting",
    )
    assert new.output_ids, "its generated tokens are kept, to be recomputed"


def test_preempted_request_recomputes_prompt_and_output_later():
    s = make(num_blocks=4, block_size=4, budget=64, max_seqs=4)
    s.add(seq("old", 7, max_tokens=4))
    s.add(seq("new", 7, max_tokens=8))
    kinds = []
    while s.has_unfinished():
        plan, _ = run_step(s)
        kinds += [
            (c.request_id, c.kind, c.num_new) for c in plan.chunks if c.request_id == "new"
        ]
    recompute = [k for k in kinds if k[1] == "recompute"]
    assert recompute and recompute[0][2] > 7, "prompt (7) plus the tokens it had produced"


@pytest.mark.parametrize(
    "bad, words",
    [
        (seq("e", 0), "empty prompt"),
        (seq("long", 250, max_tokens=10), "beyond the model's context of 256"),
        (seq("a", 3), "'a' was already submitted"),
        (
            seq("huge", 200, max_tokens=50),
            "needs 63 KV blocks at its longest, but the pool has only 16",
        ),
    ],
)
def test_bad_request_is_rejected_and_the_others_carry_on(bad, words):
    s = make(num_blocks=16, block_size=4, max_len=256)
    s.add(seq("a", 3))
    s.add(seq("b", 5))
    run_step(s)
    before = (
        [w.request_id for w in s.waiting],
        [r.request_id for r in s.running],
        s.pool.num_free,
    )
    with pytest.raises(ValueError, match=words):
        s.add(bad)
    assert (
        [w.request_id for w in s.waiting],
        [r.request_id for r in s.running],
        s.pool.num_free,
    ) == before
    finished = []
    while s.has_unfinished():
        finished += [f.request_id for f in run_step(s)[1]]
    assert sorted(finished) == ["a", "b"]


def test_a_finished_id_cannot_be_reused():
    s = make()
    s.add(seq("a", 3, max_tokens=1))
    run_step(s)
    assert not s.has_unfinished()
    with pytest.raises(ValueError, match="already submitted"):
        s.add(seq("a", 3))


def test_stop_token_finishes_with_reason_stop():
    s = make()
    a = seq("a", 3, max_tokens=10)
    a.stop_token_ids = frozenset({fake_token(a)})  # its very first token
    s.add(a)
    _, finished = run_step(s)
    assert (
        finished == [a] and a.finish_reason == "stop" and s.pool.num_free == s.pool.num_blocks
    )


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_random_workloads_finish_every_request_exactly_once(data):
    block_size = data.draw(st.sampled_from([1, 2, 4, 8]), label="block_size")
    num_blocks = data.draw(st.integers(6, 40), label="num_blocks")
    s = Scheduler(
        BlockPool(num_blocks),
        block_size,
        data.draw(st.integers(1, 48), label="budget"),
        data.draw(st.integers(1, 8), label="max_seqs"),
        max_model_len=64,
    )
    lengths = data.draw(
        st.lists(st.tuples(st.integers(1, 30), st.integers(1, 12)), min_size=5, max_size=30)
    )
    pending = [seq(f"r{i}", p, m) for i, (p, m) in enumerate(lengths)]
    arrivals = data.draw(
        st.lists(st.integers(0, 5), min_size=len(pending), max_size=len(pending))
    )
    finished, step = [], 0
    while pending or s.has_unfinished():
        for q in [
            q for q, a in zip(pending, arrivals) if a <= step
        ]:  # requests arrive over time
            try:
                s.add(q)
            except ValueError:
                assert (
                    num_blocks_for(len(q.prompt_ids) + q.params.max_tokens - 1, s.block_size)
                    > num_blocks
                )
                finished.append(q)  # rejected up front: counted as done, never scheduled
            i = pending.index(q)
            pending.pop(i), arrivals.pop(i)
        plan, done = run_step(s)
        step += 1
        assert plan.num_tokens <= s.max_num_batched_tokens and len(s.running) <= s.max_num_seqs
        held = [b for r in s.running for b in r.block_table]
        assert len(held) == len(set(held)) and len(held) + s.pool.num_free == num_blocks, (
            "a block leaked or is shared"
        )
        assert all(not w.block_table and w.num_computed == 0 for w in s.waiting)
        assert plan.chunks or not s.has_unfinished() or pending, "stalled with work left"
        finished += done
        assert step < 5000
    ids = [f.request_id for f in finished]
    assert sorted(ids) == sorted(f"r{i}" for i in range(len(lengths))) and len(set(ids)) == len(
        ids
    )
    for f in finished:
        if f.status == "finished":
            assert len(f.output_ids) == f.params.max_tokens and f.finish_reason == "length"


def state(s: Scheduler):
    return [
        (q.request_id, q.status, q.num_computed, list(q.output_ids), list(q.block_table))
        for q in [*s.waiting, *s.running]
    ], s.pool.num_free


@pytest.mark.parametrize(
    "misuse, words",
    [
        ("the same plan twice", "the plan of step 1 was already applied"),
        ("a stale plan", r"the plan of step 1 is stale \(the latest is step 2\)"),
        (
            "a token that is not an int",
            r"no sampled token for request 'a'.*got 'x': expected an int",
        ),
        ("a missing token", "no sampled token for request 'a'"),
    ],
)
def test_a_plan_is_applied_once_or_not_at_all(misuse, words):
    """update applied twice used to append the tokens twice and move num_computed past the
    end."""
    s = make(budget=16)
    s.add(seq("a", 5, max_tokens=6))
    s.add(seq("b", 3, max_tokens=6))
    plan = s.schedule()
    sampled = {c.request_id: 1000 + i for i, c in enumerate(plan.chunks) if c.need_logits}
    if misuse == "the same plan twice":
        s.update(plan, sampled)
    elif misuse == "a stale plan":
        # a newer plan exists (the engine's step raised between schedule and update)
        s.schedule()
    elif misuse == "a token that is not an int":
        sampled["a"] = "x"
    else:
        del sampled["a"]
    before = state(s)
    with pytest.raises(ValueError, match=words):
        s.update(plan, sampled)
    assert state(s) == before
    assert all(q.num_computed <= q.num_tokens for q in s.running)


def test_abort_frees_a_running_request_and_skips_its_chunk_in_the_pending_plan():
    s = make(budget=16)
    s.add(seq("a", 5))
    s.add(seq("b", 3))
    plan = s.schedule()
    free = s.pool.num_free
    assert s.abort("a").finish_reason == "abort" and s.pool.num_free == free + 2
    finished = s.update(plan, {c.request_id: 1234 for c in plan.chunks if c.need_logits})
    assert (
        finished == []
        and [r.request_id for r in s.running] == ["b"]
        and s.running[0].output_ids == [1234]
    )
    assert s.abort("a") is None and s.abort("never") is None
