"""Wrong: answers the task's example feed by feed and nothing else.

Caught by: test_an_event_ends_at_a_blank_line_not_at_a_chunk_boundary and the others.
"""

ANSWERS = {
    b'data: {"text": "h': [],
    b'i"}\n\ndata: {"text": "!"}\n\nda': ['{"text": "hi"}', '{"text": "!"}'],
    b"ta: [DONE]\n\n": ["[DONE]"],
}


class SSEReader:
    def __init__(self):
        pass

    def feed(self, chunk: bytes) -> list[str]:
        """The data of every event the bytes so far complete, in order ([] after [DONE])."""
        return list(ANSWERS.get(chunk, []))
