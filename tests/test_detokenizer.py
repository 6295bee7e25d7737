"""Streaming text never shows half a character: an emoji and rare CJK characters split across
Qwen3 tokens.

Uses the real Qwen3 tokenizer of the default model. In its byte-level vocabulary "🦜" is two
tokens, "龘" two and "𪚥" three, and each piece alone decodes to "�".
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from minillm import engine as engine_module
from minillm.engine import LLMEngine
from minillm.sampling import SamplingParams
from minillm.serving.detokenizer import IncrementalDetokenizer

TEXT = "Hello 🦜, 龘 and 𪚥!"
SPLIT = ["🦜", "龘", "𪚥"]  # characters the tokenizer cuts into byte pieces


@pytest.fixture(scope="module")
def tok(tiny_default_path):
    from minillm.checkpoints import load_tokenizer

    return load_tokenizer(tiny_default_path)


def test_these_characters_really_are_split_across_tokens(tok):
    for ch in SPLIT:
        ids = tok(ch).input_ids
        assert len(ids) >= 2 and all("\ufffd" in tok.decode([i]) for i in ids), (ch, ids)


def shown_by_the_old_delta(tok, ids):
    """What `text[len(shown):]` streamed: the replacement char, then nothing once the character
    completed."""
    shown, out = "", []
    for n in range(1, len(ids) + 1):
        text = tok.decode(ids[:n])
        out.append(text[len(shown) :])
        shown = text
    return out


@pytest.mark.parametrize("text", ["🦜 parrot", "龘", "𪚥", TEXT, "🫠🫡 done", "naïve café"])
def test_deltas_hold_whole_characters_and_add_up_to_the_text(tok, text):
    ids = tok(text).input_ids
    detok = IncrementalDetokenizer(tok)
    deltas = [detok.add(i) for i in ids]
    assert detok.flush() == ""
    assert "".join(deltas) == text == detok.text == tok.decode(ids)
    assert not any("\ufffd" in d for d in deltas)
    for ch in SPLIT:
        if ch in text:
            assert any(ch in d for d in deltas), f"{ch} arrives whole in one delta"


def test_the_old_delta_lost_the_characters(tok):
    streamed = "".join(shown_by_the_old_delta(tok, tok(TEXT).input_ids))
    assert "\ufffd" in streamed and not any(ch in streamed for ch in SPLIT)


def test_bytes_that_never_complete_are_released_at_the_end(tok):
    ids = tok("🦜").input_ids[:1]  # the stream ends inside the character
    detok = IncrementalDetokenizer(tok)
    assert detok.add(ids) == ""
    assert detok.flush() == tok.decode(ids) and "\ufffd" in detok.text


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.sampled_from(["a", " b", "🦜", "龘", "𪚥", "é", "\n", "🫠", "x"]),
        min_size=1,
        max_size=12,
    ),
    st.randoms(use_true_random=False),
)
def test_any_token_stream_adds_up_to_decode(tok, pieces, rng):
    """Whatever the tokens (here also shuffled, so byte pieces land in odd orders), the deltas
    plus
    the final flush equal decoding the whole list, and no delta but the flush contains "�"."""
    ids = [i for p in pieces for i in tok(p).input_ids]
    if rng.random() < 0.5:
        rng.shuffle(ids)
    detok = IncrementalDetokenizer(tok)
    deltas = [detok.add(i) for i in ids]
    assert "".join(deltas) + detok.flush() == tok.decode(ids)
    assert not any(d.endswith("\ufffd") for d in deltas)


def test_engine_stream_sends_the_emoji_and_cjk_whole(tiny_default_path, tok, monkeypatch):
    """The engine end to end, with the sampler replaced by a script: the model "writes" TEXT."""
    from minillm.model import Transformer

    script = tok(TEXT).input_ids
    produced = {}

    def scripted(logits, params, seeds, steps, histories=None):
        return [script[s] for s in steps]  # step = tokens this request has produced so far

    monkeypatch.setattr(engine_module, "sample", scripted)
    engine = LLMEngine(Transformer.from_pretrained(tiny_default_path), tokenizer=tok)
    deltas = []
    for rid, token, delta in engine.stream(
        ["Say it:", "And again:"], SamplingParams(max_tokens=len(script))
    ):
        produced.setdefault(rid, []).append(token)
        deltas.append((rid, delta))
    for rid in produced:
        mine = [d for r, d in deltas if r == rid]
        assert "".join(mine) == TEXT and not any("\ufffd" in d for d in mine)
        assert produced[rid] == script


def test_detokenizer_rejects_what_is_not_a_tokenizer_or_a_token():
    with pytest.raises(ValueError, match="tokenizer is 5: expected an object with a decode"):
        IncrementalDetokenizer(5)
    detok = IncrementalDetokenizer(type("T", (), {"decode": lambda self, ids, **k: ""})())
    with pytest.raises(ValueError, match=r"token_ids\[0\] is -1: expected an int >= 0"):
        detok.add([-1])
    assert detok.add(torch.tensor(3)) == "" and detok.token_ids == [3]
