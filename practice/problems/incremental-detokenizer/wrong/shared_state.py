"""Wrong: keeps the tokens in a class attribute, shared by every detokenizer.

Caught by: test_two_detokenizers_do_not_share_state.
"""


class IncrementalDetokenizer:
    all_ids = []

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.token_ids = IncrementalDetokenizer.all_ids
        self.prefix_offset = 0  # the decode window starts here
        self.read_offset = 0  # tokens before this one were released as text

    def add(self, token_id: int) -> str:
        """The new text this token completes (possibly ""); never an unfinished character."""
        self.token_ids.append(token_id)
        before = self.tokenizer.decode(self.token_ids[self.prefix_offset : self.read_offset])
        window = self.tokenizer.decode(self.token_ids[self.prefix_offset :])
        if len(window) <= len(before) or window.endswith("\ufffd"):
            return ""
        self.prefix_offset, self.read_offset = self.read_offset, len(self.token_ids)
        return window[len(before) :]

    def flush(self) -> str:
        """The request ended: whatever is still held back, as decode shows it."""
        before = self.tokenizer.decode(self.token_ids[self.prefix_offset : self.read_offset])
        window = self.tokenizer.decode(self.token_ids[self.prefix_offset :])
        self.prefix_offset = self.read_offset = len(self.token_ids)
        return window[len(before) :]
