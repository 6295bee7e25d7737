"""Wrong: decodes every token on its own.

Caught by: test_a_character_split_over_three_tokens_waits_for_the_last.
"""


class IncrementalDetokenizer:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def add(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id])

    def flush(self) -> str:
        return ""
