"""Every bad input raises an error that names the bad value and what was expected; odd-but-valid
layouts load."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from minillm.checkpoints import default_model_path
from minillm.checks.reference import hf_logits
from minillm.model import Transformer


@pytest.fixture
def ckpt(tiny_checkpoint, tmp_path):
    """A private copy of a tiny checkpoint that a test may break."""
    return shutil.copytree(tiny_checkpoint(seed=1), tmp_path / "ckpt")


def edit_config(folder, **changes):
    c = json.loads((folder / "config.json").read_text())
    for k, v in changes.items():
        if v is None:
            c.pop(k, None)
        else:
            c[k] = v
    (folder / "config.json").write_text(json.dumps(c))


def edit_tensors(folder, drop=(), add=None):
    state = load_file(str(folder / "model.safetensors"))
    for name in drop:
        del state[name]
    state.update(add or {})
    save_file(state, str(folder / "model.safetensors"))


def test_missing_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("MINILLM_MODEL", raising=False)
    with pytest.raises(FileNotFoundError, match=r"model folder .*nowhere does not exist") as e:
        Transformer.from_pretrained(tmp_path / "nowhere")
    assert "MINILLM_MODEL" not in str(e.value)  # the path was passed directly


def test_missing_folder_from_minillm_model(tmp_path, monkeypatch):
    monkeypatch.setenv("MINILLM_MODEL", str(tmp_path / "nowhere"))
    with pytest.raises(
        FileNotFoundError, match=r"model folder .*nowhere \(from MINILLM_MODEL\) does not exist"
    ):
        Transformer.from_pretrained(default_model_path())


def test_missing_config_json(ckpt):
    (ckpt / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match="has no config.json"):
        Transformer.from_pretrained(ckpt)


def test_config_json_that_is_not_json(ckpt):
    (ckpt / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="config.json is not valid JSON"):
        Transformer.from_pretrained(ckpt)


def test_missing_safetensors(ckpt):
    (ckpt / "model.safetensors").unlink()
    with pytest.raises(
        FileNotFoundError, match="has no model.safetensors or model.safetensors.index.json"
    ):
        Transformer.from_pretrained(ckpt)


@pytest.mark.parametrize(
    "arch, model_type", [("Qwen3MoeForCausalLM", "qwen3_moe"), ("Qwen2ForCausalLM", "qwen2")]
)
def test_unsupported_architecture_is_refused(ckpt, arch, model_type):
    edit_config(ckpt, architectures=[arch], model_type=model_type)
    with pytest.raises(
        ValueError,
        match=rf"holds a {arch} checkpoint \(architectures in "
        r"config.json\); mini_llm implements Qwen3ForCausalLM and "
        "LlamaForCausalLM only",
    ):
        Transformer.from_pretrained(ckpt)


def test_an_unsupported_architecture_is_refused_by_the_config_too():
    from minillm.model import ModelConfig

    with pytest.raises(
        ValueError,
        match=r'architectures \["MistralForCausalLM"\] in cfg.json: '
        "mini_llm implements Qwen3ForCausalLM and LlamaForCausalLM only",
    ):
        ModelConfig.from_hf(
            dict(architectures=["MistralForCausalLM"], vocab_size=8), source="cfg.json"
        )


def test_missing_config_field_is_named(ckpt):
    edit_config(ckpt, hidden_size=None)
    with pytest.raises(ValueError, match="config.json lacks hidden_size"):
        Transformer.from_pretrained(ckpt)


def test_missing_tensor_is_named(ckpt):
    edit_tensors(ckpt, drop=["model.layers.1.mlp.up_proj.weight"])
    with pytest.raises(
        ValueError,
        match=r"missing tensors layers\.1\.mlp\.up_proj\.weight, unexpected tensors none",
    ):
        Transformer.from_pretrained(ckpt)


def test_unexpected_tensor_is_named(ckpt):
    edit_tensors(ckpt, add={"model.layers.0.self_attn.q_proj.bias": torch.zeros(64)})
    with pytest.raises(
        ValueError,
        match=r"missing tensors none, unexpected tensors layers\.0\.self_attn\.q_proj\.bias",
    ):
        Transformer.from_pretrained(ckpt)


def test_untied_config_without_lm_head_names_it(ckpt):
    edit_config(ckpt, tie_word_embeddings=False)
    with pytest.raises(ValueError, match=r"missing tensors lm_head\.weight"):
        Transformer.from_pretrained(ckpt)


def test_tied_checkpoint_that_also_stores_the_head_loads(ckpt, token_ids):
    before = Transformer.from_pretrained(ckpt)
    edit_tensors(
        ckpt, add={"lm_head.weight": torch.zeros(512, 32)}
    )  # ignored: the head is the embedding
    after = Transformer.from_pretrained(ckpt)
    ids = torch.tensor([token_ids(8)])
    assert torch.equal(before(ids), after(ids))


def test_wrong_tensor_shape_is_named(ckpt):
    edit_config(ckpt, intermediate_size=96)
    with pytest.raises(
        ValueError, match=r"tensor layers\.\d\.mlp\.\w+_proj\.weight has shape .*config expects"
    ):
        Transformer.from_pretrained(ckpt)


def test_heads_that_do_not_share_kv_heads_evenly(ckpt):
    edit_config(ckpt, num_key_value_heads=3)
    with pytest.raises(ValueError, match="4 query heads cannot share 3 KV heads evenly"):
        Transformer.from_pretrained(ckpt)


@pytest.mark.parametrize(
    "changes, message",
    [
        (
            dict(rope_scaling={"rope_type": "yarn", "factor": 4.0}),
            r"rope type 'yarn' is not supported \(rope_scaling in",
        ),
        (
            dict(
                architectures=["LlamaForCausalLM"],
                model_type="llama",
                rope_scaling={"rope_type": "llama3"},
            ),
            r"rope type 'llama3' is not supported \(rope_scaling in",
        ),
        (
            dict(architectures=["LlamaForCausalLM"], model_type="llama", mlp_bias=True),
            "mlp_bias=true",
        ),
        (dict(rope_theta=None), "neither 'rope_theta' nor 'rope_parameters.rope_theta'"),
        (dict(attention_bias=True), "attention_bias=true"),
        (dict(use_sliding_window=True), "use_sliding_window=true"),
    ],
)
def test_unsupported_config_options(ckpt, changes, message):
    edit_config(ckpt, **changes)
    with pytest.raises(ValueError, match=message):
        Transformer.from_pretrained(ckpt)


@pytest.mark.parametrize("bad", [512, 100_000, -1])
def test_token_id_outside_the_vocabulary(tiny_model, bad):
    model = tiny_model(seed=1)
    with pytest.raises(
        ValueError,
        match=f"token id {bad} is outside the vocabulary: expected an int with 0 <= id < 512",
    ):
        model(torch.tensor([[1, bad, 2]]))


def test_float_token_ids_are_rejected(tiny_model):
    with pytest.raises(ValueError, match="integer token ids, got dtype torch.float32"):
        tiny_model(seed=1)(torch.tensor([[1.0, 2.0]]))


def test_input_ids_of_three_dimensions(tiny_model):
    with pytest.raises(
        ValueError,
        match=r"input_ids must be \[batch, tokens\] or flat \[tokens\], got shape \(1, 1, 3\)",
    ):
        tiny_model(seed=1)(torch.tensor([[[1, 2, 3]]]))


def shard(folder, names_per_shard):
    """Rewrite folder's single safetensors file as shards plus an index, as large HF checkpoints
    ship."""
    state = load_file(str(folder / "model.safetensors"))
    (folder / "model.safetensors").unlink()
    weight_map = {}
    for i, names in enumerate(names_per_shard):
        file = f"model-{i + 1:05d}-of-{len(names_per_shard):05d}.safetensors"
        save_file({n: state[n] for n in names}, str(folder / file))
        weight_map.update({n: file for n in names})
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map})
    )


def test_sharded_checkpoint_loads_and_matches_transformers(ckpt, token_ids):
    ids = token_ids(16, seed=3)
    single = Transformer.from_pretrained(ckpt)(torch.tensor([ids]))[0]
    names = sorted(load_file(str(ckpt / "model.safetensors")))
    shard(ckpt, [names[: len(names) // 2], names[len(names) // 2 :]])
    sharded = Transformer.from_pretrained(ckpt)(torch.tensor([ids]))[0]
    assert torch.equal(single, sharded)
    assert (sharded - hf_logits(ckpt, ids)).abs().max() < 1e-4


def test_missing_shard_is_named(ckpt):
    names = sorted(load_file(str(ckpt / "model.safetensors")))
    shard(ckpt, [names[:5], names[5:]])
    (ckpt / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(
        FileNotFoundError,
        match="lists shards that are not in .*: model-00002-of-00002.safetensors",
    ):
        Transformer.from_pretrained(ckpt)


def test_transformers_5_config_with_rope_parameters_loads(ckpt, token_ids):
    # transformers 5.x writes rope_theta inside rope_parameters; a theta unlike the default
    # proves it is read
    edit_config(
        ckpt, rope_theta=None, rope_parameters={"rope_type": "default", "rope_theta": 5_000.0}
    )
    model = Transformer.from_pretrained(ckpt)
    assert model.cfg.rope_theta == 5_000.0
    ids = token_ids(32, seed=4)
    assert (model(torch.tensor([ids]))[0] - hf_logits(ckpt, ids)).abs().max() < 1e-4


def test_folder_without_tokenizer_files_is_named(ckpt):
    from minillm.checkpoints import load_tokenizer

    with pytest.raises(FileNotFoundError, match="has no tokenizer files"):
        load_tokenizer(ckpt)  # written with_tokenizer=False


# ---- malformed config.json: every field checked for type and range, the error names file and
#   field ----


def snapshot(folder):
    """Every file's bytes: a failed load must leave the checkpoint as it was."""
    return {f.name: f.read_bytes() for f in sorted(folder.iterdir())}


