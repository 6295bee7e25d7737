"""Tests for RadixTree: the example by hand, splits where a match ends inside a node, then
random sequences
over a small alphabet (many shared prefixes) against
minillm.prefix_caching.radix_cache.RadixCache and a brute-force oracle."""

import random

from grading import check_equal

from minillm.prefix_caching.radix_cache import RadixCache


def test_insert_into_an_empty_tree_makes_one_leaf(learner):
    """Nothing is cached yet: insert returns 0 and the tree holds one node with every token."""
    tree = learner.RadixTree()
    check_equal(tree.insert([4, 8, 15, 16]), 0, "insert([4, 8, 15, 16]) into an empty tree")
    check_equal(
        [tree.num_nodes(), tree.total_tokens()],
        [1, 4],
        "[num_nodes(), total_tokens()] after it",
    )
    check_equal(tree.insert([4, 8, 15, 16]), 4, "inserting the same tokens again")
    check_equal(
        [tree.num_nodes(), tree.total_tokens()],
        [1, 4],
        "[num_nodes(), total_tokens()] after the repeat",
    )


def test_insert_branches_off_inside_a_node(learner):
    """The task's example: [1, 2, 3, 9] splits [1, 2, 3, 4, 5] after 3 and adds the leaf [9]."""
    tree = learner.RadixTree()
    tree.insert([1, 2, 3, 4, 5])
    check_equal(tree.insert([1, 2, 3, 9]), 3, "insert([1, 2, 3, 9]) after [1, 2, 3, 4, 5]")
    check_equal(
        [tree.num_nodes(), tree.total_tokens()],
        [3, 6],
        "[num_nodes(), total_tokens()] after it",
    )
    check_equal(
        tree.match_prefix([1, 2, 3, 9, 9]),
        4,
        "match_prefix([1, 2, 3, 9, 9]): the new leaf hangs under [1, 2, 3]",
    )


def test_a_match_that_ends_inside_a_node_splits_it(learner):
    """match_prefix([1, 2, 7]) ends after 2 tokens of the node [1, 2, 3]: it becomes [1, 2] ->
    [3]."""
    tree = learner.RadixTree()
    tree.insert([1, 2, 3, 4, 5])
    tree.insert([1, 2, 3, 9])
    check_equal(tree.match_prefix([1, 2, 7]), 2, "match_prefix([1, 2, 7])")
    check_equal(
        [tree.num_nodes(), tree.total_tokens()],
        [4, 6],
        "[num_nodes(), total_tokens()] after the split",
    )
    check_equal(
        tree.match_prefix([1, 2, 3, 4, 5, 6]),
        5,
        "match_prefix([1, 2, 3, 4, 5, 6]) after the split",
    )


def test_a_match_that_ends_on_a_node_boundary_changes_nothing(learner):
    """No split when the match ends exactly at the end of a node, or matches nothing."""
    tree = learner.RadixTree()
    tree.insert([1, 2, 3])
    tree.insert([1, 2, 3, 4, 5])
    check_equal(
        [tree.match_prefix([1, 2, 3, 8]), tree.match_prefix([6]), tree.match_prefix([])],
        [3, 0, 0],
        "match_prefix of [1, 2, 3, 8], [6] and []",
    )
    check_equal(
        [tree.num_nodes(), tree.total_tokens()],
        [2, 5],
        "[num_nodes(), total_tokens()] after those matches",
    )


def test_a_match_can_end_inside_a_node_at_the_end_of_the_query(learner):
    """A query that is a proper prefix of a node's key ends inside it: split there too."""
    tree = learner.RadixTree()
    tree.insert([5, 6, 7, 8])
    check_equal(
        tree.match_prefix([5, 6]), 2, "match_prefix([5, 6]) after inserting [5, 6, 7, 8]"
    )
    check_equal(tree.num_nodes(), 2, "num_nodes() after it")
    check_equal(tree.insert([5, 6, 1]), 2, "insert([5, 6, 1]) after the split")


def test_random_sequences_match_the_longest_common_prefix(learner):
    """Over a 3-token alphabet, with any order of inserts and matches, on two trees side by
    side:
    the same answers, node counts and sizes as minillm's RadixCache, and matches equal to the
    longest common prefix with anything inserted into that tree (two trees share nothing)."""
    rng = random.Random(11)
    for case in range(30):
        trees, refs = [learner.RadixTree(), learner.RadixTree()], [RadixCache(), RadixCache()]
        inserted = [[], []]
        for step in range(25):
            k = rng.randrange(2) if step else 0
            tree, ref = trees[k], refs[k]
            seq = [rng.randrange(3) for _ in range(rng.randint(0, 10))]
            if rng.random() < 0.5:
                want = ref.insert(seq)
                check_equal(
                    tree.insert(seq),
                    want,
                    f"case {case}, step {step}: tree {k}'s insert({seq})",
                )
                inserted[k].append(seq)
            else:
                want, _ = ref.match_prefix(seq)
                lcp = max(
                    [
                        next(
                            (i for i, (x, y) in enumerate(zip(seq, s)) if x != y),
                            min(len(seq), len(s)),
                        )
                        for s in inserted[k]
                    ]
                    or [0]
                )
                assert want == lcp
                check_equal(
                    tree.match_prefix(seq),
                    want,
                    f"case {case}, step {step}: tree {k}'s match_prefix({seq}) "
                    f"(of two trees; this one holds {inserted[k]})",
                )
            check_equal(
                [tree.num_nodes(), tree.total_tokens()],
                [ref.num_nodes(), ref.total_size],
                f"case {case}, after step {step}: tree {k}'s [num_nodes(), total_tokens()] "
                "(of two trees)",
            )
