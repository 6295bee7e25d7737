"""Tests for block_hashes, cached_prefix_length and hits_in_one_step: by hand, then random
prompts with shared heads, any block size and salts, against
minillm.prefix_caching.kv_cache_manager and brute-force longest-shared-prefix oracles."""

import random

from grading import check_equal, check_raises

from minillm.prefix_caching.kv_cache_manager import hash_block_tokens, hash_request_tokens


def test_a_single_block_has_no_parent(learner):
    """Block 0's name is hash_block_tokens(None, its tokens, extra key)."""
    tokens = list(range(30, 38))
    check_equal(
        learner.block_hashes(tokens, 8),
        [hash_block_tokens(None, tokens, None)],
        "block_hashes(30..37, 8)",
    )


def test_each_name_chains_its_parent(learner):
    """Block i's name is hash_block_tokens(name of block i - 1, its tokens, None)."""
    tokens = list(range(50, 62))
    h0 = hash_block_tokens(None, tokens[:4], None)
    h1 = hash_block_tokens(h0, tokens[4:8], None)
    check_equal(
        learner.block_hashes(tokens, 4),
        [h0, h1, hash_block_tokens(h1, tokens[8:], None)],
        "block_hashes(50..61, 4)",
    )


def test_the_same_block_after_another_prefix_has_another_name(learner):
    """K/V depend on every earlier token, so equal tokens after different blocks must not share
    a name."""
    a, b = [1, 2, 3, 4, 9, 9, 9, 9], [5, 6, 7, 8, 9, 9, 9, 9]
    names_a, names_b = learner.block_hashes(a, 4), learner.block_hashes(b, 4)
    check_equal(
        names_a[1] == names_b[1],
        False,
        "whether block 1 of [1, 2, 3, 4, 9, 9, 9, 9] and of "
        "[5, 6, 7, 8, 9, 9, 9, 9] get the same name",
    )


def test_only_full_blocks_are_named(learner):
    """A partly filled last block has no name: it is still being written."""
    got = [len(learner.block_hashes(list(range(n)), 4)) for n in (0, 3, 4, 7, 8, 11)]
    check_equal(
        got,
        [0, 0, 1, 1, 2, 2],
        "how many names block_hashes gives for 0, 3, 4, 7, 8, 11 tokens, block 4",
    )


def test_the_salt_enters_only_the_first_block(learner):
    """extra_key goes into block 0's hash; later blocks get None and change only through their
    parent."""
    tokens = list(range(200, 212))
    check_equal(
        learner.block_hashes(tokens, 4, "tenant-7"),
        hash_request_tokens(tokens, 4, "tenant-7"),
        "block_hashes(200..211, 4, extra_key='tenant-7')",
    )


def test_a_cached_prefix_is_found_block_by_block(learner):
    """The example of the task: two full blocks cached, and a request that extends them."""
    a = list(range(100, 110))
    cached = set(hash_request_tokens(a, 4))
    check_equal(
        learner.cached_prefix_length(a + [7, 7], 4, cached),
        8,
        "cached_prefix_length(a + [7, 7], 4)",
    )
    check_equal(
        learner.cached_prefix_length(a + [7], 4, cached),
        8,
        "cached_prefix_length(a + [7], 4): 11 tokens",
    )
    check_equal(
        learner.cached_prefix_length(a[:6] + [0, 0, 0], 4, cached),
        4,
        "a request sharing a's block 0 only",
    )
    check_equal(
        learner.cached_prefix_length([0] + a[1:], 4, cached),
        0,
        "a request differing in its first token",
    )


def test_the_last_token_is_never_a_hit(learner):
    """A prompt of exactly k cached blocks gets k - 1: the block with its last token is computed
    again."""
    tokens = list(range(300, 324))  # 6 blocks of 4
    cached = set(hash_request_tokens(tokens, 4))
    got = [learner.cached_prefix_length(tokens[:n], 4, cached) for n in (4, 5, 8, 9, 12, 24)]
    check_equal(
        got,
        [0, 4, 4, 8, 8, 20],
        "cached_prefix_length of the first 4, 5, 8, 9, 12, 24 tokens, all cached",
    )


def test_the_walk_stops_at_the_first_miss(learner):
    """Only a prefix can be reused: a cached block after a missing one does not count."""
    tokens = list(range(400, 420))
    names = hash_request_tokens(tokens, 4)
    cached = {names[0], names[2], names[3]}  # block 1 was evicted
    check_equal(
        learner.cached_prefix_length(tokens + [1], 4, cached),
        4,
        "cached_prefix_length with block 1 missing",
    )


def test_random_workloads_match_the_longest_shared_prefix(learner):
    """Prompts from a few shared heads, any block size and salt: the hit is the longest prefix
    shared with an
    earlier prompt of the same salt, rounded down to full blocks of both, and never reaching
    the last token."""
    rng = random.Random(3)
    for case in range(40):
        block_size = rng.choice([1, 2, 3, 5, 8, 16])
        heads = [[rng.randrange(50) for _ in range(rng.randint(0, 40))] for _ in range(3)]
        seen, cached = [], set()
        for _ in range(6):
            prompt = rng.choice(heads) + [rng.randrange(50) for _ in range(rng.randint(1, 12))]
            salt = rng.choice([None, None, "a", "b"])
            want = 0
            for earlier, earlier_salt in seen:
                if earlier_salt == salt:
                    shared = next(
                        (i for i, (x, y) in enumerate(zip(prompt, earlier)) if x != y),
                        min(len(prompt), len(earlier)),
                    )
                    want = max(
                        want,
                        min(
                            shared // block_size,
                            len(earlier) // block_size,
                            (len(prompt) - 1) // block_size,
                        )
                        * block_size,
                    )
            check_equal(
                learner.cached_prefix_length(prompt, block_size, cached, salt),
                want,
                f"case {case}: cached_prefix_length({prompt}, {block_size}, ..., "
                f"extra_key={salt!r})",
            )
            names = learner.block_hashes(prompt, block_size, salt)
            check_equal(
                names,
                hash_request_tokens(prompt, block_size, salt),
                f"case {case}: block_hashes({prompt}, {block_size}, {salt!r})",
            )
            seen.append((prompt, salt))
            cached.update(names)


