"""Wrong: knows only "\\n" line ends, so with "\\r\\n" no line is ever blank and no event ends.

Caught by: test_crlf_line_ends_comments_and_the_space_after_the_colon.
"""

import codecs


class SSEReader:
    def __init__(self):
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.line, self.data, self.done = "", [], False

    def feed(self, chunk: bytes) -> list[str]:
        """The data of every event the bytes so far complete, in order ([] after [DONE])."""
        if self.done:
            return []
        events = []
        self.line += self.decoder.decode(chunk)
        *lines, self.line = self.line.split("\n")
        for line in lines:
            if line == "":
                if self.data:
                    events.append("\n".join(self.data))
                    self.data = []
                    if events[-1] == "[DONE]":
                        self.done = True
                        return events
            elif line.startswith("data:"):
                self.data.append(line[5:].removeprefix(" "))
        return events
