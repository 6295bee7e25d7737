"""Fixtures shared by every exercise's tests.

- `learner`: the file under test, running in its own sandboxed process (see
  practice/harness/remote.py): $PRACTICE_FILE when the judge sets it, else the folder's
  solution.py (in `check` mode, each of solution.py, starter.py and wrong/*.py in turn).
  `learner.rms_norm(x, w)` calls the reader's code there and brings the value back. A test
  module may name the arguments its calls are allowed to change in place, with their positions:
  `MAY_CHANGE_IN_PLACE = {"running": 0, "waiting": 1}`; any other change fails the test, and
  only those arguments get the new contents back.
- `tiny_model`: a random Qwen3 with a 512-token vocabulary, written to a temp folder and loaded
  once. It stays in the grader: the reader's code can call it (and `check_token_ids`), read its
  layers and config, not change it.
"""

from __future__ import annotations

import judge_plugin
import pytest
from grading import share

TINY = dict(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
)


@pytest.fixture
def learner(request):
    return judge_plugin.learner_for(request)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    from minillm.checkpoints import write_checkpoint
    from minillm.model import Transformer

    folder = write_checkpoint(
        tmp_path_factory.mktemp("tiny-qwen3"), TINY, seed=7, with_tokenizer=False
    )
    return share(
        Transformer.from_pretrained(folder), methods=["check_token_ids"]
    )  # forward_cached calls it
