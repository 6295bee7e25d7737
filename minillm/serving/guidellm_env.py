"""serving/guidellm_env.py — guidellm, vLLM's load generator, in a folder of its own, and one
bounded run of it against a server.

    python -m minillm.serving.guidellm_env          # install it once (a few seconds, from PyPI)
    report = run_guidellm(server.url, model_folder, num_requests=4, out=tmp / "r.json")
    report["benchmarks"][0]["scheduler_metrics"]["requests_made"]   # {'successful': 4, ...}

guidellm 0.8.1 pins `click ~= 8.4` (the book's venv has 8.5) and brings uvloop and httptools,
which uvicorn picks up by itself when they are importable: installed beside the book, it would
change the event loop and HTTP parser that `python -m minillm serve` runs on. So it lives in its
own folder in minillm's cache: the packages it needs that the venv lacks (or has at another
version), as pip resolves them against the venv, installed there without their dependencies.
A run puts that folder first on guidellm's PYTHONPATH; torch, transformers and the rest come
from the venv, and nothing in the venv changes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from minillm.checkpoints import cache_dir

GUIDELLM_VERSION = "0.8.1"


def guidellm_folder() -> Path:
    """Where guidellm's own packages live: one folder per guidellm version and Python."""
    py = f"py{sys.version_info.major}{sys.version_info.minor}"
    return cache_dir() / f"guidellm-{GUIDELLM_VERSION}-{py}"


def _pip(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if run.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({run.returncode}):\n{run.stderr[-2000:]}")
    return run


def ensure_guidellm() -> Path:
    """Install guidellm into its folder unless it is there; returns the folder."""
    folder = guidellm_folder()
    if (folder / "guidellm" / "__init__.py").exists():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    try:
        report = tmp / "report.json"
        # what pip would add to (or change in) the venv: exactly these go into the folder
        _pip(
            "install",
            "--dry-run",
            "--quiet",
            "--report",
            str(report),
            f"guidellm=={GUIDELLM_VERSION}",
        )
        wanted = [
            f"{i['metadata']['name']}=={i['metadata']['version']}"
            for i in json.loads(report.read_text())["install"]
        ]
        target = tmp / "site"
        _pip("install", "--quiet", "--no-deps", "--target", str(target), *wanted)
        (target / "minillm-installed.txt").write_text("\n".join(wanted) + "\n")
        target.rename(folder)  # atomic: a half-installed folder is never taken for a whole one
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def guidellm_command(
    url: str,
    model_folder: Path,
    out: Path,
    num_requests: int = 4,
    prompt_tokens: int = 32,
    output_tokens: int = 16,
    profile: str = "concurrent,streams=2",
    max_seconds: int = 120,
) -> list[str]:
    """guidellm's `run` with its default request format (streamed /v1/chat/completions):
    synthetic prompts of `prompt_tokens` tokens (counted with the server's tokenizer, read from
    `model_folder`), `output_tokens` each, and two limits so it stops by itself."""
    return [
        sys.executable,
        "-m",
        "guidellm",
        "run",
        "--backend",
        f"kind=openai_http,target={url}",
        "--profile",
        f"kind={profile}",
        "--constraint",
        f"kind=max_requests,count={num_requests}",
        "--constraint",
        f"kind=max_duration,seconds={max_seconds}",
        "--data",
        f"kind=synthetic_text,prompt_tokens={prompt_tokens},output_tokens={output_tokens}",
        "--tokenizer",
        f"kind=huggingface_auto,model={model_folder}",
        "--output",
        f"kind=json,path={out}",
        "--disable-progress",
    ]


def run_guidellm(url: str, model_folder: Path, out: Path, timeout: float = 600, **kw) -> dict:
    """Run guidellm against the server at `url`; returns its JSON report (raises with guidellm's
    own output if it fails)."""
    folder = ensure_guidellm()
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(folder), env.get("PYTHONPATH", "")) if p
    )
    cmd = guidellm_command(url, Path(model_folder), Path(out), **kw)
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if run.returncode != 0 or not Path(out).exists():
        raise RuntimeError(
            f"guidellm exited with {run.returncode}:\n{run.stdout[-3000:]}{run.stderr[-3000:]}"
        )
    return json.loads(Path(out).read_text())


if __name__ == "__main__":
    print(f"guidellm {GUIDELLM_VERSION} in {ensure_guidellm()}")
