"""Server-sent events as a client reads them: events rebuilt from bytes cut anywhere."""

import codecs


class SSEReader:
    def __init__(self):
        self.decoder = codecs.getincrementaldecoder("utf-8")()  # keeps a cut character's bytes
        self.line = ""  # the current line, not yet ended
        self.data: list[str] = []  # the data lines of the event being read
        self.done = False

    def feed(self, chunk: bytes) -> list[str]:
        """The data of every event the bytes so far complete, in order ([] after [DONE])."""
        if self.done:
            return []
        events = []
        self.line += self.decoder.decode(chunk)
        *lines, self.line = self.line.split("\n")  # the last piece has no newline yet
        for line in lines:
            line = line.removesuffix("\r")
            if line == "":  # a blank line ends the event
                if self.data:
                    events.append("\n".join(self.data))
                    self.data = []
                    if events[-1] == "[DONE]":
                        self.done = True
                        return events
            elif line.startswith("data:"):
                value = line[len("data:") :]
                self.data.append(value[1:] if value.startswith(" ") else value)
            # comments (":...") and other fields are not data
        return events
