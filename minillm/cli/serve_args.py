"""cli/serve_args.py — the options of `serve` and `bench-serve` (vLLM's names), each checked by
argparse
before any model is loaded; the commands themselves live in serving/server.py and
bench/serve.py."""

from __future__ import annotations

import argparse
import ipaddress
import math

from minillm.cli.args import existing_folder, int_arg, writable_file


def loopback_or_any_host(text: str) -> str:
    """A host to bind: an IP address or "localhost" (names that need DNS are refused)."""
    if text == "localhost":
        return "127.0.0.1"
    try:
        ipaddress.ip_address(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"got {text!r}, expected an IP address such as 127.0.0.1"
        ) from None
    return text


def rate_list(text: str) -> list[float]:
    """Request rates in requests/s, comma-separated; "inf" sends every request at once."""
    try:
        rates = [float(p) for p in text.split(",")]
    except ValueError:
        rates = []
    if not rates or any(not (r > 0) or math.isnan(r) for r in rates):
        raise argparse.ArgumentTypeError(
            f"got {text!r}, expected comma-separated request rates > 0 (or inf)"
        )
    return rates


def base_url(text: str) -> str:
    from urllib.parse import urlparse

    u = urlparse(text)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise argparse.ArgumentTypeError(
            f"got {text!r}, expected a URL such as http://127.0.0.1:8000/v1"
        )
    return text.rstrip("/")


def add_serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        type=existing_folder,
        default=None,
        help="checkpoint folder (default: the book's tiny model, or $MINILLM_MODEL)",
    )
    p.add_argument(
        "--served-model-name",
        default=None,
        help="the name clients ask for (default: the folder's name)",
    )
    p.add_argument(
        "--host",
        type=loopback_or_any_host,
        default="127.0.0.1",
        help="address to bind (default: 127.0.0.1, this machine only)",
    )
    p.add_argument("--port", type=int_arg(min=1, max=65535), default=8000)
    p.add_argument(
        "--api-key",
        default=None,
        help="require 'Authorization: Bearer KEY' (all routes but /health, /metrics, /version)",
    )
    p.add_argument("--max-num-seqs", type=int_arg(min=1), default=16)
    p.add_argument("--max-num-batched-tokens", type=int_arg(min=1), default=512)
    p.add_argument(
        "--enable-prefix-caching",
        action="store_true",
        help="chapter 7's prefix cache (cache_salt works then)",
    )
    p.add_argument(
        "--max-model-len",
        type=int_arg(min=1),
        default=None,
        help="the context a request may use, prompt and output (default: the model's, at most "
        "4096)",
    )
    p.add_argument(
        "--max-unread-tokens",
        type=int_arg(min=1),
        default=1024,
        help="a streaming client this many tokens behind is cut off (finish_reason 'abort')",
    )

    def run(args) -> int:
        from minillm.serving.server import serve

        serve(
            args.model,
            args.host,
            args.port,
            args.api_key,
            args.served_model_name,
            args.max_num_seqs,
            args.max_num_batched_tokens,
            args.enable_prefix_caching,
            max_model_len=args.max_model_len,
            max_unread_tokens=args.max_unread_tokens,
        )
        return 0

    p.set_defaults(func=run)


def add_bench_serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--base-url",
        type=base_url,
        default=None,
        help="a running server, e.g. http://127.0.0.1:8000/v1 (default: --launch one)",
    )
    p.add_argument(
        "--model",
        type=existing_folder,
        default=None,
        help="checkpoint folder: what --launch serves and the offline engine loads "
        "(default: the bench model of `python -m minillm bench`)",
    )
    p.add_argument(
        "--served-model-name",
        default=None,
        help="the model name to request (default: the folder's name)",
    )
    p.add_argument("--api-key", default=None)
    p.add_argument("--num-prompts", type=int_arg(min=1), default=32)
    p.add_argument(
        "--random-input-len", type=int_arg(min=1), default=32, help="prompt tokens per request"
    )
    p.add_argument(
        "--random-output-len",
        type=int_arg(min=1),
        default=32,
        help="new tokens per request (EOS ignored)",
    )
    p.add_argument(
        "--max-concurrency", type=int_arg(min=1), default=8, help="requests in flight at most"
    )
    p.add_argument(
        "--request-rate",
        type=rate_list,
        default=[math.inf],
        help="Poisson arrival rate(s) in requests/s, comma-separated for a sweep (default: "
        "inf)",
    )
    p.add_argument("--seed", type=int_arg(min=0), default=0)
    p.add_argument(
        "--repeats",
        type=int_arg(min=1),
        default=1,
        help="timed rounds per rate, the median reported (offline rounds alternate with the "
        "first rate's)",
    )
    p.add_argument(
        "--no-offline",
        dest="offline",
        action="store_false",
        help="skip the offline engine's run of the same workload",
    )
    p.add_argument("--save", type=writable_file, default=None, help="write the results as JSON")

    def run(args) -> int:
        from minillm.bench.serve import main

        return main(args)

    p.set_defaults(func=run)
