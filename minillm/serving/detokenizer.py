"""serving/detokenizer.py — streaming text: turn tokens into text as they arrive, never half a
character.

A byte-level BPE vocabulary (Qwen3's) has tokens that are pieces of one character: an emoji or a
rare CJK character is four UTF-8 bytes, often split over two or three tokens. Decoding after
each token would show U+FFFD ("�") for the unfinished bytes, and a stream that printed
`text[len(shown):]` would then lose the character once it completes (the finished text is no
longer than the "�" it replaces).

So we do what vLLM's incremental detokenizer does: decode a short window of recent tokens, and
release new text only when it does not end in "�" (an incomplete UTF-8 sequence); otherwise hold
it back until the next token completes it. The window starts a few tokens back (`prefix_offset`)
so tokenizers that drop a leading space at the start of a decode still see the space in context;
the text of the window up to `read_offset` was released already and is cut off. At the end,
`flush` releases whatever is still held back (bytes that never became a character are then shown
as "�", as `decode` shows them).

The serving chapter reuses this for streamed responses and stop strings.
"""

from __future__ import annotations

from minillm.checking import as_int, check_int_list

INCOMPLETE = "\ufffd"  # what decode shows for bytes that are not (yet) a whole UTF-8 character


class IncrementalDetokenizer:
    """Text for a growing list of token ids, released in whole characters.

    detok = IncrementalDetokenizer(tokenizer)
    for token in tokens:
        print(detok.add(token), end="")   # "" while a character is incomplete
    print(detok.flush())                  # whatever was held back at the end
    assert detok.text == tokenizer.decode(tokens)
    """

    def __init__(self, tokenizer, skip_special_tokens: bool = False):
        if not callable(getattr(tokenizer, "decode", None)):
            raise ValueError(
                f"tokenizer is {tokenizer!r}: expected an object with a decode(token_ids) "
                "method"
            )
        self.tokenizer, self.skip_special_tokens = tokenizer, skip_special_tokens
        self.token_ids: list[int] = []
        self.text = ""  # everything released so far
        self.prefix_offset = (
            0  # the decode window starts here (context for the first new token)
        )
        self.read_offset = 0  # tokens before this one have been released as text

    def _decode(self, start: int, end: int | None = None) -> str:
        return self.tokenizer.decode(
            self.token_ids[start:end], skip_special_tokens=self.skip_special_tokens
        )

    def add(self, token_ids) -> str:
        """Append one token id (or a list of them); return the newly completed text, possibly
        ""."""
        n = as_int(token_ids)
        self.token_ids += (
            [n] if n is not None else check_int_list("token_ids", token_ids, min=0)
        )
        before = self._decode(self.prefix_offset, self.read_offset)  # released already
        window = self._decode(self.prefix_offset)
        if len(window) <= len(before) or window.endswith(INCOMPLETE):
            return ""  # nothing new, or it ends inside a character: wait for the next token
        new = window[len(before) :]
        self.prefix_offset, self.read_offset = self.read_offset, len(self.token_ids)
        self.text += new
        return new

    def flush(self) -> str:
        """The text still held back (the request finished): released as it decodes, "�"
        included."""
        new = self._decode(self.prefix_offset)[
            len(self._decode(self.prefix_offset, self.read_offset)) :
        ]
        self.prefix_offset = self.read_offset = len(self.token_ids)
        self.text += new
        return new
