"""The generated tiny checkpoint: same bytes everywhere, Qwen3-shaped, safe to generate concurrently."""

import hashlib
import json
import subprocess
import sys
import time

import torch

from minillm import checkpoints
from minillm.checkpoints import (EOS_TOKEN_ID, TINY_CONFIG, TINY_NAME, TINY_SEED, default_model_path,
                                 ensure_checkpoint, load_tokenizer, write_checkpoint)
from minillm.kv_cache import generate
from minillm.model import Transformer

# Pinned so that any change to the recipe (config, seed, scales, RNG, file layout) is noticed: such a
# change must also bump TINY_NAME, or readers with an old cache would silently run a different model.
TINY_SAFETENSORS_SHA256 = "bdd3f2869ebd635b58a0252817ca25f82aca14d898e53caa470bb63516dbd690"
TINY_CONFIG_SHA256 = "6b9bd3af49fa998c9326d97b08da9768c0e41acaa3d8b190bac3b90416580fcb"
SMALL = dict(vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, head_dim=16)


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_default_checkpoint_is_byte_identical_when_generated_twice(tmp_path, monkeypatch):
    monkeypatch.delenv("MINILLM_MODEL", raising=False)
    monkeypatch.setenv("MINILLM_CACHE", str(tmp_path / "cache"))
    first = default_model_path()  # the code path readers hit: generated on first use into the cache
    second = write_checkpoint(tmp_path / "again", TINY_CONFIG, TINY_SEED, with_tokenizer=False)
    assert first == tmp_path / "cache" / TINY_NAME
    for name in ["model.safetensors", "config.json", "generation_config.json"]:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    assert sha256(first / "model.safetensors") == TINY_SAFETENSORS_SHA256
    assert sha256(first / "config.json") == TINY_CONFIG_SHA256
    assert default_model_path() == first  # the second call reuses the cache


def test_tiny_config_has_every_feature_of_qwen3_0_6b(tiny_default_path):
    c = json.loads((tiny_default_path / "config.json").read_text())
    assert c["architectures"] == ["Qwen3ForCausalLM"] and c["model_type"] == "qwen3"
    assert c["vocab_size"] == 151_936  # the real vocabulary, so the real tokenizer works
    assert c["num_key_value_heads"] < c["num_attention_heads"]  # GQA
    assert c["num_attention_heads"] % c["num_key_value_heads"] == 0
    assert c["head_dim"] * c["num_attention_heads"] != c["hidden_size"]
    assert c["tie_word_embeddings"] is True
    assert c["num_hidden_layers"] >= 2
    assert c["rope_theta"] == 1_000_000.0 and c["eos_token_id"] == EOS_TOKEN_ID


def test_tiny_checkpoint_ships_the_real_qwen3_tokenizer(tiny_default_path):
    tok = load_tokenizer(tiny_default_path)
    assert tok("Hello, world").input_ids == [9707, 11, 1879]
    assert tok.eos_token_id == EOS_TOKEN_ID
    assert tok.decode(tok("The capital of France is").input_ids) == "The capital of France is"


def test_tiny_model_norm_weights_are_not_all_ones(tiny_default_path):
    model = Transformer.from_pretrained(tiny_default_path)
    assert not torch.allclose(model.layers[0].input_layernorm.weight, torch.ones(model.cfg.hidden_size))
    assert not torch.allclose(model.layers[0].self_attn.q_norm.weight, torch.ones(model.cfg.hd))


def test_greedy_decoding_does_not_collapse_on_the_demo_prompts(tiny_default_path):
    from minillm.cli import DEMO_PROMPTS

    model, tok = Transformer.from_pretrained(tiny_default_path), load_tokenizer(tiny_default_path)
    for prompt in DEMO_PROMPTS:
        ids = tok(prompt).input_ids
        new = generate(model, ids, 20)
        assert len(set(new)) >= 5, f"{prompt!r} -> {new}"
        assert any(t not in ids for t in new)  # not just echoing the prompt


def test_writing_is_deterministic_for_other_configs_and_seeds(tmp_path):
    a = write_checkpoint(tmp_path / "a", SMALL, seed=3, with_tokenizer=False)
    b = write_checkpoint(tmp_path / "b", SMALL, seed=3, with_tokenizer=False)
    c = write_checkpoint(tmp_path / "c", SMALL, seed=4, with_tokenizer=False)
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    assert (a / "model.safetensors").read_bytes() != (c / "model.safetensors").read_bytes()


RACER = """
import json, sys, time
from minillm.checkpoints import ensure_checkpoint
folder, config, start = sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3])
time.sleep(max(0.0, start - time.time()))  # both processes start writing at the same moment
ensure_checkpoint(folder, config, seed=5, with_tokenizer=False)
"""


def test_two_racing_processes_end_with_one_complete_folder(tmp_path):
    folder = tmp_path / "models" / "raced"
    start = str(time.time() + 2.0)
    procs = [subprocess.Popen([sys.executable, "-c", RACER, str(folder), json.dumps(SMALL), start],
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    assert sorted(f.name for f in folder.parent.iterdir()) == ["raced"]  # no temp folders left behind
    fresh = write_checkpoint(tmp_path / "fresh", SMALL, seed=5, with_tokenizer=False)
    assert (folder / "model.safetensors").read_bytes() == (fresh / "model.safetensors").read_bytes()
    Transformer.from_pretrained(folder)


def test_losing_the_race_keeps_the_winners_folder(tmp_path, monkeypatch):
    folder = tmp_path / "raced"
    real_write = checkpoints.write_checkpoint

    def write_while_another_process_finishes(tmp, config, seed, with_tokenizer):
        real_write(folder, config, seed, with_tokenizer)  # the other process renames its copy first
        (folder / "winner").write_text("")
        return real_write(tmp, config, seed, with_tokenizer)

    monkeypatch.setattr(checkpoints, "write_checkpoint", write_while_another_process_finishes)
    assert ensure_checkpoint(folder, SMALL, seed=5, with_tokenizer=False) == folder
    assert (folder / "winner").exists()
    assert sorted(f.name for f in tmp_path.iterdir()) == ["raced"]


def test_ensure_checkpoint_reuses_a_complete_folder(tmp_path, monkeypatch):
    folder = ensure_checkpoint(tmp_path / "m", SMALL, seed=5, with_tokenizer=False)
    monkeypatch.setattr(checkpoints, "write_checkpoint", lambda *a, **k: (_ for _ in ()).throw(AssertionError))
    assert ensure_checkpoint(folder, SMALL, seed=5, with_tokenizer=False) == folder


def test_minillm_model_wins_over_the_tiny_default(tmp_path, monkeypatch):
    monkeypatch.setenv("MINILLM_MODEL", str(tmp_path / "Qwen3-0.6B"))
    monkeypatch.setenv("MINILLM_CACHE", str(tmp_path / "cache"))
    assert default_model_path() == tmp_path / "Qwen3-0.6B"
    assert not (tmp_path / "cache").exists()  # nothing was generated


def test_minillm_model_expands_the_home_folder(monkeypatch):
    monkeypatch.setenv("MINILLM_MODEL", "~/models/Qwen3-0.6B")
    assert "~" not in str(default_model_path())


def test_minillm_cache_chooses_the_cache_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("MINILLM_CACHE", str(tmp_path))
    assert checkpoints.cache_dir() == tmp_path
    monkeypatch.delenv("MINILLM_CACHE")
    assert checkpoints.cache_dir().parts[-2:] == (".cache", "minillm")
