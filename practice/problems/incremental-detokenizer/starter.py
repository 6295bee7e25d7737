"""Streaming text from tokens: release whole characters only."""


class IncrementalDetokenizer:
    def __init__(self, tokenizer):
        raise NotImplementedError("IncrementalDetokenizer")

    def add(self, token_id: int) -> str:
        """The new text this token completes (possibly ""); never an unfinished character."""
        raise NotImplementedError("add")

    def flush(self) -> str:
        """The request ended: whatever is still held back, as decode shows it."""
        raise NotImplementedError("flush")
