"""serving/stop_strings.py — stop strings in a stream: never show text that may turn out to be a
stop string.

    stopper = StopStringMatcher(["\\n\\n", "END"])
    for delta in deltas:                 # whole characters from the incremental detokenizer
        text, stopped = stopper.add(delta)
        send(text)                       # safe to show: it can no longer be part of a stop
        string if stopped:
            break                        # the request is finished (finish_reason "stop")
    send(stopper.flush())                # the request ended another way: release what was held
    back

A stop string can arrive split over several chunks ("EN" then "D"). Sending each chunk as it
comes would already have shown "EN" when "D" proves it was a stop string, which OpenAI's API
never puts in the text. So the matcher holds back the longest end of the text that is still the
start of some stop string, and releases it only when the next characters rule that out.

Which match wins is defined so that it does not depend on how the text was cut into chunks: the
text ends where the first stop string is *completed* (the earliest end position), and of the
stop strings completed at that same character, the longest. That is what a reader checking after
every single character would see, and it is what `truncate_at_stop` computes on a whole text.
"""

from __future__ import annotations


def check_stops(stop) -> list[str]:
    """OpenAI's `stop`: None, one string, or a list of strings; empty strings are refused."""
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, (list, tuple)) or not all(isinstance(s, str) for s in stops):
        raise ValueError(f"stop is {stop!r}: expected a string or a list of strings")
    for i, s in enumerate(stops):
        if not s:
            raise ValueError(f"stop[{i}] is '': expected a non-empty string")
    return list(stops)


def first_stop(text: str, stops: list[str], start: int = 0) -> tuple[int, int] | None:
    """(start, end) of the first stop string completed in text[start:]: earliest end, then
    longest."""
    best = None
    for s in stops:
        i = text.find(s, start)  # the earliest start of s is also its earliest end
        if i >= 0 and (best is None or (i + len(s), i) < (best[1], best[0])):
            best = (i, i + len(s))
    return best


def truncate_at_stop(text: str, stops: list[str]) -> tuple[str, bool]:
    """The whole-text answer: (text before the first completed stop string, whether one was
    found)."""
    hit = first_stop(text, stops)
    return (text, False) if hit is None else (text[: hit[0]], True)


def held_back_length(text: str, stops: list[str]) -> int:
    """How many characters at the end of text could still grow into a stop string (the longest
    such end)."""
    longest = 0
    for s in stops:
        for n in range(
            min(len(s) - 1, len(text)), longest, -1
        ):  # a full match would have stopped already
            if text.endswith(s[:n]):
                longest = n
                break
    return longest


class StopStringMatcher:
    """Feeds on text deltas, returns what is safe to show; see the module docstring."""

    def __init__(self, stops):
        self.stops = check_stops(stops)
        self.held = (
            ""  # text received but not released: it may still be the start of a stop string
        )
        self.stopped = False

    def add(self, delta: str) -> tuple[str, bool]:
        """(text to release now, whether a stop string just completed). After a stop, nothing
        more."""
        if not isinstance(delta, str):
            raise ValueError(f"delta is {delta!r}: expected a string")
        if self.stopped:
            return "", True
        if not self.stops:
            return delta, False
        buffer = self.held + delta
        hit = first_stop(buffer, self.stops)
        if (
            hit is not None
        ):  # everything before the stop string is released, the rest is dropped
            self.held, self.stopped = "", True
            return buffer[: hit[0]], True
        keep = held_back_length(buffer, self.stops)
        self.held = buffer[len(buffer) - keep :]
        return buffer[: len(buffer) - keep], False

    def flush(self) -> str:
        """The request ended without a stop string: the held-back text is ordinary text after
        all."""
        text, self.held = ("" if self.stopped else self.held), ""
        return text
