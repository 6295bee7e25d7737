"""Tests for schedule_step: the rules one at a time, a whole run step by step, and random states."""

import random

from grading import check_equal, check_raises, fail


def make(learner, spec):
    """'a:4/4' is request a with a 4-token prompt, 4 tokens computed; 'c:5' is a new 5-token prompt."""
    out = []
    for item in spec.split():
        name, sizes = item.split(":")
        prompt, _, done = sizes.partition("/")
        out.append(learner.Request(name, int(prompt), int(done or 0)))
    return out


def ids(requests):
    return [r.request_id for r in requests]


def test_decodes_are_scheduled_before_prefills(learner):
    """Give every decode its 1 token before any prefill takes from the budget, even if it is later in running."""
    running = make(learner, "p:100/20 d1:4/4 d2:7/9")
    check_equal(learner.schedule_step(running, [], 10, 8), [("d1", 1), ("d2", 1), ("p", 8)],
                "schedule_step(running=[p prefilling, d1, d2 decoding], budget 10)")


def test_long_prompt_is_chunked_to_the_budget(learner):
    """A 100-token prompt with a budget of 32 computes 32 tokens now and the rest in later steps."""
    running, waiting = [], make(learner, "a:100")
    check_equal(learner.schedule_step(running, waiting, 32, 4), [("a", 32)], "the first step of a 100-token prompt")
    check_equal([ids(running), ids(waiting)], [["a"], []], "[running, waiting] after admitting a")
    running[0].num_computed_tokens = 96
    check_equal(learner.schedule_step(running, waiting, 32, 4), [("a", 4)], "the step with 4 prompt tokens left")


def test_started_prefill_goes_before_new_requests(learner):
    """A prompt already running continues before a waiting request is admitted."""
    running, waiting = make(learner, "a:100/32"), make(learner, "b:10")
    check_equal(learner.schedule_step(running, waiting, 40, 4), [("a", 40)], "running a (68 left), waiting b, budget 40")
    check_equal(ids(waiting), ["b"], "waiting after a took the whole budget")


def test_new_requests_fill_the_leftover_budget(learner):
    """Admit waiting requests in arrival order while budget and seats remain; the last may be a chunk."""
    running, waiting = make(learner, "a:4/4"), make(learner, "b:5 c:50")
    check_equal(learner.schedule_step(running, waiting, 20, 4), [("a", 1), ("b", 5), ("c", 14)],
                "running a (decoding), waiting b:5, c:50, budget 20")
    check_equal([ids(running), ids(waiting)], [["a", "b", "c"], []], "[running, waiting] after the step")


def test_max_num_seqs_caps_the_running_set(learner):
    """No admission once len(running) == max_num_seqs, whatever budget is left."""
    running, waiting = make(learner, "a:4/4 b:3/3"), make(learner, "c:5")
    check_equal(learner.schedule_step(running, waiting, 50, 2), [("a", 1), ("b", 1)], "two decodes, max_num_seqs 2")
    check_equal(ids(waiting), ["c"], "waiting when the running set is full")


def test_waiting_requests_are_served_first_come_first_served(learner):
    """Take waiting[0] first; a later, shorter request does not jump the queue."""
    running, waiting = [], make(learner, "b:30 c:2")
    check_equal(learner.schedule_step(running, waiting, 10, 4), [("b", 10)], "waiting b:30 then c:2, budget 10")
    check_equal(ids(waiting), ["c"], "waiting after the step")


def test_no_request_is_scheduled_for_zero_tokens(learner):
    """When decodes use up the budget, nobody is admitted (admitting with 0 tokens wastes a seat)."""
    running, waiting = make(learner, "a:4/4 b:3/3"), make(learner, "c:5")
    check_equal(learner.schedule_step(running, waiting, 2, 8), [("a", 1), ("b", 1)], "two decodes with a budget of 2")
    check_equal([ids(running), ids(waiting)], [["a", "b"], ["c"]], "[running, waiting] after the step")


def test_computed_tokens_are_left_to_the_engine(learner):
    """schedule_step plans; the engine advances num_computed_tokens after the forward has run."""
    running, waiting = make(learner, "a:4/4 b:10/2"), make(learner, "c:5")
    learner.schedule_step(running, waiting, 20, 8)
    check_equal([r.num_computed_tokens for r in running], [4, 2, 0], "num_computed_tokens of a, b, c after the step")


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
    check_equal(trace, [[("a", 5), ("b", 3)], [("a", 1), ("b", 7)], [("b", 2), ("c", 3)], [("b", 1), ("c", 1)]],
                "the steps of the whole run")


def test_random_states_obey_every_rule(learner):
    """Budget never exceeded, decodes get exactly 1, prompts never over-computed, admission in order, no idle budget."""
    rng = random.Random(0)
    for case in range(300):
        running, waiting = [], []
        for i in range(rng.randint(0, 5)):
            prompt = rng.randint(1, 40)
            running.append(learner.Request(f"r{i}", prompt, rng.choice([prompt + rng.randint(0, 5), rng.randint(1, prompt)])))
        waiting = [learner.Request(f"w{i}", rng.randint(1, 40)) for i in range(rng.randint(0, 4))]
        budget, cap = rng.randint(1, 30), rng.randint(1, 6)
        before_running, before_waiting = list(running), list(waiting)
        state = f"case {case}: running {[(r.request_id, r.num_prompt_tokens, r.num_computed_tokens) for r in running]}, " \
                f"waiting {[(r.request_id, r.num_prompt_tokens) for r in waiting]}, budget {budget}, max_num_seqs {cap}"
        plan = learner.schedule_step(running, waiting, budget, cap)
        admitted = running[len(before_running):]
        if running[:len(before_running)] != before_running or admitted != before_waiting[:len(admitted)] \
                or waiting != before_waiting[len(admitted):]:
            fail(f"{state}: requests must move only from the front of waiting to the end of running")
        if len(admitted) and len(running) > cap:
            fail(f"{state}: admitted {ids(admitted)} although that makes {len(running)} running > max_num_seqs")
        total = sum(n for _, n in plan)
        if total > budget or any(n < 1 for _, n in plan) or len({rid for rid, _ in plan}) != len(plan):
            fail(f"{state}: plan {plan} breaks the budget, has a 0-token entry, or lists a request twice")
        left = {r.request_id: r.num_prompt_tokens - r.num_computed_tokens for r in running}
        for rid, n in plan:
            if left[rid] <= 0 and n != 1 or left[rid] > 0 and n > left[rid]:
                fail(f"{state}: plan {plan} gives {rid} {n} tokens ({max(left[rid], 0)} prompt tokens left)")
        if total < budget and (len(plan) < len(running) or (waiting and len(running) < cap)):
            fail(f"{state}: plan {plan} leaves {budget - total} tokens of budget unused while work is waiting")
        expected_order = [rid for rid, _ in plan if left[rid] <= 0] + [rid for rid, _ in plan if left[rid] > 0]
        check_equal([rid for rid, _ in plan], expected_order, f"{state}: the order (decodes first)")


def test_bad_limits_raise_value_error(learner):
    """A budget or a cap below 1 could never schedule anything."""
    check_raises(ValueError, learner.schedule_step, [], make(learner, "a:3"), 0, 4, what="token_budget=0")
    check_raises(ValueError, learner.schedule_step, [], make(learner, "a:3"), 8, 0, what="max_num_seqs=0")
