"""Tests for top_k_top_p_filter and sample: hand-made distributions, ties, batches of different
rows,
any vocabulary size and dtype, and draws compared one for one with torch.multinomial under
the same seed."""

import pytest
import torch
from grading import check_close, check_equal, fail, global_random_state

INF = float("-inf")


def kept(filtered):
    """The vocabulary ids left in each row."""
    return [torch.nonzero(row > INF).flatten().tolist() for row in filtered]


def reference_filter(logits, top_k, top_p):
    """The rules of problem.md, one row and one token at a time (slow and plain on purpose)."""
    out = logits.clone()
    for row in out:
        if 0 < top_k < row.numel():
            kth = sorted(row.tolist(), reverse=True)[top_k - 1]
            row[row < kth] = INF
        if top_p < 1.0:
            probs = row.double().softmax(-1)
            ranked = sorted(probs.tolist(), reverse=True)
            mass, smallest = 0.0, ranked[0]
            for p in ranked:
                if mass >= top_p:
                    break
                mass, smallest = mass + p, p
            row[probs < smallest] = INF
    return out


def reference_sample(logits, temperature, top_k, top_p, seed):
    probs = top_k_top_p(logits / temperature, top_k, top_p).softmax(dim=-1)
    return torch.multinomial(
        probs, num_samples=1, generator=torch.Generator().manual_seed(seed)
    ).squeeze(-1)


def top_k_top_p(logits, top_k, top_p):
    return reference_filter(logits, top_k, top_p)


def test_top_k_keeps_the_k_largest_logits(learner):
    """Keep each row's k largest logits where they are; set the others to -inf."""
    got = learner.top_k_top_p_filter(torch.tensor([[1.0, 5.0, 3.0, 4.0, 2.0]]), 2, 1.0)
    check_close(
        got,
        torch.tensor([[INF, 5.0, INF, 4.0, INF]]),
        "top_k_top_p_filter(top_k=2, top_p=1.0)",
        atol=0,
    )


def test_top_k_keeps_ties_with_the_kth_logit(learner):
    """Ties are never split: logits equal to the k-th largest all stay (3 tokens kept for
    top_k=2 here)."""
    logits = torch.tensor([[3.0, 1.0, 3.0, 2.0, 3.0], [0.5, 2.0, 2.0, 1.0, -1.0]])
    check_equal(
        kept(learner.top_k_top_p_filter(logits, 2, 1.0)),
        [[0, 2, 4], [1, 2]],
        "the tokens kept with top_k=2",
    )
    check_equal(
        kept(learner.top_k_top_p_filter(logits, 1, 1.0)),
        [[0, 2, 4], [1, 2]],
        "the tokens kept with top_k=1",
    )


def test_top_p_keeps_the_token_that_crosses_p(learner):
    """Probabilities 0.5, 0.3, 0.15, 0.05 with top_p 0.7: 0.5 is not enough, 0.5 + 0.3 is, so
    keep both."""
    logits = torch.tensor([[0.15, 0.5, 0.05, 0.3]]).log()
    check_equal(
        kept(learner.top_k_top_p_filter(logits, 0, 0.7)),
        [[1, 3]],
        "the tokens kept with top_p=0.7",
    )
    check_equal(
        kept(learner.top_k_top_p_filter(logits, 0, 0.9)),
        [[0, 1, 3]],
        "the tokens kept with top_p=0.9",
    )


def test_top_p_keeps_ties_with_the_crossing_token(learner):
    """0.4, 0.3, 0.3 with top_p 0.5: 0.4 + 0.3 crosses, and the other 0.3 is exactly as likely,
    so all three stay."""
    logits = torch.tensor([[0.3, 0.4, 0.3], [0.1, 0.6, 0.3]]).log()
    check_equal(
        kept(learner.top_k_top_p_filter(logits, 0, 0.5)),
        [[0, 1, 2], [1]],
        "the tokens kept with top_p=0.5",
    )


def test_top_p_always_keeps_the_most_likely_token(learner):
    """Even when the best token alone is more than top_p, it stays: never filter a row to
    nothing."""
    logits = torch.tensor([[0.2, 0.7, 0.1]]).log()
    check_equal(
        kept(learner.top_k_top_p_filter(logits, 0, 0.05)),
        [[1]],
        "the tokens kept with top_p=0.05",
    )


def test_top_p_works_on_what_top_k_kept(learner):
    """After top_k=3 of 0.4, 0.3, 0.2, 0.1, renormalise (0.44, 0.33, 0.22); top_p=0.75 then
    keeps two."""
    logits = torch.tensor([[0.1, 0.3, 0.4, 0.2]]).log()
    check_equal(
        kept(learner.top_k_top_p_filter(logits, 3, 0.75)),
        [[1, 2]],
        "the tokens kept with top_k=3, top_p=0.75",
    )


def test_rows_are_filtered_independently(learner):
    """Each row has its own k-th largest logit and its own cumulative sum."""
    logits = torch.tensor([[0.0, 1.0, 2.0, 3.0], [3.0, 2.0, 1.0, 0.0], [5.0, 5.5, -1.0, 0.0]])
    check_equal(
        kept(learner.top_k_top_p_filter(logits, 2, 1.0)),
        [[2, 3], [0, 1], [0, 1]],
        "the tokens kept with top_k=2",
    )
    check_equal(
        kept(learner.top_k_top_p_filter(logits, 0, 0.7)),
        [[2, 3], [0, 1], [0, 1]],
        "the tokens kept with top_p=0.7",
    )


