"""Wrong: drops the held-back text when the stream ends without a stop.

Caught by: test_text_that_cannot_be_a_stop_is_released_at_once.
"""


class StopMatcher:
    def __init__(self, stops: list[str]):
        self.stops = list(stops)
        self.held = ""
        self.stopped = False

    def add(self, delta: str) -> tuple[str, bool]:
        """(text safe to show now, whether a stop string just completed); ("", True) after a
        stop."""
        if self.stopped:
            return "", True
        text = self.held + delta
        # (end, start) of the first stop string to complete: earliest end, then longest
        best = None
        for s in self.stops:
            i = text.find(s)
            if i >= 0 and (best is None or (i + len(s), i) < best):
                best = (i + len(s), i)
        if best is not None:
            self.held, self.stopped = "", True
            return text[: best[1]], True
        keep = 0
        for s in self.stops:
            for n in range(min(len(s) - 1, len(text)), keep, -1):
                if text.endswith(s[:n]):
                    keep = n
                    break
        self.held = text[len(text) - keep :]
        return text[: len(text) - keep], False

    def flush(self) -> str:
        """The stream ended without a stop string: the held-back text ("" after a stop)."""
        text, self.held = "", ""
        return text
