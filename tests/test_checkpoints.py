"""The generated tiny checkpoint: same bytes everywhere, Qwen3-shaped, safe to generate
concurrently."""

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from minillm import checkpoints
from minillm.checkpoints import (
    EOS_TOKEN_ID,
    MANIFEST,
    QWEN3_0_6B_CONFIG,
    TINY_CONFIG,
    TINY_NAME,
    TINY_SEED,
    checkpoint_problem,
    default_model_path,
    ensure_checkpoint,
    load_tokenizer,
    write_checkpoint,
)
from minillm.kv_cache import generate
from minillm.model import ModelConfig, Transformer

# Pinned so that any change to the recipe (config, seed, scales, RNG, file layout) is noticed:
# such a change must also bump TINY_NAME, or readers with an old cache would silently run a
# different model.
TINY_SAFETENSORS_SHA256 = "bdd3f2869ebd635b58a0252817ca25f82aca14d898e53caa470bb63516dbd690"
TINY_CONFIG_SHA256 = "6b9bd3af49fa998c9326d97b08da9768c0e41acaa3d8b190bac3b90416580fcb"
SMALL = dict(
    vocab_size=512,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
)


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_default_checkpoint_is_byte_identical_when_generated_twice(tmp_path, monkeypatch):
    monkeypatch.delenv("MINILLM_MODEL", raising=False)
    monkeypatch.setenv("MINILLM_CACHE", str(tmp_path / "cache"))
    first = (
        default_model_path()
    )  # the code path readers hit: generated on first use into the cache
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


def test_qwen3_0_6b_config_builds_the_published_model():
    """QWEN3_0_6B_CONFIG loads as a Qwen3 ModelConfig with Qwen3-0.6B's sizes, and the model
    built from it has the parameter counts its model card gives: 0.6B, 0.44B without the
    embedding."""
    cfg = ModelConfig.from_hf(QWEN3_0_6B_CONFIG)
    sizes = (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads)
    sizes += (cfg.num_key_value_heads, cfg.hd, cfg.intermediate_size, cfg.vocab_size)
    assert sizes == (28, 1024, 16, 8, 128, 3072, 151_936)
    assert cfg.qk_norm and cfg.tie_word_embeddings and cfg.rope_theta == 1_000_000.0
    with torch.device("meta"):  # shapes only: no memory for the weights
        model = Transformer(cfg)
    total = sum(p.numel() for p in model.parameters())  # the tied head is counted once
    assert round(total / 1e9, 1) == 0.6
    assert round((total - model.embed_tokens.weight.numel()) / 1e9, 2) == 0.44


def test_tiny_checkpoint_ships_the_real_qwen3_tokenizer(tiny_default_path):
    tok = load_tokenizer(tiny_default_path)
    assert tok("Hello, world").input_ids == [9707, 11, 1879]
    assert tok.eos_token_id == EOS_TOKEN_ID
    assert tok.decode(tok("The capital of France is").input_ids) == "The capital of France is"


def test_tiny_model_norm_weights_are_not_all_ones(tiny_default_path):
    model = Transformer.from_pretrained(tiny_default_path)
    assert not torch.allclose(
        model.layers[0].input_layernorm.weight, torch.ones(model.cfg.hidden_size)
    )
    assert not torch.allclose(model.layers[0].self_attn.q_norm.weight, torch.ones(model.cfg.hd))


def test_greedy_decoding_does_not_collapse_on_the_demo_prompts(tiny_default_path):
    from minillm.cli.commands import DEMO_PROMPTS

    model, tok = (
        Transformer.from_pretrained(tiny_default_path),
        load_tokenizer(tiny_default_path),
    )
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
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(folder), json.dumps(SMALL), start],
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    assert sorted(f.name for f in folder.parent.iterdir()) == [
        "raced"
    ]  # no temp folders left behind
    fresh = write_checkpoint(tmp_path / "fresh", SMALL, seed=5, with_tokenizer=False)
    assert (folder / "model.safetensors").read_bytes() == (
        fresh / "model.safetensors"
    ).read_bytes()
    Transformer.from_pretrained(folder)


