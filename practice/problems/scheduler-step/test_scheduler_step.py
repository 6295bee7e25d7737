"""Tests for schedule_step: the rules one at a time on small cases, a whole run step by step,
then
random states where each rule is checked on its own, so a broken rule fails with its own
message."""

import random

import pytest
from grading import check_equal, check_names, check_raises, fail

MAY_CHANGE_IN_PLACE = {
    "running": 0,
    "waiting": 1,
}  # admitted requests move from waiting to running


def make(learner, spec):
    """'a:4/4' is request a with a 4-token prompt, 4 tokens computed; 'c:5' is a new 5-token
    prompt."""
    out = []
    for item in spec.split():
        name, sizes = item.split(":")
        prompt, _, done = sizes.partition("/")
        out.append(learner.Request(name, int(prompt), int(done or 0)))
    return out


def ids(requests):
    return [r.request_id for r in requests]


def test_decodes_are_scheduled_before_prefills(learner):
    """Give every decode its 1 token before any prefill takes from the budget, even if it is
    later in running."""
    running = make(learner, "p:100/20 d1:4/4 d2:7/9")
    check_equal(
        learner.schedule_step(running, [], 10, 8),
        [("d1", 1), ("d2", 1), ("p", 8)],
        "schedule_step(running=[p prefilling, d1, d2 decoding], budget 10)",
    )


def test_decodes_beyond_the_budget_wait(learner):
    """With a budget of 2 and three decodes, the first two in running order get a token; the
    third gets none."""
    running = make(learner, "a:3/3 b:5/6 c:2/2")
    check_equal(
        learner.schedule_step(running, make(learner, "w:4"), 2, 8),
        [("a", 1), ("b", 1)],
        "three decodes with a budget of 2",
    )


def test_long_prompt_is_chunked_to_the_budget(learner):
    """A 100-token prompt with a budget of 32 computes 32 tokens now and the rest in later
    steps."""
    running, waiting = [], make(learner, "a:100")
    check_equal(
        learner.schedule_step(running, waiting, 32, 4),
        [("a", 32)],
        "the first step of a 100-token prompt",
    )
    check_equal(
        [ids(running), ids(waiting)], [["a"], []], "[running, waiting] after admitting a"
    )
    running[0].num_computed_tokens = 96
    check_equal(
        learner.schedule_step(running, waiting, 32, 4),
        [("a", 4)],
        "the step with 4 prompt tokens left",
    )


def test_started_prefill_goes_before_new_requests(learner):
    """A prompt already running continues before a waiting request is admitted."""
    running, waiting = make(learner, "a:100/32"), make(learner, "b:10")
    check_equal(
        learner.schedule_step(running, waiting, 40, 4),
        [("a", 40)],
        "running a (68 left), waiting b, budget 40",
    )
    check_equal(ids(waiting), ["b"], "waiting after a took the whole budget")


def test_new_requests_fill_the_leftover_budget(learner):
    """Admit waiting requests in arrival order while budget and seats remain; the last may be a
    chunk."""
    running, waiting = make(learner, "a:4/4"), make(learner, "b:5 c:50 d:3")
    check_equal(
        learner.schedule_step(running, waiting, 20, 4),
        [("a", 1), ("b", 5), ("c", 14)],
        "running a (decoding), waiting b:5, c:50, d:3, budget 20",
    )
    check_equal(
        [ids(running), ids(waiting)],
        [["a", "b", "c"], ["d"]],
        "[running, waiting] after the step",
    )


def test_max_num_seqs_caps_the_running_set(learner):
    """No admission once len(running) == max_num_seqs, whatever budget is left."""
    running, waiting = make(learner, "a:4/4 b:3/3"), make(learner, "c:5")
    check_equal(
        learner.schedule_step(running, waiting, 50, 2),
        [("a", 1), ("b", 1)],
        "two decodes, max_num_seqs 2",
    )
    check_equal(ids(waiting), ["c"], "waiting when the running set is full")
    running, waiting = make(learner, "a:4/4"), make(learner, "c:5 d:6 e:7")
    check_equal(
        learner.schedule_step(running, waiting, 50, 3),
        [("a", 1), ("c", 5), ("d", 6)],
        "max_num_seqs 3",
    )


def test_waiting_requests_are_served_first_come_first_served(learner):
    """Take waiting[0] first; a later, shorter request does not jump the queue."""
    running, waiting = [], make(learner, "b:30 c:2")
    check_equal(
        learner.schedule_step(running, waiting, 10, 4),
        [("b", 10)],
        "waiting b:30 then c:2, budget 10",
    )
    check_equal(ids(waiting), ["c"], "waiting after the step")


