"""Server-sent events as a client reads them: events rebuilt from bytes cut anywhere."""


class SSEReader:
    def __init__(self):
        raise NotImplementedError("SSEReader")

    def feed(self, chunk: bytes) -> list[str]:
        """The data of every event the bytes so far complete, in order ([] after [DONE])."""
        raise NotImplementedError("feed")
