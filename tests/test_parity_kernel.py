"""Chapter 1's account of minillm's float32 difference from transformers: the projection
kernel."""

from unittest.mock import patch

import torch
import torch.nn.functional as F

import minillm.model
from minillm.checks.reference import hf_logits
from minillm.linear import linear
from minillm.model import Transformer


def test_with_f_linear_minillm_equals_transformers_bit_for_bit(model, model_path, tokenizer):
    ids = tokenizer("The capital of France is Paris, and the capital of Italy is").input_ids
    with patch("minillm.model.linear", F.linear):
        ours = model(torch.tensor([ids]))[0]
    assert minillm.model.linear is linear  # the patch is undone
    assert torch.equal(ours, hf_logits(model_path, ids))


def test_float64_minillm_equals_transformers_bit_for_bit(model_path, tokenizer):
    ids = tokenizer("Once upon a time, in a small village, there lived").input_ids
    model64 = Transformer.from_pretrained(model_path, dtype=torch.float64)
    ours = model64(torch.tensor([ids]))[0]
    assert torch.equal(ours, hf_logits(model_path, ids, torch.float64))


def test_appending_tokens_leaves_earlier_rows_within_rounding(model_path):
    ids = torch.randint(0, 1000, (1, 33), generator=torch.Generator().manual_seed(0))
    for dtype, tol in ((torch.float32, 1e-4), (torch.float64, 1e-10)):
        model = Transformer.from_pretrained(model_path, dtype=dtype)
        for T in (3, 7, 31):  # lengths at which the earlier rows moved on the book's machine
            moved = (model(ids[:, : T + 1])[0, :T] - model(ids[:, :T])[0]).abs().max().item()
            assert moved < tol
