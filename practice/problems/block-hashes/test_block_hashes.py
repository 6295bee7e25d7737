"""Tests for block_hashes and cached_prefix_length: by hand, then random prompts with shared
heads, any block
size and salts, against minillm.prefix_caching.kv_cache_manager and a brute-force
longest-shared-prefix oracle."""

import random

from grading import check_equal

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
