"""cli.py — `python -m minillm {demo,doctor,check,bench}`."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys

DEMO_PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village,"]


def demo(args) -> int:
    import torch

    from minillm.checkpoints import default_model_path, load_tokenizer
    from minillm.kv_cache import generate
    from minillm.model import Transformer
    from minillm.reference import hf_logits

    torch.manual_seed(0)
    path = default_model_path()
    model = Transformer.from_pretrained(path)
    tok = load_tokenizer(path)
    cfg = model.cfg
    print(f"model: {path}")
    print(f"       {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, {cfg.num_attention_heads} query heads / "
          f"{cfg.num_key_value_heads} KV heads of {cfg.hd}, vocab {cfg.vocab_size:,}")
    if not os.environ.get("MINILLM_MODEL"):
        print("       (the built-in tiny model has random weights, so its text is noise: what matters is that\n"
              "        minillm and transformers agree. MINILLM_MODEL=/path/to/Qwen3-0.6B gives real text.)")
    worst = 0.0
    for prompt in DEMO_PROMPTS:
        ids = tok(prompt).input_ids
        new = generate(model, ids, args.max_new_tokens, eos=tok.eos_token_id)
        print(f"\n>>> {prompt}\n{tok.decode(new)!r}")
        ours = model(torch.tensor([ids + new]))[0]
        worst = max(worst, (ours - hf_logits(path, ids + new)).abs().max().item())
    ok = worst < 1e-4
    print(f"\nparity vs transformers Qwen3ForCausalLM (fp32, every position of all {len(DEMO_PROMPTS)} sequences): "
          f"max |logit difference| = {worst:.2e}  ({'OK' if ok else 'FAIL'}: threshold 1e-4)")
    from minillm.checks import mixed_batch_check, print_check_table

    print("\nmixed batch: one ModelRunner.forward with a prefill, a decode and a chunked prefill")
    rows = mixed_batch_check(path, device="cpu", dtype=torch.float32)
    ok = print_check_table(rows) and ok
    return 0 if ok else 1


def doctor(args) -> int:
    problems = []
    print(f"python       {platform.python_version()} ({sys.executable})")
    try:
        import torch

        cuda = torch.cuda.is_available()
        mps = getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
        print(f"torch        {torch.__version__}; CUDA {'yes: ' + torch.cuda.get_device_name(0) if cuda else 'no'}; "
              f"MPS {'yes' if mps else 'no'}; {torch.get_num_threads()} CPU threads")
    except ImportError:
        problems.append("torch is not installed: pip install torch==2.13.0 (CPU) or a CUDA build from pytorch.org")
    try:
        import transformers

        print(f"transformers {transformers.__version__}")
    except ImportError:
        problems.append("transformers is not installed: pip install -e .")
    try:
        from minillm.checkpoints import default_model_path, tokenizer_files_dir

        print(f"tokenizer    files in {tokenizer_files_dir()}")
        path = default_model_path()
        print(f"model        {path}")
        from minillm.model import ModelConfig, read_config

        cfg = ModelConfig.from_hf(read_config(path))
        print(f"             {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, heads {cfg.num_attention_heads}/"
              f"{cfg.num_key_value_heads} KV, head_dim {cfg.hd}, vocab {cfg.vocab_size:,}, "
              f"{'tied' if cfg.tie_word_embeddings else 'untied'} head, rope_theta {cfg.rope_theta:g}")
        if not (path / "model.safetensors").exists() and not (path / "model.safetensors.index.json").exists():
            problems.append(f"{path} has no model.safetensors (or sharded index): download the weights into it")
        from minillm.checkpoints import load_tokenizer

        try:
            tok = load_tokenizer(path)
            ids = tok("Hello, world").input_ids
            print(f"             tokenizer OK: 'Hello, world' -> {ids}")
        except Exception as e:
            problems.append(f"the tokenizer does not load: {type(e).__name__}: {e}")
    except Exception as e:  # doctor reports, it does not crash
        problems.append(f"{type(e).__name__}: {e}")
    import importlib.util

    for module, extra in [("pytest", "dev"), ("nbval", "dev"), ("hypothesis", "dev"), ("mkdocs", "book")]:
        if importlib.util.find_spec(module) is None:
            problems.append(f"{module} is not installed (make test needs it): pip install -e '.[{extra}]'")
    for p in problems:
        print("PROBLEM     ", p)
    print("all good" if not problems else f"{len(problems)} problem(s) found")
    return 1 if problems else 0


def check(args) -> int:
    import torch

    from minillm.checkpoints import default_model_path
    from minillm.checks import mixed_batch_check, print_check_table

    if args.device == "cuda" and not torch.cuda.is_available():
        print("--device cuda: torch sees no CUDA device here (torch.cuda.is_available() is False)")
        return 2
    dtypes = args.dtype.split(",") if args.dtype else (["float32", "bfloat16"] if args.device == "cuda" else ["float32"])
    unknown = [name for name in dtypes if name not in ("float32", "bfloat16", "float16")]
    if unknown:
        print(f"--dtype {unknown[0]!r}: expected float32, bfloat16 or float16 (comma-separated)")
        return 2
    ok = True
    for name in dtypes:
        print(f"\nmixed-batch parity on {args.device}, {name}")
        rows = mixed_batch_check(default_model_path(), device=args.device, dtype=getattr(torch, name))
        ok = print_check_table(rows) and ok
        if args.json:
            print(json.dumps(rows))
    return 0 if ok else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m minillm", description="the minillm book's engine")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="generate with the default model and check parity with transformers")
    p.add_argument("--max-new-tokens", type=int, default=20)
    p.set_defaults(func=demo)
    sub.add_parser("doctor", help="what this machine has and what is missing").set_defaults(func=doctor)
    p = sub.add_parser("check", help="chapter 5's mixed-batch parity on a device")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--dtype", default=None, help="comma-separated torch dtypes (default: float32; on cuda also bfloat16)")
    p.add_argument("--json", action="store_true", help="also print the rows as JSON")
    p.set_defaults(func=check)
    sub.add_parser("bench", help="throughput vs concurrency (see benchmarks/; `bench --help` for its options)")
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:  # bench parses its own options (argparse.REMAINDER drops leading "--flags")
        from minillm.bench import main as bench_main

        return bench_main(argv[1:])
    args = parser.parse_args(argv)
    return args.func(args)
