"""Tests for hits_in_steps: by hand (budgets that split a prompt mid-block, the last-token rule,
a request and its own blocks), then random bursts against a token-level oracle."""

import random

from grading import check_equal, check_raises

from minillm.prefix_caching.kv_cache_manager import hash_request_tokens

SYSTEM = list(range(500, 512))  # 12 tokens: three full blocks of 4
BURST = [SYSTEM + [1, 2], SYSTEM + [3], SYSTEM + [4, 5, 6]]
TWO = [SYSTEM + [1], SYSTEM + [2]]  # 13 tokens each


def oracle(prompts, block_size, budget, before, file_at):
    """The same burst at the level of tokens: a block is findable when the prefix it ends is."""

    def full_prefixes(p, end):
        return {tuple(p[:k]) for k in range(block_size, end + 1, block_size)}

    findable = set().union(*(full_prefixes(p, len(p)) for p in before))
    computed = {}  # request -> tokens computed, for admitted requests still prefilling
    hits, queue = [0] * len(prompts), list(range(len(prompts)))
    while queue or computed:
        left, new = budget, []
        order = sorted(computed) + queue  # admitted requests in arrival order, then the queue
        for i in order:
            if left <= 0:
                break
            p = prompts[i]
            if i not in computed:  # admission: the longest findable run, before its last token
                queue.remove(i)
                k = (len(p) - 1) // block_size * block_size
                while k and tuple(p[:k]) not in findable:
                    k -= block_size
                hits[i] = computed[i] = k
            n = min(len(p) - computed[i], left)
            left -= n
            computed[i] += n
            blocks = full_prefixes(p, computed[i])
            (findable.update(blocks) if file_at == "allocation" else new.append(blocks))
        findable.update(*new)
        computed = {i: c for i, c in computed.items() if c < len(prompts[i])}
    return hits


def test_one_step_when_the_budget_holds_the_burst(learner):
    """Budget for all: after the step nobody finds anything; at allocation the later ones find
    the first request's three blocks."""
    for file_at, want in (("after_step", [0, 0, 0]), ("allocation", [0, 12, 12])):
        check_equal(
            learner.hits_in_steps(BURST, 4, 64, set(), file_at),
            want,
            f"hits_in_steps(three prompts sharing 12 tokens, 4, budget 64, empty cache, "
            f"{file_at!r})",
        )


def test_a_budget_that_spills_into_the_next_step(learner):
    """Budget 20: the second request's first chunk runs beside the first request; the third
    waits a step, and after the step it finds blocks that the first request computed."""
    for file_at, want in (("after_step", [0, 0, 12]), ("allocation", [0, 12, 12])):
        check_equal(
            learner.hits_in_steps(BURST, 4, 20, set(), file_at),
            want,
            f"hits_in_steps(three prompts sharing 12 tokens, 4, budget 20, empty cache, "
            f"{file_at!r})",
        )


def test_a_chunk_files_only_the_blocks_it_completes(learner):
    """A chunk ending inside a block files the blocks before it, not that block, nor the blocks
    of the prompt still to come."""
    for budget, file_at, want in (
        (7, "after_step", [0, 4]),  # step 1 computed 7 tokens: one full block
        (8, "after_step", [0, 8]),  # 8 tokens: two
        (7, "allocation", [0, 12]),  # step 2's chunk completes the prompt before B is admitted
    ):
        check_equal(
            learner.hits_in_steps(TWO, 4, budget, set(), file_at),
            want,
            f"hits_in_steps(two 13-token prompts sharing 12, 4, budget {budget}, empty cache, "
            f"{file_at!r})",
        )


def test_a_request_does_not_find_its_own_blocks(learner):
    """A request looks up its prefix before its own blocks are filed."""
    check_equal(
        learner.hits_in_steps([SYSTEM + [1]], 4, 64, set(), "allocation"),
        [0],
        "hits_in_steps([13 tokens], 4, budget 64, empty cache, 'allocation')",
    )
    check_equal(
        learner.hits_in_steps([SYSTEM + [1]] * 2, 4, 64, set(), "allocation"),
        [0, 12],
        "the same 13-token prompt twice, budget 64, 'allocation'",
    )


def test_the_block_of_the_last_token_is_never_a_hit(learner):
    """A prompt of exactly k cached blocks gets k - 1, yet its own k-th block is filed."""
    cached = set(hash_request_tokens(SYSTEM, 4))
    check_equal(
        learner.hits_in_steps([SYSTEM, SYSTEM + [9]], 4, 64, cached, "after_step"),
        [8, 12],
        "hits_in_steps([the 12 cached tokens, the same + 1], 4, budget 64, 'after_step')",
    )
    check_equal(
        learner.hits_in_steps([SYSTEM[:8], SYSTEM + [9]], 4, 64, set(), "allocation"),
        [0, 8],
        "hits_in_steps([8 tokens, the 12 + 1], 4, budget 64, empty cache, 'allocation')",
    )


def test_the_walk_stops_at_the_first_miss(learner):
    """Only a prefix can be reused: a cached block after a missing one does not count."""
    names = hash_request_tokens(SYSTEM, 4)
    check_equal(
        learner.hits_in_steps([SYSTEM + [1]], 4, 64, {names[0], names[2]}, "after_step"),
        [4],
        "hits_in_steps([13 tokens], 4, budget 64, cache of blocks 0 and 2, 'after_step')",
    )


def test_the_cache_before_the_burst_is_left_unchanged(learner):
    """cached is the caller's cache: the burst's blocks are not written into it."""
    cached = set(hash_request_tokens(SYSTEM, 4))
    before = set(cached)
    learner.hits_in_steps(BURST + [list(range(700, 720))], 4, 10, cached, "allocation")
    check_equal(cached == before, True, "whether hits_in_steps left `cached` as it was")


def test_an_unknown_filing_time_is_refused(learner):
    """Only 'allocation' and 'after_step' are filing times."""
    check_raises(
        ValueError,
        learner.hits_in_steps,
        BURST,
        4,
        64,
        set(),
        "never",
        what="hits_in_steps(..., file_at='never')",
    )


def test_random_bursts_match_a_token_level_replay(learner):
    """Random bursts over a few shared heads, any block size and budget, both filing times."""
    rng = random.Random(11)
    for case in range(60):
        block_size = rng.choice([1, 2, 3, 4, 8])
        budget = rng.choice([1, 3, 5, 8, 13, 40])
        heads = [[rng.randrange(20) for _ in range(rng.randint(0, 24))] for _ in range(3)]

        def prompt(heads=heads):
            return rng.choice(heads) + [rng.randrange(20) for _ in range(rng.randint(1, 8))]

        before = [prompt() for _ in range(rng.randint(0, 2))]
        burst = [prompt() for _ in range(rng.randint(1, 6))]
        cached = {n for p in before for n in hash_request_tokens(p, block_size)}
        for file_at in ("after_step", "allocation"):
            check_equal(
                learner.hits_in_steps(burst, block_size, budget, set(cached), file_at),
                oracle(burst, block_size, budget, before, file_at),
                f"case {case}: hits_in_steps({burst}, {block_size}, budget {budget}, cache of "
                f"{before}, {file_at!r})",
            )
