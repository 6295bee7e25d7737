"""Tests for top_k_top_p_filter and sample: hand-made distributions and counts over many seeded draws."""

import torch

from grading import check_close, check_equal, fail

INF = float("-inf")


def kept(filtered):
    """The vocabulary ids left in each row."""
    return [torch.nonzero(row > INF).flatten().tolist() for row in filtered]


def test_top_k_keeps_the_k_largest_logits(learner):
    """Keep each row's k largest logits where they are; set the others to -inf."""
    got = learner.top_k_top_p_filter(torch.tensor([[1.0, 5.0, 3.0, 4.0, 2.0]]), 2, 1.0)
    check_close(got, torch.tensor([[INF, 5.0, INF, 4.0, INF]]), "top_k_top_p_filter(top_k=2, top_p=1.0)", atol=0)


def test_top_p_keeps_the_token_that_crosses_p(learner):
    """Probabilities 0.5, 0.3, 0.15, 0.05 with top_p 0.7: 0.5 is not enough, 0.5 + 0.3 is, so keep both."""
    logits = torch.tensor([[0.15, 0.5, 0.05, 0.3]]).log()
    check_equal(kept(learner.top_k_top_p_filter(logits, 0, 0.7)), [[1, 3]], "the tokens kept with top_p=0.7")
    check_equal(kept(learner.top_k_top_p_filter(logits, 0, 0.9)), [[0, 1, 3]], "the tokens kept with top_p=0.9")


def test_top_p_always_keeps_the_most_likely_token(learner):
    """Even when the best token alone is more than top_p, it stays: never filter a row to nothing."""
    logits = torch.tensor([[0.2, 0.7, 0.1]]).log()
    check_equal(kept(learner.top_k_top_p_filter(logits, 0, 0.05)), [[1]], "the tokens kept with top_p=0.05")


def test_top_p_works_on_what_top_k_kept(learner):
    """After top_k=3 of 0.4, 0.3, 0.2, 0.1, renormalise (0.44, 0.33, 0.22); top_p=0.75 then keeps two."""
    logits = torch.tensor([[0.1, 0.3, 0.4, 0.2]]).log()
    check_equal(kept(learner.top_k_top_p_filter(logits, 3, 0.75)), [[1, 2]], "the tokens kept with top_k=3, top_p=0.75")


def test_rows_are_filtered_independently(learner):
    """Each row has its own k-th largest logit and its own cumulative sum."""
    logits = torch.tensor([[0.0, 1.0, 2.0, 3.0], [3.0, 2.0, 1.0, 0.0], [5.0, 5.5, -1.0, 0.0]])
    check_equal(kept(learner.top_k_top_p_filter(logits, 2, 1.0)), [[2, 3], [0, 1], [0, 1]], "the tokens kept with top_k=2")


def test_disabled_filters_change_nothing(learner):
    """top_k <= 0 (or >= V) and top_p >= 1.0 switch the filters off."""
    logits = torch.randn(3, 10, generator=torch.Generator().manual_seed(0))
    check_close(learner.top_k_top_p_filter(logits, 0, 1.0), logits, "filtering with top_k=0, top_p=1.0", atol=0)
    check_close(learner.top_k_top_p_filter(logits, 10, 1.0), logits, "filtering with top_k=V", atol=0)


def test_the_input_logits_are_not_modified(learner):
    """Return a new tensor: the caller may still need the raw logits (for log-probabilities, say)."""
    logits = torch.tensor([[1.0, 5.0, 3.0, 4.0, 2.0]])
    learner.top_k_top_p_filter(logits, 2, 0.5)
    check_close(logits, torch.tensor([[1.0, 5.0, 3.0, 4.0, 2.0]]), "the logits after filtering them", atol=0)


def test_temperature_zero_is_greedy(learner):
    """temperature 0: the argmax of each row, as a long tensor [B]."""
    logits = torch.tensor([[0.1, 2.0, -1.0], [3.0, 0.0, 2.9]])
    got = learner.sample(logits, 0.0, 0, 1.0, torch.Generator().manual_seed(0))
    if not isinstance(got, torch.Tensor) or got.dtype != torch.long:
        fail(f"sample should return a torch.long tensor, got {got!r}")
    check_equal(got, [1, 0], "sample(logits, temperature=0)")


def test_same_seed_gives_the_same_tokens(learner):
    """Draw with torch.multinomial(probs, 1, generator=generator): the generator makes runs repeatable."""
    logits = torch.zeros(64, 50)
    first = learner.sample(logits, 1.0, 0, 1.0, torch.Generator().manual_seed(7))
    again = learner.sample(logits, 1.0, 0, 1.0, torch.Generator().manual_seed(7))
    other = learner.sample(logits, 1.0, 0, 1.0, torch.Generator().manual_seed(8))
    check_equal(again, first, "the tokens drawn twice with seed 7")
    if torch.equal(first, other):
        fail("seeds 7 and 8 drew the same 64 tokens out of 50 equally likely ones: is the generator used?")


def test_never_samples_a_filtered_token(learner):
    """Softmax of -inf is 0: after top_k=3 only the three largest logits can come out."""
    logits = torch.tensor([[2.0, 0.5, 1.9, 1.8, 1.7, 0.0]]).repeat(4000, 1)
    got = learner.sample(logits, 1.0, 3, 1.0, torch.Generator().manual_seed(0))
    check_equal(sorted(set(got.tolist())), [0, 2, 3], "the tokens drawn 4000 times with top_k=3")


def test_frequencies_follow_the_probabilities(learner):
    """With no filter and temperature 1, token i comes out with probability softmax(logits)[i]."""
    logits = torch.tensor([[0.5, 0.3, 0.2]]).log().repeat(8000, 1)
    got = learner.sample(logits, 1.0, 0, 1.0, torch.Generator().manual_seed(1))
    freq = torch.bincount(got, minlength=3).float() / 8000
    check_close(freq, torch.tensor([0.5, 0.3, 0.2]), "the frequencies of 8000 draws", atol=0.025)


def test_temperature_divides_the_logits(learner):
    """Logits [0, 2 ln 3] give probabilities 0.1, 0.9; at temperature 2 they become 0.25, 0.75."""
    logits = torch.tensor([[0.0, 2 * torch.log(torch.tensor(3.0)).item()]]).repeat(8000, 1)
    got = learner.sample(logits, 2.0, 0, 1.0, torch.Generator().manual_seed(2))
    freq = torch.bincount(got, minlength=2).float() / 8000
    check_close(freq, torch.tensor([0.25, 0.75]), "the frequencies of 8000 draws at temperature 2", atol=0.025)
