"""Tests for IncrementalDetokenizer with the real Qwen3 tokenizer: by hand, then random texts
mixing ASCII,
accents, CJK and emoji, against the rule "released = decode(tokens[:j]) for the last clean
j"."""

import random

import pytest
from grading import check_equal, share

PIECES = [
    "a",
    "b",
    " ",
    "the",
    "é",
    "ï",
    "ß",
    "漢",
    "字",
    "東京",
    "は",
    "🦀",
    "😀",
    "👍🏽",
    "🇫🇷",
    "\n",
    "!",
    "ok",
    "\ufffd",
]  # a literal "\ufffd" is text like any other
STRAY = [
    0xC3,
    0xE6,
    0xF0,
    0x80,
    0x9F,
    0xBF,
]  # lead bytes (of 2, 3, 4 bytes), continuation bytes


@pytest.fixture(scope="module")
def tok():
    from minillm.checkpoints import load_tokenizer, tokenizer_files_dir

    return share(load_tokenizer(tokenizer_files_dir()), methods=["decode"])


def ids_of(tok, text):
    return list(tok(text, add_special_tokens=False).input_ids)


def byte_tokens(tok):
    """The token of each single byte (a byte-level vocabulary spells byte b as one
    character)."""
    kept = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    moved = [b for b in range(256) if b not in kept]  # spelled chr(256), chr(257), ...
    spelling = {b: chr(b) for b in kept} | {b: chr(256 + i) for i, b in enumerate(moved)}
    return [tok.convert_tokens_to_ids(spelling[b]) for b in range(256)]


def random_ids(rng, tok, byte):
    """Pieces as the tokenizer splits them, or spelled byte by byte (valid, but split as it
    never
    would), or a stray byte that never becomes a character."""
    ids = []
    for _ in range(rng.randint(1, 10)):
        r, piece = rng.random(), rng.choice(PIECES)
        if r < 0.6:
            ids += ids_of(tok, piece)
        elif r < 0.85:
            ids += [byte[b] for b in piece.encode()]
        else:
            ids.append(byte[rng.choice(STRAY)])
    return ids


def expected_releases(tok, ids):
    """After each token: the text released so far is decode(ids[:j]) for the largest clean j <=
    k."""
    shown, out = "", []
    for k in range(1, len(ids) + 1):
        text = tok.decode(ids[:k])
        if not text.endswith("\ufffd") and len(text) > len(shown):
            out.append(text[len(shown) :])
            shown = text
        else:
            out.append("")
    return out, tok.decode(ids)[len(shown) :]


def test_plain_tokens_come_out_one_by_one(learner, tok):
    ids = ids_of(tok, "Hello, world! How are you?")
    d = learner.IncrementalDetokenizer(tok)
    check_equal(
        [d.add(t) for t in ids] + [d.flush()],
        [tok.decode([t]) for t in ids] + [""],
        f"add(t) for each token of 'Hello, world! How are you?' ({ids}), then flush()",
    )


def test_a_character_split_over_three_tokens_waits_for_the_last(learner, tok):
    ids = ids_of(
        tok, " 🦀!"
    )  # the crab is four bytes in three tokens, the first with the space
    d = learner.IncrementalDetokenizer(tok)
    check_equal(
        [d.add(t) for t in ids] + [d.flush()],
        ["", "", " 🦀", "!", ""],
        f"add(t) for {ids} (' 🦀!')",
    )


def test_flush_releases_bytes_that_never_became_a_character(learner, tok):
    ids = ids_of(tok, "x 漢")[:-1]  # the last byte of 漢 never arrives
    d = learner.IncrementalDetokenizer(tok)
    got = [d.add(t) for t in ids]
    check_equal(
        got,
        ["x", "", ""],
        f"add(t) for {ids}: 'x', then the first two of the three tokens of ' 漢'",
    )
    check_equal(
        d.flush(),
        tok.decode(ids)[1:],
        "flush() after them: the held-back bytes as decode shows them",
    )


def test_random_multibyte_texts(learner, tok):
    """No delta ever ends in an unfinished character, text is released as early as possible, and
    it
    all adds up.

    The tokens are not always the tokenizer's own: a character may come one byte per token, a
    byte may never become a character, and the text may hold a literal "\ufffd". Only the end
    of the decoded text says whether a character is unfinished; and however many tokens a
    character takes, it comes out whole."""
    rng = random.Random(8)
    byte = byte_tokens(tok)
    for case in range(40):
        if case % 2:
            ids = random_ids(rng, tok, byte)
        else:
            text = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 14)))
            ids = ids_of(tok, text)
            if rng.random() < 0.3:
                ids = ids[: rng.randint(1, len(ids))]  # cut anywhere, even inside a character
        want, rest = expected_releases(tok, ids)
        d = learner.IncrementalDetokenizer(tok)
        got = [d.add(t) for t in ids]
        pieces = [tok.decode([t]) for t in ids]
        check_equal(
            got,
            want,
            f"case {case}: add(t) for each of {ids} ({pieces!r}, {tok.decode(ids)!r} in all)",
        )
        check_equal(d.flush(), rest, f"case {case}: flush() at the end of {ids}")


def test_two_detokenizers_do_not_share_state(learner, tok):
    a, b = learner.IncrementalDetokenizer(tok), learner.IncrementalDetokenizer(tok)
    ia, ib = ids_of(tok, "東京"), ids_of(tok, "ok!")
    got = [a.add(ia[0]), b.add(ib[0]), a.add(ia[1]), b.add(ib[1])]
    check_equal(
        got,
        [
            tok.decode(ia[:1]),
            tok.decode(ib[:1]),
            tok.decode(ia)[len(tok.decode(ia[:1])) :],
            tok.decode(ib)[len(tok.decode(ib[:1])) :],
        ],
        "two detokenizers fed in turns",
    )
