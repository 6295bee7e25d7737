"""checkpoints/cache.py — minillm's verified cache of model folders.

A folder is written into a temporary sibling, a manifest of every file's size and SHA-256 goes
in last, and the folder is renamed into place, so a reader never sees half a checkpoint; a
cached folder that no longer matches its manifest (an interrupted copy, a truncated file) is
written again. The generated tiny Qwen3 and the converted SmolLM2 both live here.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

# written last into a generated checkpoint: its recipe, and every file's size and hash
MANIFEST = "minillm-manifest.json"


def cache_dir() -> Path:
    """Folder for generated checkpoints: $MINILLM_CACHE, else ~/.cache/minillm."""
    env = os.environ.get("MINILLM_CACHE")
    folder = Path(env).expanduser() if env else Path.home() / ".cache" / "minillm"
    if folder.exists() and not folder.is_dir():
        named = f"MINILLM_CACHE={env}" if env else str(folder)
        raise NotADirectoryError(
            f"{named} is a file: expected a folder for minillm's generated checkpoints; "
            "point MINILLM_CACHE at a folder (or unset it to use ~/.cache/minillm)"
        )
    return folder


def ensure_folder(folder: Path | str, recipe: dict, write, what: str) -> Path:
    """`folder` if a verified copy made from `recipe` is there; else write(tmp) makes one, moved
    in.

    The files are written into a temporary folder next to it, then renamed into place in one
    step, so `folder` is either absent or complete. A folder that fails `checkpoint_problem`
    (cut short, edited, from another recipe) is made again. Safe when two processes race: the
    loser keeps the winner's copy.
    """
    folder = Path(folder)
    problem = checkpoint_problem(folder, recipe) if folder.exists() else None
    if folder.exists() and problem is None:
        return folder
    if problem:
        print(
            f"minillm: the cached checkpoint {folder} cannot be reused ({problem}); "
            "generating it again",
            file=sys.stderr,
        )
    tmp = _make_temp_folder(folder)
    # First use only: say what the pause is (stderr, so that stdout stays the caller's)
    print(f"minillm: {what} into {folder.parent}...", end="", file=sys.stderr, flush=True)
    start = time.perf_counter()
    try:
        write(tmp)
        if not (tmp / MANIFEST).exists():
            write_manifest(tmp, recipe)
        print(f" done in {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
        for f in [
            tmp,
            *tmp.iterdir(),
        ]:  # mkdtemp makes the folder private; a cache is readable like any download
            os.chmod(f, 0o755 if f.is_dir() else 0o644)
        _move_into_place(tmp, folder, recipe)
    except BaseException:
        print(" failed", file=sys.stderr, flush=True)
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def write_manifest(folder: Path, recipe: dict) -> None:
    """The manifest: the recipe, each file's size and SHA-256. Written last: it means
    "complete"."""
    files = {
        f.name: dict(bytes=f.stat().st_size, sha256=_sha256(f))
        for f in sorted(folder.iterdir())
        if f.is_file() and f.name != MANIFEST
    }
    (folder / MANIFEST).write_text(
        json.dumps(dict(recipe=recipe, files=files), indent=2) + "\n"
    )


def _make_temp_folder(folder: Path) -> Path:
    """A fresh private folder next to `folder`, after deleting what killed runs left there."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        _remove_leftovers(folder)
        return Path(tempfile.mkdtemp(prefix=folder.name + ".tmp-", dir=folder.parent))
    except OSError as e:
        raise OSError(
            f"cannot write a checkpoint into the cache folder {folder.parent} "
            f"({e.strerror or e}): "
            "point MINILLM_CACHE at a writable folder, e.g. MINILLM_CACHE=/tmp/minillm"
        ) from None


def _move_into_place(tmp: Path, folder: Path, recipe: dict) -> None:
    """Rename tmp to folder; a broken folder in the way is renamed aside first, then deleted."""
    for _ in range(3):
        try:
            os.rename(
                tmp, folder
            )  # atomic on POSIX; fails if the folder exists and is not empty
            return
        except OSError:
            pass
        problem = checkpoint_problem(folder, recipe)
        if problem is None:
            return  # another process got a complete copy there first
        aside = folder.with_name(f"{folder.name}.broken-{os.getpid()}-{time.monotonic_ns()}")
        try:
            os.rename(folder, aside)
        except FileNotFoundError:
            continue  # another process moved it already: try again
        except OSError as e:
            raise OSError(
                f"the cached checkpoint {folder} is broken ({problem}) and cannot be replaced "
                f"({e.strerror or e}); delete it with: rm -rf '{folder}'"
            ) from None
        shutil.rmtree(aside, ignore_errors=True) if aside.is_dir() else aside.unlink(
            missing_ok=True
        )
    raise OSError(
        f"could not put a fresh checkpoint at {folder}; delete it with: rm -rf '{folder}' and "
        "run again"
    )


def _remove_leftovers(folder: Path, age_s: float = 3600.0) -> None:
    """Delete temporary or broken copies of `folder` older than an hour (a run killed while
    generating)."""
    now = time.time()
    for old in [
        *folder.parent.glob(f"{folder.name}.tmp-*"),
        *folder.parent.glob(f"{folder.name}.broken-*"),
    ]:
        try:
            if now - old.stat().st_mtime > age_s:
                shutil.rmtree(old) if old.is_dir() else old.unlink()
        except OSError:
            pass  # another process removed it first, or it is not ours to remove


def checkpoint_problem(
    folder: Path | str, recipe: dict | None = None, full: bool = False
) -> str | None:
    """What is wrong with a generated checkpoint folder, or None when it is whole.

    Checks every file against the manifest written with it (size always; SHA-256 with full=True,
    as `doctor` does), that the weights file is whole, and, when given, that it was generated
    from `recipe` (see `_recipe`: the config, seed and tokenizer choice).
    """
    from minillm.weights import check_safetensors_file

    folder = Path(folder)
    if not folder.is_dir():
        return "not a folder"
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        files = manifest["files"]
    except FileNotFoundError:
        return f"no {MANIFEST}: written by an older minillm, or generation was interrupted"
    except (ValueError, KeyError, TypeError):
        return f"{MANIFEST} is unreadable"
    if recipe is not None and manifest.get("recipe") != recipe:
        return "generated from a different config or seed"
    for name, entry in files.items():
        f = folder / name
        if not f.is_file():
            return f"{name} is missing"
        if f.stat().st_size != entry["bytes"]:
            return f"{name} has {f.stat().st_size:,} bytes, expected {entry['bytes']:,}"
        if full and _sha256(f) != entry["sha256"]:
            return f"{name} has changed since it was generated (its SHA-256 differs)"
    try:
        check_safetensors_file(folder / "model.safetensors")
    except (OSError, ValueError) as e:
        return str(e)
    return None


def _sha256(file: Path) -> str:
    h = hashlib.sha256()
    with open(file, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
