"""Tests for SSEReader: by hand, then random event streams (multi-byte characters, several data
lines, comments, CRLF line ends) cut into random byte chunks, against the events as written."""

import random

from grading import check_equal

ALPHABET = 'ab {}":,é漢😀'


def feed_all(learner, chunks):
    """Every event the reader returns, with the index of the chunk that completed it."""
    r = learner.SSEReader()
    out = []
    for i, c in enumerate(chunks):
        out += [(i, e) for e in r.feed(c)]
    return out


def test_the_task_example(learner):
    r = learner.SSEReader()
    got = [
        r.feed(b'data: {"text": "h'),
        r.feed(b'i"}\n\ndata: {"text": "!"}\n\nda'),
        r.feed(b"ta: [DONE]\n\n"),
        r.feed(b"data: more\n\n"),
    ]
    check_equal(
        got,
        [[], ['{"text": "hi"}', '{"text": "!"}'], ["[DONE]"], []],
        "the four feeds of the task's example",
    )


def test_an_event_ends_at_a_blank_line_not_at_a_chunk_boundary(learner):
    """Chunks that each end exactly where a line ends, but not where an event ends."""
    r = learner.SSEReader()
    got = [r.feed(b"data: one\n"), r.feed(b"data: two\n"), r.feed(b"\n")]
    check_equal(
        got,
        [[], [], ["one\ntwo"]],
        "feed(b'data: one\\n'), feed(b'data: two\\n'), feed(b'\\n')",
    )


def test_a_character_cut_between_chunks(learner):
    """😀 is four bytes in UTF-8; the chunks cut it after its first byte and after its third."""
    stream = "data: a😀b\n\n".encode()
    k = stream.index("😀".encode())
    chunks = [stream[: k + 1], stream[k + 1 : k + 3], stream[k + 3 :]]
    r = learner.SSEReader()
    check_equal([r.feed(c) for c in chunks], [[], [], ["a😀b"]], "the event 'a😀b' in 3 chunks")


def test_crlf_line_ends_comments_and_the_space_after_the_colon(learner):
    stream = b": keep-alive\r\ndata:no space\r\n\r\n: ping\r\n\r\ndata:  two spaces\r\n\r\n"
    r = learner.SSEReader()
    check_equal(
        r.feed(stream),
        ["no space", " two spaces"],
        "feed of a CRLF stream with comments",
    )


def test_nothing_after_done(learner):
    r = learner.SSEReader()
    got = [r.feed(b"data: x\n\ndata: [DONE]\n\ndata: y\n\n"), r.feed(b"data: z\n\n")]
    check_equal(got, [["x", "[DONE]"], []], "two feeds around and after [DONE]")


def random_stream(rng):
    """(bytes of a stream, the data of its events up to and including [DONE], the byte offset at
    which each of those events is complete: just after its blank line)."""
    newline = rng.choice(["\n", "\r\n"])
    text, events, ends = b"", [], []

    def put(line):
        nonlocal text
        text += (line + newline).encode()

    for _ in range(rng.randint(1, 6)):
        if rng.random() < 0.3:
            put(": comment")
            put("")  # a blank line after a comment alone ends no event
        lines = [
            "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 8))).lstrip(" ")
            for _ in range(rng.randint(1, 3))
        ]
        for line in lines:
            put("data:" + rng.choice(["", " "]) + line)
        put("")
        events.append("\n".join(lines))
        ends.append(len(text))
    put("data: [DONE]")
    put("")
    events.append("[DONE]")
    ends.append(len(text))
    put("data: after")
    put("")
    return text, events, ends


def test_random_streams_in_random_chunks(learner):
    """Every event, whole and in order, each returned by the feed whose bytes complete it."""
    rng = random.Random(8)
    for trial in range(300):
        stream, events, ends = random_stream(rng)
        cuts = sorted(
            rng.sample(range(1, len(stream)), rng.randint(0, min(12, len(stream) - 1)))
        )
        bounds = cuts + [len(stream)]
        chunks = [stream[a:b] for a, b in zip([0] + cuts, bounds)]
        expected = [
            (next(i for i, b in enumerate(bounds) if b >= e), d) for e, d in zip(ends, events)
        ]
        check_equal(
            feed_all(learner, chunks),
            expected,
            f"trial {trial}: (chunk index, event) for the chunks {chunks!r}",
        )
