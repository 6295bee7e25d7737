"""Wrong: returns [DONE] but keeps reading the events after it.

Caught by: test_the_task_example, test_nothing_after_done.
"""

import codecs


class SSEReader:
    def __init__(self):
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.line, self.data = "", []

    def feed(self, chunk: bytes) -> list[str]:
        """The data of every event the bytes so far complete, in order ([] after [DONE])."""
        events = []
        self.line += self.decoder.decode(chunk)
        *lines, self.line = self.line.split("\n")
        for line in lines:
            line = line.removesuffix("\r")
            if line == "":
                if self.data:
                    events.append("\n".join(self.data))
                    self.data = []
            elif line.startswith("data:"):
                self.data.append(line[5:].removeprefix(" "))
        return events