def test_losing_the_race_keeps_the_winners_folder(tmp_path, monkeypatch):
    folder = tmp_path / "raced"
    real_write = checkpoints.write_checkpoint

    def write_while_another_process_finishes(tmp, config, seed, with_tokenizer):
        real_write(
            folder, config, seed, with_tokenizer
        )  # the other process renames its copy first
        (folder / "winner").write_text("")
        return real_write(tmp, config, seed, with_tokenizer)

    monkeypatch.setattr(checkpoints, "write_checkpoint", write_while_another_process_finishes)
    assert ensure_checkpoint(folder, SMALL, seed=5, with_tokenizer=False) == folder
    assert (folder / "winner").exists()
    assert sorted(f.name for f in tmp_path.iterdir()) == ["raced"]


def test_ensure_checkpoint_reuses_a_complete_folder(tmp_path, monkeypatch):
    folder = ensure_checkpoint(tmp_path / "m", SMALL, seed=5, with_tokenizer=False)
    monkeypatch.setattr(
        checkpoints, "write_checkpoint", lambda *a, **k: (_ for _ in ()).throw(AssertionError)
    )
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


# ---- the cache: written atomically, verified on every use, a broken entry regenerated ----


def break_by(how):
    def damage(folder):
        if how == "truncated weights":
            f = folder / "model.safetensors"
            f.write_bytes(f.read_bytes()[:5000])
        elif how == "empty weights":
            (folder / "model.safetensors").write_bytes(b"")
        elif how == "no config.json":
            (folder / "config.json").unlink()
        elif how == "no manifest (an older minillm)":
            (folder / MANIFEST).unlink()
        elif how == "unreadable manifest":
            (folder / MANIFEST).write_text("{")
        elif how == "partial folder (interrupted first run)":
            for f in folder.iterdir():
                if f.name != "config.json":
                    f.unlink()
        elif how == "edited config.json":
            c = json.loads((folder / "config.json").read_text())
            c["intermediate_size"] = 96
            (folder / "config.json").write_text(json.dumps(c))
        elif how == "a file where the folder should be":
            for f in folder.iterdir():
                f.unlink()
            folder.rmdir()
            folder.write_text("not a checkpoint")
        elif how == "an empty folder":
            for f in folder.iterdir():
                f.unlink()

    return damage


BROKEN = [
    "truncated weights",
    "empty weights",
    "no config.json",
    "no manifest (an older minillm)",
    "unreadable manifest",
    "partial folder (interrupted first run)",
    "edited config.json",
    "a file where the folder should be",
    "an empty folder",
]


@pytest.mark.parametrize("how", BROKEN)
def test_broken_cache_entry_is_regenerated(tmp_path, capsys, how):
    folder = ensure_checkpoint(tmp_path / "cache" / "m", SMALL, seed=5, with_tokenizer=False)
    good = {f.name: f.read_bytes() for f in folder.iterdir()}
    break_by(how)(folder)
    assert ensure_checkpoint(folder, SMALL, seed=5, with_tokenizer=False) == folder
    assert {f.name: f.read_bytes() for f in folder.iterdir()} == good
    assert checkpoint_problem(folder, full=True) is None
    assert sorted(f.name for f in folder.parent.iterdir()) == ["m"], "nothing left beside it"
    if (
        how != "an empty folder"
    ):  # an empty folder is replaced without a word: there was nothing to reuse
        err = capsys.readouterr().err
        assert (
            f"the cached checkpoint {folder} cannot be reused" in err
            and "generating it again" in err
        )
    Transformer.from_pretrained(folder)


def test_default_model_regenerates_a_truncated_cache(tmp_path, monkeypatch):
    """The reported case, on the default model: a truncated cached checkpoint used to fail every
    command."""
    monkeypatch.delenv("MINILLM_MODEL", raising=False)
    monkeypatch.setenv("MINILLM_CACHE", str(tmp_path))
    path = default_model_path()
    (path / "model.safetensors").write_bytes(
        (path / "model.safetensors").read_bytes()[: 1 << 20]
    )
    assert default_model_path() == path
    assert sha256(path / "model.safetensors") == TINY_SAFETENSORS_SHA256