@pytest.mark.parametrize(
    "top_k, top_p", [(5, 1.0), (0, 0.8), (12, 0.5), (3, 0.95), (40, 0.3), (1, 0.99)]
)
def test_random_batches_follow_the_rules(learner, top_k, top_p):
    """Batches of rows with different distributions, any vocabulary size, against the rules one
    token at a time."""
    g = torch.Generator().manual_seed(top_k)
    logits = torch.randn(7, 50, generator=g) * torch.tensor(
        [[0.5], [1.0], [2.0], [3.0], [4.0], [0.1], [1.5]]
    )
    logits[6, :10] = logits[6, 10]  # a row full of ties
    check_equal(
        kept(learner.top_k_top_p_filter(logits, top_k, top_p)),
        kept(reference_filter(logits, top_k, top_p)),
        f"the tokens kept per row of a [7, 50] batch with top_k={top_k}, top_p={top_p}",
    )


def test_disabled_filters_change_nothing(learner):
    """top_k <= 0 (or >= V) and top_p >= 1.0 switch the filters off."""
    logits = torch.randn(3, 10, generator=torch.Generator().manual_seed(0))
    for top_k, top_p in [(0, 1.0), (10, 1.0), (-1, 1.0), (25, 1.5)]:
        check_close(
            learner.top_k_top_p_filter(logits, top_k, top_p),
            logits,
            f"filtering with top_k={top_k}, top_p={top_p}",
            atol=0,
        )


def test_half_precision_logits_stay_half_precision(learner):
    """The filtered tensor has the logits' dtype."""
    logits = torch.tensor([[1.0, 5.0, 3.0, 4.0, 2.0]], dtype=torch.float16)
    check_close(
        learner.top_k_top_p_filter(logits, 2, 0.9),
        torch.tensor([[INF, 5.0, INF, 4.0, INF]]).half(),
        "top_k_top_p_filter(float16 logits, top_k=2, top_p=0.9)",
        atol=0,
        dtype=torch.float16,
    )


def test_temperature_zero_is_greedy(learner):
    """temperature 0: the argmax of each row (the lowest id among equal maxima), as a long
    tensor [B]."""
    logits = torch.tensor([[0.1, 2.0, -1.0], [3.0, 0.0, 2.9995], [1.0, 4.0, 4.0]]).repeat(8, 1)
    got = learner.sample(logits, 0.0, 0, 1.0, torch.Generator().manual_seed(0))
    if not isinstance(got, torch.Tensor) or got.dtype != torch.long:
        fail(f"sample should return a torch.long tensor, got {got!r}")
    check_equal(
        got,
        [1, 0, 1] * 8,
        "sample(logits, temperature=0) for 8 copies of 3 rows (one near-tie, one tie)",
    )


@pytest.mark.parametrize(
    "temperature, top_k, top_p", [(1.0, 0, 1.0), (0.7, 10, 1.0), (1.3, 0, 0.8), (0.5, 6, 0.9)]
)
def test_draws_follow_torch_multinomial_with_the_seed(learner, temperature, top_k, top_p):
    """Divide by temperature, filter, softmax, then torch.multinomial(probs, 1,
    generator=generator): same seed, same tokens. Only the generator given is drawn from: the
    process's global random state is left as it was."""
    logits = torch.randn(64, 30, generator=torch.Generator().manual_seed(3)) * 2
    before = global_random_state(learner)
    got = learner.sample(logits, temperature, top_k, top_p, torch.Generator().manual_seed(11))
    check_equal(
        got,
        reference_sample(logits, temperature, top_k, top_p, 11),
        f"64 draws with seed 11, temperature {temperature}, top_k {top_k}, top_p {top_p}",
    )
    check_equal(
        global_random_state(learner) == before,
        True,
        "whether sample left the global "
        "random state of its process (torch's default generator, Python's random) as it "
        "was: draw with generator=generator",
    )


def test_one_generator_continues_its_sequence(learner):
    """Two calls with the same generator draw the next numbers of its stream, not the same ones
    again."""
    logits = torch.zeros(32, 40)
    g = torch.Generator().manual_seed(5)
    first, second = (
        learner.sample(logits, 1.0, 0, 1.0, g),
        learner.sample(logits, 1.0, 0, 1.0, g),
    )
    ref = torch.Generator().manual_seed(5)
    want = [
        torch.multinomial(logits.softmax(-1), 1, generator=ref).squeeze(-1) for _ in range(2)
    ]
    check_equal([first, second], want, "two calls of sample with one generator seeded 5")


def test_never_samples_a_filtered_token(learner):
    """Softmax of -inf is 0: after top_k=3 only the three largest logits can come out."""
    logits = torch.tensor([[2.0, 0.5, 1.9, 1.8, 1.7, 0.0]]).repeat(2000, 1)
    got = learner.sample(logits, 1.0, 3, 1.0, torch.Generator().manual_seed(0))
    check_equal(
        sorted(set(got.tolist())), [0, 2, 3], "the tokens drawn 2000 times with top_k=3"
    )
