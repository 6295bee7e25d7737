"""Wrong: takes every chunk for whole events, as if the network delivered one event per read.

Caught by: test_the_task_example, test_random_streams_in_random_chunks.
"""


class SSEReader:
    def __init__(self):
        self.done = False

    def feed(self, chunk: bytes) -> list[str]:
        """The data of every event the bytes so far complete, in order ([] after [DONE])."""
        if self.done:
            return []
        events = []
        for block in (
            chunk.decode("utf-8", errors="replace").replace("\r\n", "\n").split("\n\n")
        ):
            data = [
                ln[5:].removeprefix(" ") for ln in block.split("\n") if ln.startswith("data:")
            ]
            if data:
                events.append("\n".join(data))
                if events[-1] == "[DONE]":
                    self.done = True
                    break
        return events
