"""Wrong: decodes each chunk on its own, so a character cut between two chunks turns into
replacement characters.

Caught by: test_a_character_cut_between_chunks.
"""


class SSEReader:
    def __init__(self):
        self.line, self.data, self.done = "", [], False

    def feed(self, chunk: bytes) -> list[str]:
        """The data of every event the bytes so far complete, in order ([] after [DONE])."""
        if self.done:
            return []
        events = []
        self.line += chunk.decode("utf-8", errors="replace")
        *lines, self.line = self.line.split("\n")
        for line in lines:
            line = line.removesuffix("\r")
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
