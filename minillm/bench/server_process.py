"""bench/server_process.py — `python -m minillm serve` as a child process on a free loopback
port.

    with LaunchedServer(model_path) as server:      # waits for /health
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="none")
        print([m.id for m in client.models.list()])
                                                     # stopped here, whatever happened

bench-serve's --launch, the serving tests and chapter 8 start their servers this way, so every
server they start is stopped, and only 127.0.0.1 is ever used.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LaunchedServer:
    """`python -m minillm serve` as a child process on a free loopback port; stopped on exit,
    whatever happens."""

    def __init__(
        self, model: Path | None, max_num_seqs: int = 16, api_key: str | None = None, extra=()
    ):
        self.port = free_port()
        cmd = [
            sys.executable,
            "-m",
            "minillm",
            "serve",
            "--port",
            str(self.port),
            "--max-num-seqs",
            str(max_num_seqs),
        ]
        cmd += (["--model", str(model)] if model is not None else []) + (
            ["--api-key", api_key] if api_key else []
        )
        # the log goes to a file, not a pipe: a pipe nobody reads would stall the server once it
        # fills
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            cmd + list(extra), stdout=self.log, stderr=subprocess.STDOUT, text=True
        )
        self.url = f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 120.0) -> LaunchedServer:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"the server exited with {self.proc.returncode}: {self.output()}"
                )
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the server did not answer /health within {timeout:.0f} s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def output(self) -> str:
        """What the server printed so far."""
        self.log.seek(0)
        return self.log.read()

    def __enter__(self):
        return self.wait_ready()

    def __exit__(self, *exc):
        self.stop()
