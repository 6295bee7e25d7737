"""Wrong: gives up waiting after three held tokens and releases the "\ufffd": a character
spelled in
four single-byte tokens (valid, but not how the tokenizer splits it) shows "\ufffd" and then
never appears.

Caught by: test_random_multibyte_texts.
"""


class IncrementalDetokenizer:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.token_ids = []
        self.prefix_offset = 0  # the decode window starts here
        self.read_offset = 0  # tokens before this one were released as text

    def add(self, token_id: int) -> str:
        """The new text this token completes (possibly ""); never an unfinished character."""
        self.token_ids.append(token_id)
        before = self.tokenizer.decode(self.token_ids[self.prefix_offset : self.read_offset])
        window = self.tokenizer.decode(self.token_ids[self.prefix_offset :])
        waiting = len(self.token_ids) - self.read_offset
        # a character takes 3 tokens at most
        if len(window) <= len(before) or window.endswith("\ufffd") and waiting < 3:
            return ""
        self.prefix_offset, self.read_offset = self.read_offset, len(self.token_ids)
        return window[len(before) :]

    def flush(self) -> str:
        """The request ended: whatever is still held back, as decode shows it."""
        before = self.tokenizer.decode(self.token_ids[self.prefix_offset : self.read_offset])
        window = self.tokenizer.decode(self.token_ids[self.prefix_offset :])
        self.prefix_offset = self.read_offset = len(self.token_ids)
        return window[len(before) :]