@pytest.mark.parametrize(
    "changes, message",
    [
        (
            dict(tie_word_embeddings="false"),
            "tie_word_embeddings in .*config.json is 'false': expected true or false",
        ),
        (
            dict(tie_word_embeddings="true"),
            "tie_word_embeddings in .*config.json is 'true': expected true or false",
        ),
        (
            dict(tie_word_embeddings=0),
            "tie_word_embeddings in .*config.json is 0: expected true or false",
        ),
        (dict(rope_theta=0), "rope_theta in .*config.json is 0: expected a finite number > 0"),
        (
            dict(rope_theta=-10000.0),
            "rope_theta in .*config.json is -10000.0: expected a finite number > 0",
        ),
        (
            dict(rope_theta="1e6"),
            "rope_theta in .*config.json is '1e6': expected a finite number > 0",
        ),
        (
            dict(rope_theta=None, rope_parameters={"rope_type": "default", "rope_theta": 0}),
            "rope_theta in .*config.json is 0: expected a finite number > 0",
        ),
        (
            dict(rope_parameters=[1, 2]),
            r"rope_parameters in .*config.json is \[1, 2\]: expected a JSON object or null",
        ),
        (dict(hidden_size=2.5), "hidden_size in .*config.json is 2.5: expected an int >= 1"),
        (dict(hidden_size="32"), "hidden_size in .*config.json is '32': expected an int >= 1"),
        (
            dict(num_hidden_layers=0),
            "num_hidden_layers in .*config.json is 0: expected an int >= 1",
        ),
        (dict(vocab_size=-1), "vocab_size in .*config.json is -1: expected an int >= 1"),
        (
            dict(num_attention_heads=True),
            "num_attention_heads in .*config.json is True: expected an int >= 1",
        ),
        (
            dict(num_key_value_heads=0),
            "num_key_value_heads in .*config.json is 0: expected an int >= 1",
        ),
        (dict(head_dim=-16), "head_dim in .*config.json is -16: expected an int >= 1"),
        (
            dict(max_position_embeddings=0),
            "max_position_embeddings in .*config.json is 0: expected an int >= 1",
        ),
        (
            dict(rms_norm_eps=0),
            "rms_norm_eps in .*config.json is 0: expected a finite number > 0",
        ),
        (
            dict(rms_norm_eps=-1e-6),
            "rms_norm_eps in .*config.json is -1e-06: expected a finite number > 0",
        ),
        (
            dict(attention_bias="false"),
            "attention_bias in .*config.json is 'false': expected true or false",
        ),
        (
            dict(use_sliding_window="no"),
            "use_sliding_window in .*config.json is 'no': expected true or false",
        ),
    ],
)
def test_malformed_config_field_is_named_with_its_file(ckpt, changes, message):
    edit_config(ckpt, **changes)
    before = snapshot(ckpt)
    with pytest.raises(ValueError, match=message) as info:
        Transformer.from_pretrained(ckpt)
    assert str(ckpt / "config.json") in str(info.value)
    assert snapshot(ckpt) == before


