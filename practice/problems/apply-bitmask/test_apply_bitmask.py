"""Tests for apply_bitmask: the example, bit 31, random masks and vocabulary sizes against a
token-by-token reader; padding bits and extra words ignored; unlisted rows untouched; arguments
unchanged; shape errors."""

import random

import torch
from grading import check_equal, check_raises, fail

INF = float("-inf")


def allowed_by_hand(words: list[int], V: int) -> list[bool]:
    return [bool((words[t // 32] >> (t % 32)) & 1) for t in range(V)]


def pack(allowed_rows: list[list[bool]]) -> torch.Tensor:
    V = len(allowed_rows[0])
    W = (V + 31) // 32
    out = []
    for allowed in allowed_rows:
        words = [0] * W
        for t, ok in enumerate(allowed):
            if ok:
                words[t // 32] |= 1 << (t % 32)
        out.append([w - (1 << 32) if w >= 1 << 31 else w for w in words])  # as int32
    return torch.tensor(out, dtype=torch.int32)


def test_the_example(learner):
    """Tokens 0, 2 and 35 stay in row 0; row 1 is not listed: its zero bits are not applied."""
    logits = torch.zeros(2, 40)
    bitmask = torch.tensor([[0b101, 1 << 3], [0, 0]], dtype=torch.int32)
    out = learner.apply_bitmask(logits, bitmask, [0])
    expected = torch.full((2, 40), INF)
    expected[0, [0, 2, 35]] = 0.0
    expected[1] = 0.0
    check_equal(out, expected, "apply_bitmask of the example")


def test_forbidden_is_minus_infinity_and_allowed_keeps_its_value(learner):
    """Allowed logits keep their exact values; forbidden ones become -inf, not 0."""
    logits = torch.tensor([[1.5, -2.0, 3.25, 0.5]])
    out = learner.apply_bitmask(logits, torch.tensor([[0b0101]], dtype=torch.int32), [0])
    check_equal(out, torch.tensor([[1.5, INF, 3.25, INF]]), "apply_bitmask of one word")


def test_bit_31_is_token_31(learner):
    """A word with bit 31 set is a negative int32; token 31 (and 63) must still be allowed."""
    logits = torch.zeros(1, 64)
    bitmask = torch.tensor([[-(1 << 31), -(1 << 31)]], dtype=torch.int32)
    out = learner.apply_bitmask(logits, bitmask, [0])
    kept = torch.isfinite(out[0]).nonzero().flatten().tolist()
    check_equal(kept, [31, 63], "tokens kept by the words 0x80000000, 0x80000000")


def test_random_masks_and_vocabularies(learner):
    """Random V (not a multiple of 32 too), random rows listed, random bits."""
    rng = random.Random(7)
    for _ in range(30):
        M, V = rng.randint(1, 5), rng.randint(1, 150)
        allowed = [[rng.random() < 0.4 for _ in range(V)] for _ in range(M)]
        rows = sorted(rng.sample(range(M), rng.randint(0, M)))
        logits = torch.randn(M, V, generator=torch.Generator().manual_seed(rng.randrange(99)))
        bitmask = pack(allowed)
        before = (logits.clone(), bitmask.clone())
        out = learner.apply_bitmask(logits, bitmask, rows)
        expected = logits.clone()
        for r in rows:
            for t in range(V):
                if not allowed_by_hand(bitmask[r].tolist(), V)[t]:
                    expected[r, t] = INF
        check_equal(out, expected, f"apply_bitmask with V={V}, rows={rows}")
        if not (torch.equal(logits, before[0]) and torch.equal(bitmask, before[1])):
            fail("apply_bitmask changed its arguments: expected a new tensor, inputs unchanged")


def test_bits_and_words_past_the_vocabulary_are_ignored(learner):
    """V = 40 in 3 words per row: bits 40..63 of word 1 and all of word 2 are set; only tokens
    0..39 are read, each row from its own words."""
    logits = torch.zeros(2, 40)
    row_0 = [0b1, -(1 << 8) | 1 << 3, -1]  # tokens 0 and 35; the rest is past V
    bitmask = torch.tensor([row_0, [0b10, -1, -1]], dtype=torch.int32)
    out = learner.apply_bitmask(logits, bitmask, [0, 1])
    kept = [torch.isfinite(out[r]).nonzero().flatten().tolist() for r in (0, 1)]
    check_equal(
        kept,
        [[0, 35], [1, *range(32, 40)]],
        "tokens kept from a [2, 3] bitmask for V = 40",
    )


def test_short_bitmask_is_refused_by_shape(learner):
    """40 tokens need 2 words per row; 1 word, or a missing row, is an error naming shapes."""
    logits = torch.zeros(2, 40)
    for bad in (torch.zeros(2, 1, dtype=torch.int32), torch.zeros(1, 2, dtype=torch.int32)):
        err = check_raises(
            ValueError,
            learner.apply_bitmask,
            logits,
            bad,
            [0],
            what=f"bitmask {list(bad.shape)}",
        )
        if str(list(bad.shape)) not in str(err) or "40" not in str(err):
            fail(f"the error should name both shapes ({list(bad.shape)} and [2, 40]): {err}")