def test_a_broken_entry_that_cannot_be_replaced_names_the_folder_and_the_fix(
    tmp_path, monkeypatch
):
    folder = ensure_checkpoint(tmp_path / "m", SMALL, seed=5, with_tokenizer=False)
    (folder / "model.safetensors").write_bytes(b"")
    before = {f.name: f.read_bytes() for f in folder.iterdir()}
    real_rename = os.rename

    def rename(src, dst):
        if str(src) == str(
            folder
        ):  # moving the broken folder aside: say a read-only cache refuses
            raise PermissionError(13, "Permission denied")
        return real_rename(src, dst)

    monkeypatch.setattr(checkpoints.os, "rename", rename)
    with pytest.raises(
        OSError,
        match=rf"the cached checkpoint {folder} is broken \(model.safetensors has 0 bytes.*\) "
        r"and cannot be "
        rf"replaced \(Permission denied\); delete it with: rm -rf '{folder}'",
    ):
        ensure_checkpoint(folder, SMALL, seed=5, with_tokenizer=False)
    assert sorted(f.name for f in tmp_path.iterdir()) == ["m"], "the temporary copy was removed"
    assert {f.name: f.read_bytes() for f in folder.iterdir()} == before, (
        "and the folder left as it was"
    )


def test_an_interrupted_write_leaves_no_folder(tmp_path, monkeypatch):
    def write_half_then_fail(tmp, config, seed, with_tokenizer):
        (Path(tmp) / "config.json").write_text("{}")
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoints, "write_checkpoint", write_half_then_fail)
    with pytest.raises(KeyboardInterrupt):
        ensure_checkpoint(tmp_path / "m", SMALL, seed=5, with_tokenizer=False)
    assert list(tmp_path.iterdir()) == [], "neither the folder nor a temporary copy"


def test_copies_left_by_killed_runs_are_removed_after_an_hour(tmp_path):
    old, fresh = tmp_path / "m.tmp-old", tmp_path / "m.tmp-fresh"
    for d in (old, fresh):
        d.mkdir()
        (d / "model.safetensors").write_bytes(b"partial")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    ensure_checkpoint(tmp_path / "m", SMALL, seed=5, with_tokenizer=False)
    assert sorted(f.name for f in tmp_path.iterdir()) == ["m", "m.tmp-fresh"], (
        "a fresh one may be another run's"
    )


@pytest.mark.parametrize(
    "make_cache, message",
    [
        (lambda p: (p.write_text("x"), p)[1], "MINILLM_CACHE=.* is a file: expected a folder"),
        (
            lambda p: (p.write_text("x"), p / "sub")[1],
            r"cannot write a checkpoint into the cache folder .*sub \(Not a directory\): "
            "point MINILLM_CACHE at a writable folder",
        ),
    ],
)
def test_minillm_cache_that_is_not_a_folder_is_a_clear_error(
    tmp_path, monkeypatch, capsys, make_cache, message
):
    from minillm.cli import main

    monkeypatch.delenv("MINILLM_MODEL", raising=False)
    monkeypatch.setenv("MINILLM_CACHE", str(make_cache(tmp_path / "cachefile")))
    with pytest.raises(OSError, match=message):
        default_model_path()
    assert main(["demo"]) == 1  # the command line prints the message instead of a traceback
    err = capsys.readouterr().err
    assert "python -m minillm demo: error:" in err and "Traceback" not in err


@pytest.fixture
def doctor_on(tmp_path, monkeypatch, capsys):
    """Run `python -m minillm doctor` on a copy of a small generated checkpoint damaged by
    `damage`."""
    from minillm.cli import main

    def run(damage=None):
        folder = write_checkpoint(tmp_path / "model", SMALL, seed=5, with_tokenizer=True)
        if damage:
            damage(folder / "model.safetensors")
        monkeypatch.setenv("MINILLM_MODEL", str(folder))
        code = main(["doctor"])
        return code, capsys.readouterr().out

    return run


def flip_a_byte(f):
    data = bytearray(f.read_bytes())
    data[-10] ^= 0xFF
    f.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "damage, code, words",
    [
        (None, 0, r"weights OK: 0.0M parameters from 1 file\(s\)"),
        (
            flip_a_byte,
            1,
            r"model is damaged \(model.safetensors has changed since it was generated \(its "
            r"SHA-256 differs\)\)",
        ),
        (
            lambda f: f.write_bytes(f.read_bytes()[:-1000]),
            1,
            r"model.safetensors has 166,184 bytes, expected 167,184",
        ),
        (
            lambda f: (f.parent / MANIFEST).unlink() or f.write_bytes(f.read_bytes()[:-1000]),
            1,
            "the weights do not load: .*model.safetensors is truncated or padded",
        ),
    ],
)
def test_doctor_verifies_the_weights_it_would_load(doctor_on, damage, code, words):
    import re

    got, out = doctor_on(damage)
    assert got == code, out
    assert re.search(words, out), out
    assert ("all good" in out) == (code == 0)