@pytest.mark.parametrize(
    "text, message",
    [
        ("[1, 2]", r"config.json holds a list \[1, 2\]: expected a JSON object"),
        ("null", "config.json holds null: expected a JSON object"),
        ('"qwen3"', 'config.json holds a string "qwen3": expected a JSON object'),
        ("42", "config.json holds a number 42: expected a JSON object"),
        ("", "config.json is not valid JSON"),
    ],
)
def test_config_json_that_is_not_an_object(ckpt, text, message):
    (ckpt / "config.json").write_text(text)
    with pytest.raises(ValueError, match=message) as info:
        Transformer.from_pretrained(ckpt)
    assert str(ckpt / "config.json") in str(info.value)


def test_untied_string_false_no_longer_drops_the_head_silently(ckpt, token_ids):
    """The reported case: "false" as a string was truthy, so an untied lm_head was replaced by
    the embedding."""
    edit_tensors(
        ckpt,
        add={
            "lm_head.weight": torch.randn(512, 32, generator=torch.Generator().manual_seed(0))
        },
    )
    edit_config(ckpt, tie_word_embeddings=False)
    untied = Transformer.from_pretrained(ckpt)
    ids = token_ids(8, seed=2)
    assert (
        untied(torch.tensor([ids]))[0] - hf_logits(ckpt, ids)
    ).abs().max() < 1e-4  # the real boolean loads right
    edit_config(ckpt, tie_word_embeddings="false")
    with pytest.raises(ValueError, match="expected true or false"):
        Transformer.from_pretrained(ckpt)


