"""Tests for StopMatcher: by hand, then random texts with multi-byte characters, random stop
sets and random
chunkings, against a reader who checks for a stop string after every single character."""

import random

from grading import check_equal

ALPHABET = "ab é漢😀\n"


def every_character(text, stops):
    """The reference: after each character, is some stop string a suffix? Cut before the longest
    one."""
    for end in range(1, len(text) + 1):
        hits = [s for s in stops if text[:end].endswith(s)]
        if hits:
            return text[: end - max(len(s) for s in hits)], True
    return text, False


def longest_possible_start(text, stops):
    return max([n for s in stops for n in range(len(s)) if text.endswith(s[:n])] + [0])


def chunkings(rng, text):
    cuts = (
        sorted(rng.sample(range(1, len(text)), rng.randint(0, len(text) - 1)))
        if len(text) > 1
        else []
    )
    return [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])] or [""]


def test_a_stop_split_over_deltas_is_never_shown(learner):
    """The task's example: "E" and "N" are held back until "D" proves them a stop string."""
    m = learner.StopMatcher(["END"])
    got = [m.add("The E"), m.add("N"), m.add("D, and more")]
    check_equal(
        got,
        [("The ", False), ("", False), ("", True)],
        "add('The E'), add('N'), add('D, and more')",
    )


def test_text_that_cannot_be_a_stop_is_released_at_once(learner):
    """Hold back the longest possible start of a stop string, and nothing more."""
    m = learner.StopMatcher(["END", "world"])
    got = [m.add("hello wor"), m.add("d"), m.add("s E"), m.add("Nough w"), m.flush()]
    check_equal(
        got,
        [("hello ", False), ("word", False), ("s ", False), ("ENough ", False), "w"],
        "add('hello wor'), add('d'), add('s E'), add('Nough w'), flush() with stops END, world",
    )


def test_nothing_after_a_stop(learner):
    """After a stop, add returns ("", True) and flush returns ""."""
    m = learner.StopMatcher(["\n\n"])
    got = [m.add("one\n"), m.add("\ntwo"), m.add("three"), m.flush()]
    check_equal(
        got,
        [("one", False), ("", True), ("", True), ""],
        "a stop of two newlines split over two deltas",
    )


def test_no_stops_passes_everything_through(learner):
    m = learner.StopMatcher([])
    check_equal(
        [m.add("abc"), m.add(""), m.add("é"), m.flush()],
        [("abc", False), ("", False), ("é", False), ""],
        "StopMatcher([]) on 'abc', '', 'é', then flush()",
    )


def test_the_first_stop_to_complete_wins(learner):
    """ "bc" is complete after "abc", before "abcd" could be: the text ends at "a" in one delta
    or four."""
    for chunks in (["abcd"], ["a", "b", "c", "d"], ["ab", "cd"]):
        m = learner.StopMatcher(["abcd", "bc"])
        out, stopped = "", False
        for c in chunks:
            text, stopped = m.add(c)
            out += text
            if stopped:
                break
        check_equal((out, stopped), ("a", True), f"stops ['abcd', 'bc'] on the deltas {chunks}")


def test_of_stops_ending_together_the_longest_wins(learner):
    m = learner.StopMatcher(["b", "ab"])
    check_equal(m.add("xab"), ("x", True), "stops ['b', 'ab'] on 'xab'")


def test_random_texts_stops_and_chunkings(learner):
    """Every chunking gives the every-character answer; what is held back is always the longest
    possible start.

    The longest: with the stop 'aab', after 'xaa' both 'a' and 'aa' could start it, and only
    holding 'aa' sees the stop when 'b' comes."""
    rng = random.Random(15)
    for case in range(150):
        # a third of the cases over two letters: stops whose start comes back inside ('aab',
        # 'abab')
        letters = "ab" if case % 3 == 0 else ALPHABET
        text = "".join(rng.choice(letters) for _ in range(rng.randint(1, 24)))
        longest = 5 if letters == "ab" else 4
        stops = [
            "".join(rng.choice(letters) for _ in range(rng.randint(1, longest)))
            for _ in range(rng.randint(0, 3))
        ]
        if rng.random() < 0.5 and len(text) > 2:
            i = rng.randrange(len(text) - 1)
            stops.append(text[i : i + rng.randint(1, 3)])
        chunks = chunkings(rng, text)
        m = learner.StopMatcher(stops)
        shown, fed, stopped = "", "", False
        for c in chunks:
            out, stopped = m.add(c)
            fed += c
            shown += out
            if stopped:
                break
            check_equal(
                len(fed) - len(shown),
                longest_possible_start(fed, stops),
                f"case {case}: characters held back after the deltas "
                f"{chunks[: chunks.index(c) + 1]!r} "
                f"with stops {stops!r}",
            )
        if not stopped:
            shown += m.flush()
        check_equal(
            (shown, stopped),
            every_character(text, stops),
            f"case {case}: (text, stopped) for the deltas {chunks!r} with stops {stops!r}",
        )
