"""Wrong: after each token, decode everything and show what is beyond the text shown so far.

Caught by: test_a_character_split_over_three_tokens_waits_for_the_last.
"""


class IncrementalDetokenizer:
    def __init__(self, tokenizer):
        self.tokenizer, self.token_ids, self.shown = tokenizer, [], ""

    def add(self, token_id: int) -> str:
        self.token_ids.append(token_id)
        text = self.tokenizer.decode(self.token_ids)
        new, self.shown = text[len(self.shown) :], max(text, self.shown, key=len)
        return new

    def flush(self) -> str:
        text = self.tokenizer.decode(self.token_ids)
        new, self.shown = text[len(self.shown) :], max(text, self.shown, key=len)
        return new
