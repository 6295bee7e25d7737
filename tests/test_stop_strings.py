"""Stop strings in a stream: the same text for every chunking, and nothing shown that becomes a
stop string."""

import random

import pytest

from minillm.serving.stop_strings import (
    StopStringMatcher,
    check_stops,
    held_back_length,
    truncate_at_stop,
)

ALPHABET = "ab é漢😀\n"


def reader_checking_every_character(text: str, stops: list[str]) -> tuple[str, bool]:
    """An independent reference: after each character, is some stop string a suffix? Cut before
    the longest."""
    for end in range(1, len(text) + 1):
        hits = [s for s in stops if text[:end].endswith(s)]
        if hits:
            return text[: end - max(len(s) for s in hits)], True
    return text, False


def random_chunks(rng: random.Random, text: str) -> list[str]:
    cuts = (
        sorted(rng.sample(range(1, len(text)), rng.randint(0, len(text) - 1)))
        if len(text) > 1
        else []
    )
    return [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])]


def feed(stops, chunks) -> tuple[str, bool, list[str]]:
    m = StopStringMatcher(stops)
    shown, released = "", []
    fed = ""
    for c in chunks:
        out, stopped = m.add(c)
        fed += c
        shown += out
        released.append(out)
        if stopped:
            return shown, True, released
        # what is held back is exactly the longest end of the text that could still start a stop
        # string
        assert shown + m.held == fed
        assert len(m.held) == max(
            [n for s in stops for n in range(len(s)) if fed.endswith(s[:n])] + [0]
        )
    return shown + m.flush(), False, released


def test_every_chunking_gives_the_reference_answer():
    rng = random.Random(8)
    for _trial in range(600):
        text = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 30)))
        stops = [
            "".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 4)))
            for _ in range(rng.randint(0, 3))
        ]
        if rng.random() < 0.5 and len(text) > 3:  # often plant a real stop string in the text
            i = rng.randrange(len(text) - 2)
            stops.append(text[i : i + rng.randint(1, 3)])
        want = reader_checking_every_character(text, stops)
        assert truncate_at_stop(text, stops) == want, (text, stops)
        for _ in range(4):
            shown, stopped, _ = feed(stops, random_chunks(rng, text) or [""])
            assert (shown, stopped) == want, (text, stops)


def test_a_stop_split_over_chunks_is_never_shown():
    m = StopStringMatcher(["END"])
    assert m.add("The E") == ("The ", False)  # "E" may start "END": held back
    assert m.add("N") == ("", False)
    assert m.add("D and more") == ("", True)
    assert m.add("later") == ("", True)  # nothing after a stop
    m = StopStringMatcher(["END"])
    assert m.add("The EN") == ("The ", False)
    assert m.add("ough") == ("ENough", False)  # ruled out: released


def test_the_first_stop_to_complete_wins_then_the_longest():
    # "bc" is complete after "abc", before "abcd" could be: the text ends at "a" however it is
    # chunked
    assert truncate_at_stop("abcd", ["abcd", "bc"]) == ("a", True)
    assert feed(["abcd", "bc"], ["abcd"])[:2] == ("a", True)
    assert truncate_at_stop("xab", ["b", "ab"]) == (
        "x",
        True,
    )  # both end at "b": the longer one cuts earlier


def test_held_back_length():
    assert held_back_length("hello wor", ["world"]) == 3
    assert held_back_length("hello", ["xyz"]) == 0
    assert held_back_length("aaa", ["aab"]) == 2


@pytest.mark.parametrize(
    "bad,message",
    [
        ("", "stop[0] is ''"),
        (["x", ""], "stop[1] is ''"),
        (5, "stop is 5"),
        ([b"x"], "expected a string or a list of strings"),
    ],
)
def test_bad_stops_are_refused_by_name(bad, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        check_stops(bad)
    with pytest.raises(ValueError):
        StopStringMatcher(bad)
