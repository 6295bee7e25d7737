"""triton_runtime.py — whether triton is here, and where kernels defined now will run.

Triton decides between compiling (CUDA) and its interpreter (CPU) when a kernel is defined, so
every kernel module calls `load_triton()` before its `@triton.jit`; see the package's docstring.
"""

from __future__ import annotations

import importlib.util
import os

H100_SMS = 132  # streaming multiprocessors of an H100 SXM
INSTALL_HINT = "pip install -e '.[kernels]'  (installs triton==3.9.0; `make test` does this)"


def triton_available() -> bool:
    """True when triton can be imported (it is not imported here)."""
    return importlib.util.find_spec("triton") is not None


def choose_interpreter() -> None:
    """Set TRITON_INTERPRET=1 on a machine without CUDA, when it is unset and triton is
    installed. Called when minillm is imported: the choice must come before triton's first
    import, and torch imports triton on its own (torch._dynamo does, e.g. when a model is built
    on the meta device). At that import triton defines its library of @triton.jit helpers
    (tl.cdiv, the reductions) compiled or interpreted, by the variable then, and a kernel
    interpreted later cannot call a compiled helper."""
    if "TRITON_INTERPRET" in os.environ or not triton_available():
        return
    import torch

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"  # CPU tensors, numpy execution


def load_triton():
    """Import triton, first choosing the interpreter on a machine without CUDA; a clear error if
    it is missing, or if triton was imported before that choice could be made."""
    if not triton_available():
        raise ImportError(
            "the Triton attention backend needs the triton package, which is not installed: "
            f"{INSTALL_HINT}"
        )
    choose_interpreter()
    import triton
    from triton.language import standard

    if interpreting() and type(standard.cdiv).__name__ != "InterpretedFunction":
        raise ImportError(
            "triton was imported before TRITON_INTERPRET=1 was set (torch imports it, e.g. "
            "through torch.compile), so its own helpers are compiled and an interpreted kernel "
            "cannot call them: import minillm before anything else uses torch, or start Python "
            "with TRITON_INTERPRET=1"
        )
    return triton


def interpreting() -> bool:
    """Whether kernels defined now run in Triton's interpreter (TRITON_INTERPRET set to a true
    value)."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def multiprocessors(device) -> int:
    """Streaming multiprocessors of a CUDA device; for the interpreter, an H100 SXM's, so that
    decisions made from a grid's size are the ones that GPU would get."""
    import torch

    device = torch.device(device)
    if device.type != "cuda":
        return H100_SMS
    return torch.cuda.get_device_properties(device).multi_processor_count
