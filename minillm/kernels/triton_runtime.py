"""triton_runtime.py — whether triton is here, and where kernels defined now will run.

Triton decides between compiling (CUDA) and its interpreter (CPU) when a kernel is defined, so
every kernel module calls `load_triton()` before its `@triton.jit`; see the package's docstring.
"""

from __future__ import annotations

import importlib.util
import os

INSTALL_HINT = "pip install -e '.[kernels]'  (installs triton==3.9.0; `make test` does this)"


def triton_available() -> bool:
    """True when triton can be imported (it is not imported here)."""
    return importlib.util.find_spec("triton") is not None


def load_triton():
    """Import triton, first choosing the interpreter on a machine without CUDA; a clear error if
    it is missing."""
    if not triton_available():
        raise ImportError(
            "the Triton attention backend needs the triton package, which is not installed: "
            f"{INSTALL_HINT}"
        )
    if "TRITON_INTERPRET" not in os.environ:
        import torch

        if not torch.cuda.is_available():
            os.environ["TRITON_INTERPRET"] = (
                "1"  # before any @triton.jit runs: CPU tensors, numpy execution
            )
    import triton

    return triton


def interpreting() -> bool:
    """Whether kernels defined now run in Triton's interpreter (TRITON_INTERPRET set to a true
    value)."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")