def test_no_request_is_scheduled_for_zero_tokens(learner):
    """When decodes use up the budget, nobody is admitted (admitting with 0 tokens wastes a
    seat)."""
    running, waiting = make(learner, "a:4/4 b:3/3"), make(learner, "c:5")
    check_equal(
        learner.schedule_step(running, waiting, 2, 8),
        [("a", 1), ("b", 1)],
        "two decodes with a budget of 2",
    )
    check_equal(
        [ids(running), ids(waiting)], [["a", "b"], ["c"]], "[running, waiting] after the step"
    )


def test_computed_tokens_are_left_to_the_engine(learner):
    """schedule_step plans; the engine advances num_computed_tokens after the forward has
    run."""
    running, waiting = make(learner, "a:4/4 b:10/2"), make(learner, "c:5")
    learner.schedule_step(running, waiting, 20, 8)
    check_equal(
        [r.num_computed_tokens for r in running],
        [4, 2, 0],
        "num_computed_tokens of a, b, c after the step",
    )


def test_whole_run_step_by_step(learner):
    """Budget 8, at most 2 running; prompts a:5, b:12, c:3 each produce 2 tokens."""
    running, waiting, produced, trace = [], make(learner, "a:5 b:12 c:3"), {}, []
    for _ in range(10):
        plan = learner.schedule_step(running, waiting, 8, 2)
        if not plan:
            break
        trace.append(plan)
        by_id = {r.request_id: r for r in running}
        for rid, n in plan:
            r = by_id[rid]
            r.num_computed_tokens += n
            if not r.is_prefilling:  # this step ended the prompt or decoded: one token out
                produced[rid] = produced.get(rid, 0) + 1
        running[:] = [r for r in running if produced.get(r.request_id, 0) < 2]
    check_equal(
        trace,
        [
            [("a", 5), ("b", 3)],
            [("a", 1), ("b", 7)],
            [("b", 2), ("c", 3)],
            [("b", 1), ("c", 1)],
        ],
        "the steps of the whole run",
    )


@pytest.mark.parametrize("budget, cap, bad", [(0, 4, 0), (-3, 4, -3), (8, 0, 0), (8, -2, -2)])
def test_bad_limits_raise_value_error_naming_them(learner, budget, cap, bad):
    """A budget or a cap below 1 could never schedule anything: ValueError naming the value,
    lists unchanged."""
    running, waiting = make(learner, "a:3/3"), make(learner, "b:3")
    what = f"schedule_step(token_budget={budget}, max_num_seqs={cap})"
    error = check_raises(
        ValueError, learner.schedule_step, running, waiting, budget, cap, what=what
    )
    check_names(error, bad, what)
    check_equal(
        [ids(running), ids(waiting)], [["a"], ["b"]], f"[running, waiting] after {what}"
    )


# ---------------------------------------------------------------- random states, one rule per
#   test


def random_steps(learner, seed=0, cases=50):
    """(description, running before, waiting before, budget, cap, plan, running after, waiting
    after, left)."""
    rng = random.Random(seed)
    for case in range(cases):
        specs = []
        for i in range(rng.randint(0, 6)):
            prompt = rng.randint(1, 40)
            specs.append(
                (
                    f"r{i}",
                    prompt,
                    rng.choice([prompt + rng.randint(0, 5), rng.randint(0, prompt - 1)]),
                )
            )
        waiting_specs = [(f"w{i}", rng.randint(1, 40), 0) for i in range(rng.randint(0, 5))]
        budget, cap = rng.randint(1, 30), rng.randint(max(1, len(specs)), 8)
        running = [learner.Request(*s) for s in specs]
        waiting = [learner.Request(*s) for s in waiting_specs]
        before_running, before_waiting = list(running), list(waiting)
        state = (
            f"case {case}: running {specs}, waiting {waiting_specs}, budget {budget}, "
            f"max_num_seqs {cap}"
        )
        plan = learner.schedule_step(running, waiting, budget, cap)
        if not isinstance(plan, list) or not all(
            isinstance(p, tuple) and len(p) == 2 for p in plan
        ):
            fail(
                f"{state}: schedule_step should return a list of (request_id, num_tokens) "
                f"tuples, got {plan!r}"
            )
        left = {
            rid: prompt - done for rid, prompt, done in specs + waiting_specs
        }  # prompt tokens left
        yield state, before_running, before_waiting, budget, cap, plan, running, waiting, left


def test_random_states_never_exceed_the_budget(learner):
    """The tokens of a step add up to at most token_budget."""
    for state, *_, budget, _cap, plan, _running, _waiting, _left in random_steps(learner):
        if sum(n for _, n in plan) > budget:
            fail(
                f"{state}: plan {plan} schedules {sum(n for _, n in plan)} tokens > "
                f"token_budget {budget}"
            )


