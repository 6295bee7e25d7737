"""Wrong: returns each data line as it arrives, as if a newline ended an event.

Caught by: test_an_event_ends_at_a_blank_line_not_at_a_chunk_boundary.
"""

import codecs


class SSEReader:
    def __init__(self):
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.line, self.done = "", False

    def feed(self, chunk: bytes) -> list[str]:
        """The data of every event the bytes so far complete, in order ([] after [DONE])."""
        if self.done:
            return []
        events = []
        self.line += self.decoder.decode(chunk)
        *lines, self.line = self.line.split("\n")
        for line in lines:
            line = line.removesuffix("\r")
            if line.startswith("data:"):
                events.append(line[5:].removeprefix(" "))
                if events[-1] == "[DONE]":
                    self.done = True
                    return events
        return events
