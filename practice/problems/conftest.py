"""Fixtures shared by every exercise's tests.

- `learner`: the module under test, loaded by path: $PRACTICE_FILE when the judge sets it, else the
  problem folder's solution.py (or starter.py with PRACTICE_TARGET=starter), so that
  `pytest practice/problems/rmsnorm` checks the reference solution.
- `tiny_model`: a random Qwen3 with a 512-token vocabulary, written to a temp folder and loaded once.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # practice/, for `import grading`

import grading  # noqa: E402

TINY = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16)


@pytest.fixture
def learner(request):
    return grading.load(grading.learner_path(Path(str(request.fspath)).parent))


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    from minillm.checkpoints import write_checkpoint
    from minillm.model import Transformer

    folder = write_checkpoint(tmp_path_factory.mktemp("tiny-qwen3"), TINY, seed=7, with_tokenizer=False)
    return Transformer.from_pretrained(folder)
