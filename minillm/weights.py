"""weights.py — a checkpoint's files on disk: config.json, which safetensors files it has,
whether each is whole.

A download cut short, an empty file, a Git LFS pointer checked out without `git lfs pull`: each
would otherwise fail deep inside the safetensors reader ("incomplete metadata") or, worse, load.
These checks read only the 8-byte length and the JSON header, so they are cheap enough to run on
every load, and every error names the file and the command that fixes it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def read_json(file: Path, what: str):
    try:
        return json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{file} is not valid JSON ({e}); expected {what}") from None


def short(value, n: int = 60) -> str:
    """A JSON value as the file shows it, cut to n characters: `null`, `[1, 2]`, `"false"`."""
    text = json.dumps(value, default=repr)
    return text if len(text) <= n else text[:n] + "..."


def describe(value) -> str:
    """What a JSON value is, for an error message: `null`, `a list [1, 2]`, `a string "x"`."""
    kinds = {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
    }
    kind = kinds.get(type(value))
    return short(value) if value is None or kind is None else f"{kind} {short(value)}"


def few(names: list[str], n: int = 8) -> str:
    if not names:
        return "none"
    return ", ".join(names[:n]) + (f" and {len(names) - n} more" if len(names) > n else "")


def weight_files(path: Path) -> list[Path]:
    """The checkpoint's safetensors files: model.safetensors, or the shards its index lists."""
    path = Path(path)
    single, index = path / "model.safetensors", path / "model.safetensors.index.json"
    if single.exists():
        return [single]
    if not index.exists():
        raise FileNotFoundError(
            f"{path} has no model.safetensors or model.safetensors.index.json"
        )
    weight_map = read_json(index, "a safetensors index with a 'weight_map'")
    weight_map = weight_map.get("weight_map") if isinstance(weight_map, dict) else None
    if (
        not weight_map
        or not isinstance(weight_map, dict)
        or not all(isinstance(f, str) for f in weight_map.values())
    ):
        raise ValueError(
            f"{index} has no 'weight_map': expected tensor name -> shard file entries"
        )
    files = [path / f for f in sorted(set(weight_map.values()))]
    absent = [f.name for f in files if not f.exists()]
    if absent:
        raise FileNotFoundError(
            f"{index.name} lists shards that are not in {path}: {few(absent)}"
        )
    return files


LFS_POINTER = b"version https://git-lfs"


def check_safetensors_file(file: Path) -> dict:
    """The header of a safetensors file, after checking the file is whole; errors name the file.

    The format is 8 bytes (little-endian header length n), n bytes of JSON (name -> dtype,
    shape, data_offsets), then the tensors' bytes. A download cut short, an empty file or a Git
    LFS pointer fails here with what went wrong, instead of deep inside the safetensors reader.
    """
    file = Path(file)
    size = file.stat().st_size
    again = "copy or download it again"
    with open(file, "rb") as f:
        start = f.read(64)
        if size == 0:
            raise ValueError(
                f"{file} is empty (0 bytes): expected safetensors weights; {again}"
            )
        if start.startswith(LFS_POINTER):
            raise ValueError(
                f"{file} is a Git LFS pointer ({size} bytes), not the weights: run `git lfs "
                "pull` "
                f"in {file.parent}, or download the file itself"
            )
        n = int.from_bytes(start[:8], "little") if size >= 8 else 0
        if n < 2 or 8 + n > size:
            raise ValueError(
                f"{file} is not a complete safetensors file ({size:,} bytes, announcing a "
                "header of "
                f"{n:,} bytes): expected safetensors weights; {again}"
            )
        f.seek(8)
        try:
            header = json.loads(f.read(n))
            ends = [t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"]
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            raise ValueError(
                f"{file} has no readable safetensors header: expected safetensors weights; "
                f"{again}"
            ) from None
    data = size - 8 - n
    if max(ends, default=0) != data:
        raise ValueError(
            f"{file} is truncated or padded: its tensors need {max(ends, default=0):,} bytes "
            "of data "
            f"but the file holds {data:,}; {again}"
        )
    return header


def read_config(path: Path) -> dict:
    """config.json of a checkpoint folder, as a dict; errors name the folder or file and what
    was expected."""
    path = Path(path)
    if not path.is_dir():
        env = os.environ.get("MINILLM_MODEL")
        if env and Path(env).expanduser() == path:  # the path came from the variable
            raise FileNotFoundError(
                f"model folder {path} (from MINILLM_MODEL) does not exist; point MINILLM_MODEL "
                "at a Qwen3 checkpoint folder (or `smollm2`) or unset it to use the built-in "
                "tiny model"
            )
        raise FileNotFoundError(
            f"model folder {path} does not exist: expected a folder with config.json and "
            "*.safetensors"
        )
    file = path / "config.json"
    if not file.exists():
        raise FileNotFoundError(
            f"{path} has no config.json; expected a Hugging Face checkpoint folder"
        )
    c = read_json(file, "a Hugging Face config.json")
    if not isinstance(c, dict):
        raise ValueError(
            f"{file} holds {describe(c)}: expected a JSON object (a Hugging Face config.json)"
        )
    archs = c.get("architectures") or [c.get("model_type", "unknown")]
    if not isinstance(archs, list):
        archs = [archs]
    supported = ("Qwen3ForCausalLM", "LlamaForCausalLM")
    if not set(supported) & set(archs) and c.get("model_type") not in ("qwen3", "llama"):
        raise ValueError(
            f"{path} holds a {archs[0]} checkpoint (architectures in config.json); "
            f"mini_llm implements {' and '.join(supported)} only"
        )
    return c


def load_safetensors(path: Path) -> dict:
    """All tensors of a checkpoint folder, keyed by module name (the `model.` prefix
    dropped)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    state = {}
    for f in weight_files(path):
        check_safetensors_file(f)
        try:
            tensors = load_file(str(f))
        except SafetensorError as e:
            raise ValueError(
                f"{f} cannot be read as safetensors ({e}); copy or download it again"
            ) from None
        for name, t in tensors.items():
            state[name.removeprefix("model.")] = t
    return state
