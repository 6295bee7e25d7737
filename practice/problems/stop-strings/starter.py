"""Stop strings in a stream: release only text that can no longer become a stop string."""


class StopMatcher:
    def __init__(self, stops: list[str]):
        raise NotImplementedError("StopMatcher")

    def add(self, delta: str) -> tuple[str, bool]:
        """(text safe to show now, whether a stop string just completed); ("", True) after a
        stop."""
        raise NotImplementedError("add")

    def flush(self) -> str:
        """The stream ended without a stop string: the held-back text ("" after a stop)."""
        raise NotImplementedError("flush")
