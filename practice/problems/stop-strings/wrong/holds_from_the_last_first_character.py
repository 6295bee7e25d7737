"""Wrong: looks for a possible start of a stop string only from the last occurrence of its first
character: with the stop 'aab', 'xaa' holds only the last 'a', and the stop that 'b' completes
is missed.

Caught by: test_random_texts_stops_and_chunkings.
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
            i = text.rfind(s[0])  # where the stop could start: its first character, last seen
            if i >= 0 and len(text) - i < len(s) and s.startswith(text[i:]):
                keep = max(keep, len(text) - i)
        self.held = text[len(text) - keep :]
        return text[: len(text) - keep], False

    def flush(self) -> str:
        """The stream ended without a stop string: the held-back text ("" after a stop)."""
        text, self.held = ("" if self.stopped else self.held), ""
        return text