def test_random_states_have_no_zero_token_entry(learner):
    """Every entry computes at least one token."""
    for state, *_, _budget, _cap, plan, _running, _waiting, _left in random_steps(learner):
        if any(n < 1 for _, n in plan):
            fail(f"{state}: plan {plan} has an entry with fewer than 1 token")


def test_random_states_list_each_request_once(learner):
    """A request appears at most once in a step's plan."""
    for state, *_, _budget, _cap, plan, _running, _waiting, _left in random_steps(learner):
        names = [rid for rid, _ in plan]
        if len(set(names)) != len(names):
            fail(
                f"{state}: plan {plan} lists "
                f"{sorted({n for n in names if names.count(n) > 1})} more than once"
            )


def test_random_states_schedule_decodes_first_with_one_token_each(learner):
    """Decodes (prompt done) come first, in running order, with exactly 1 token each."""
    for state, before_running, _, _budget, _cap, plan, _running, _waiting, left in random_steps(
        learner
    ):
        decodes = [rid for rid, n in plan if left[rid] <= 0]
        if [rid for rid, _ in plan[: len(decodes)]] != decodes:
            fail(f"{state}: plan {plan} puts a prefill before a decode")
        order = [r.request_id for r in before_running]
        if sorted(decodes, key=order.index) != decodes or any(
            n != 1 for rid, n in plan if left[rid] <= 0
        ):
            fail(f"{state}: plan {plan}: decodes go in running order with exactly 1 token each")


def test_random_states_chunk_prefills_to_what_is_left(learner):
    """A prefill gets min(prompt tokens left, budget left): never more than its prompt needs."""
    for state, *_, budget, _cap, plan, _running, _waiting, left in random_steps(learner):
        spent = 0
        for rid, n in plan:
            if left[rid] > 0 and n != min(left[rid], budget - spent):
                fail(
                    f"{state}: plan {plan} gives {rid} {n} tokens; {left[rid]} prompt tokens "
                    "are left and "
                    f"{budget - spent} of the budget: expected {min(left[rid], budget - spent)}"
                )
            spent += n


def test_random_states_serve_started_prefills_in_running_order(learner):
    """Started prefills go in running order: when two compete for the budget, the earlier one in
    running gets its tokens first, and a later one only what is left (never the other way
    round)."""
    for state, before_running, _, _budget, _cap, plan, _, _, left in random_steps(learner):
        started = [r.request_id for r in before_running if left[r.request_id] > 0]
        served = [rid for rid, _ in plan if rid in started]
        if served != started[: len(served)]:
            fail(
                f"{state}: plan {plan} serves the started prefills {served}; in running order "
                f"they are {started}, so expected {started[: len(served)]} (the first in "
                "running "
                "order)"
            )


def test_random_states_admit_in_order_up_to_the_cap(learner):
    """Admitted requests move from the front of waiting to the end of running, never past
    max_num_seqs."""
    for (
        state,
        before_running,
        before_waiting,
        _budget,
        cap,
        plan,
        running,
        waiting,
        _left,
    ) in random_steps(learner):
        admitted = running[len(before_running) :]
        if (
            running[: len(before_running)] != before_running
            or admitted != before_waiting[: len(admitted)]
            or waiting != before_waiting[len(admitted) :]
        ):
            fail(
                f"{state}: the lists must change only by moving requests from the front of "
                "waiting to the end "
                f"of running; running is now {ids(running)}, waiting {ids(waiting)}"
            )
        if admitted and len(running) > cap:
            fail(
                f"{state}: admitted {ids(admitted)} although that makes {len(running)} "
                f"running > max_num_seqs {cap}"
            )
        if [rid for rid, _ in plan if rid.startswith("w")] != ids(admitted):
            fail(
                f"{state}: plan {plan} should schedule exactly the admitted requests "
                f"{ids(admitted)}, in that order"
            )


def test_random_states_leave_no_budget_idle(learner):
    """While budget is left, nobody running waits and nobody who could be admitted does."""
    for (
        state,
        before_running,
        _before_waiting,
        budget,
        cap,
        plan,
        running,
        waiting,
        _left,
    ) in random_steps(learner):
        spent = sum(n for _, n in plan)
        idle = [
            r.request_id for r in before_running if r.request_id not in {rid for rid, _ in plan}
        ]
        if spent < budget and (idle or (waiting and len(running) < cap)):
            fail(
                f"{state}: plan {plan} leaves {budget - spent} tokens of the budget unused "
                "while "
                f"{idle or ids(waiting)[:1]} could use them"
            )