def test_rope_theta_zero_would_have_given_nan_logits(ckpt, token_ids):
    """Why rope_theta is checked: theta = 0 makes every rotation angle NaN (0 ** -x is inf, 1 /
    inf * 0...)."""
    from minillm.model import rope_cos_sin

    cos, _ = rope_cos_sin(torch.arange(4), 16, 0.0)
    assert torch.isnan(cos).any()


# ---- broken weight files: named, with what went wrong and how to fix it ----


def truncate(n):
    return lambda f: f.write_bytes(f.read_bytes()[:n])


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda f: f.write_bytes(b""), r"model.safetensors is empty \(0 bytes\)"),
        (
            lambda f: f.write_text(
                "version https://git-lfs.github.com/spec/v1\noid sha256:"
                + "0" * 64
                + "\nsize 164736\n"
            ),
            r"model.safetensors is a Git LFS pointer \(\d+ bytes\), not the weights: run `git "
            r"lfs pull` in ",
        ),
        (truncate(5), r"model.safetensors is not a complete safetensors file \(5 bytes"),
        (
            truncate(1000),
            r"model.safetensors is not a complete safetensors file \(1,000 bytes, announcing "
            r"a header of",
        ),
        (
            truncate(-100),
            r"model.safetensors is truncated or padded: its tensors need [\d,]+ bytes of data "
            r"but the file holds",
        ),
        (
            lambda f: f.write_bytes(f.read_bytes() + b"\0" * 8),
            r"model.safetensors is truncated or padded",
        ),
        (
            lambda f: f.write_bytes((8).to_bytes(8, "little") + b"not json" + b"\0" * 64),
            "has no readable safetensors header",
        ),
        (
            lambda f: f.write_text("<html>404 Not Found</html>" * 3),
            "is not a complete safetensors file",
        ),
    ],
)
def test_broken_weights_file_is_named(ckpt, damage, message):
    file = ckpt / "model.safetensors"
    damage(file)
    before = snapshot(ckpt)
    with pytest.raises(ValueError, match=message) as info:
        Transformer.from_pretrained(ckpt)
    assert str(file) in str(info.value)
    assert "SafetensorError" not in str(info.value)
    assert snapshot(ckpt) == before


def test_broken_shard_is_named(ckpt):
    names = sorted(load_file(str(ckpt / "model.safetensors")))
    shard(ckpt, [names[:5], names[5:]])
    second = ckpt / "model-00002-of-00002.safetensors"
    second.write_bytes(second.read_bytes()[:-1])
    with pytest.raises(ValueError, match="model-00002-of-00002.safetensors is truncated"):
        Transformer.from_pretrained(ckpt)


@pytest.mark.parametrize(
    "index, message",
    [
        ("{not json", "model.safetensors.index.json is not valid JSON"),
        ("[]", "has no 'weight_map'"),
        ('{"weight_map": {"a": 3}}', "has no 'weight_map'"),
    ],
)
def test_broken_shard_index_is_named(ckpt, index, message):
    (ckpt / "model.safetensors").unlink()
    (ckpt / "model.safetensors.index.json").write_text(index)
    with pytest.raises(ValueError, match=message):
        Transformer.from_pretrained(ckpt)