SYSTEM = list(range(500, 512))  # 12 tokens: three full blocks of 4
BURST = [SYSTEM + [1, 2], SYSTEM + [3], SYSTEM + [4, 5, 6]]


def test_after_the_step_a_burst_finds_only_the_cache(learner):
    """Filed after the step, no request of the burst finds another's blocks: only what was
    cached before."""
    check_equal(
        learner.hits_in_one_step(BURST, 4, set(), "after_step"),
        [0, 0, 0],
        "hits_in_one_step(three prompts sharing 12 tokens, 4, empty cache, 'after_step')",
    )
    cached = set(hash_request_tokens(SYSTEM[:8], 4))  # two of the three shared blocks
    check_equal(
        learner.hits_in_one_step(BURST, 4, cached, "after_step"),
        [8, 8, 8],
        "the same burst, 'after_step', with the first two shared blocks cached",
    )


def test_at_allocation_each_request_finds_the_ones_before_it(learner):
    """Filed at allocation (vLLM), the second request of a burst already finds the first one's
    blocks."""
    check_equal(
        learner.hits_in_one_step(BURST, 4, set(), "allocation"),
        [0, 12, 12],
        "hits_in_one_step(three prompts sharing 12 tokens, 4, empty cache, 'allocation')",
    )


def test_a_request_does_not_find_its_own_blocks(learner):
    """A request looks up its prefix before its own blocks are filed."""
    check_equal(
        learner.hits_in_one_step([SYSTEM + [1]], 4, set(), "allocation"),
        [0],
        "hits_in_one_step([13 tokens], 4, empty cache, 'allocation')",
    )
    check_equal(
        learner.hits_in_one_step([SYSTEM + [1], SYSTEM + [1]], 4, set(), "allocation"),
        [0, 12],
        "the same 13-token prompt twice in one step, 'allocation'",
    )


def test_allocation_files_the_block_of_the_last_token_too(learner):
    """Every full block of the prompt is filed, also the one holding its last token, which the
    request itself could not take from the cache."""
    a = list(range(600, 608))  # exactly two full blocks of 4
    check_equal(
        learner.hits_in_one_step([a, a + [9]], 4, set(), "allocation"),
        [0, 8],
        "hits_in_one_step([8 tokens, the same 8 + 1], 4, empty cache, 'allocation')",
    )


def test_the_cache_before_the_step_is_left_unchanged(learner):
    """cached is the caller's cache: the burst's blocks are not written into it."""
    cached = set(hash_request_tokens(SYSTEM, 4))
    before = set(cached)
    learner.hits_in_one_step(BURST + [list(range(700, 720))], 4, cached, "allocation")
    check_equal(cached == before, True, "whether hits_in_one_step left `cached` as it was")


def test_an_unknown_filing_time_is_refused(learner):
    """Only 'allocation' and 'after_step' are filing times."""
    check_raises(
        ValueError,
        learner.hits_in_one_step,
        BURST,
        4,
        set(),
        "never",
        what="hits_in_one_step(..., file_at='never')",
    )


def test_random_bursts_match_the_longest_shared_prefix(learner):
    """Random bursts over a few shared heads: the hit is the longest prefix shared with a prompt
    cached before the step or (at allocation) an earlier prompt of the burst, in full blocks of
    both, never reaching the last token."""
    rng = random.Random(11)
    for case in range(40):
        block_size = rng.choice([1, 2, 3, 4, 8])
        heads = [[rng.randrange(20) for _ in range(rng.randint(0, 24))] for _ in range(3)]

        def prompt(heads=heads):
            return rng.choice(heads) + [rng.randrange(20) for _ in range(rng.randint(1, 8))]

        before = [prompt() for _ in range(rng.randint(0, 3))]
        burst = [prompt() for _ in range(rng.randint(1, 6))]
        cached = {n for p in before for n in hash_request_tokens(p, block_size)}
        for file_at in ("after_step", "allocation"):
            want = []
            for i, p in enumerate(burst):
                sources = before + (burst[:i] if file_at == "allocation" else [])
                best = 0
                for q in sources:
                    shared = next(
                        (k for k, (x, y) in enumerate(zip(p, q)) if x != y), min(len(p), len(q))
                    )
                    best = max(
                        best,
                        min(
                            shared // block_size,
                            len(q) // block_size,
                            (len(p) - 1) // block_size,
                        )
                        * block_size,
                    )
                want.append(best)
            check_equal(
                learner.hits_in_one_step(burst, block_size, set(cached), file_at),
                want,
                f"case {case}: hits_in_one_step({burst}, {block_size}, cache of {before}, "
                f"{file_at!r})",
            )
