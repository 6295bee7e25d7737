"""EOS ids and default sampling from a checkpoint: the same stopping point as transformers'
generate.

Qwen3 and many Hugging Face models list several end-of-sequence ids (`"eos_token_id": [151645,
151643]`), and generation_config.json, when present, is what transformers' generate reads. For
each layout below the engine must stop exactly where transformers' generate stops, on the same
folder.
"""

import json
import shutil
import warnings

import pytest
import torch

from minillm.engine import LLMEngine
from minillm.generation_config import read_generation_config
from minillm.kv_cache import generate
from minillm.model import Transformer
from minillm.sampling import SamplingParams

PROMPT = [11, 22, 33, 44]
N = 12


@pytest.fixture(scope="module")
def base(tiny_checkpoint):
    return tiny_checkpoint(seed=7)


@pytest.fixture(scope="module")
def free_run(base):
    """The greedy continuation with no EOS at all, and two tokens that first appear at steps 3
    and 6."""
    tokens = generate(Transformer.from_pretrained(base), PROMPT, N)
    firsts = [i for i, t in enumerate(tokens) if t not in tokens[:i]]
    early, late = next(i for i in firsts if i >= 3), next(i for i in firsts if i >= 6)
    unused = next(t for t in range(512) if t not in tokens)
    return tokens, early, late, unused


def layout(base, tmp_path, config_eos, generation_eos):
    """A copy of the checkpoint with these eos_token_id values (None: key absent; "no file": no
    generation_config)."""
    folder = shutil.copytree(base, tmp_path / "ckpt")
    c = json.loads((folder / "config.json").read_text())
    c.pop("eos_token_id", None)
    if config_eos is not None:
        c["eos_token_id"] = config_eos
    (folder / "config.json").write_text(json.dumps(c))
    if generation_eos == "no file":
        (folder / "generation_config.json").unlink()
    else:
        g = {"bos_token_id": 1, "do_sample": False}
        if generation_eos is not None:
            g["eos_token_id"] = generation_eos
        (folder / "generation_config.json").write_text(json.dumps(g))
    return folder


def hf_generate(folder):
    from transformers import Qwen3ForCausalLM

    hf = Qwen3ForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = hf.generate(
            torch.tensor([PROMPT]), max_new_tokens=N, do_sample=False, pad_token_id=0
        )
    return out[0, len(PROMPT) :].tolist()


# (config.json eos, generation_config.json eos, where generation must stop): ids are filled in
# from free_run
CASES = {
    "list in config.json, no generation_config.json": ("[unused, late]", "no file", "late"),
    "list in config.json, either id ends it": ("[late, early]", "no file", "early"),
    "int in config.json": ("early", "no file", "early"),
    "generation_config.json's list wins over config.json": (
        "unused",
        "[unused, early]",
        "early",
    ),
    "generation_config.json's int wins over config.json's list": (
        "[early, late]",
        "late",
        "late",
    ),
    "generation_config.json without eos: none, config.json's is not read": (
        "[unused, late]",
        None,
        None,
    ),
    "no EOS anywhere": (None, "no file", None),
}


@pytest.mark.parametrize("case", list(CASES))
def test_generation_stops_where_transformers_stops(base, free_run, tmp_path, case):
    tokens, early, late, unused = free_run
    names = {"early": tokens[early], "late": tokens[late], "unused": unused}

    def value(spec):
        if spec is None or spec == "no file":
            return spec
        if spec.startswith("["):
            return [names[n.strip()] for n in spec[1:-1].split(",")]
        return names[spec]

    config_eos, generation_eos, stop = CASES[case]
    folder = layout(base, tmp_path, value(config_eos), value(generation_eos))
    want = tokens[: {"early": early, "late": late, None: N - 1}[stop] + 1]
    assert hf_generate(folder) == want, "the case is built so that transformers stops there"
    for engine in (
        LLMEngine(folder),
        LLMEngine(Transformer.from_pretrained(folder)),
    ):  # a path or a loaded model
        out = engine.generate([PROMPT], SamplingParams(max_tokens=N))[0]
        assert out.token_ids == want, case
        assert out.finish_reason == ("stop" if stop else "length")


def test_ignore_eos_and_an_explicit_empty_list_run_to_max_tokens(base, free_run, tmp_path):
    tokens, early, _, _ = free_run
    folder = layout(base, tmp_path, [tokens[early]], "no file")
    assert (
        LLMEngine(folder)
        .generate([PROMPT], SamplingParams(max_tokens=N, ignore_eos=True))[0]
        .token_ids
        == tokens
    )
    assert (
        LLMEngine(folder, eos_token_id=[])
        .generate([PROMPT], SamplingParams(max_tokens=N))[0]
        .token_ids
        == tokens
    )
    override = LLMEngine(folder, eos_token_id=tokens[3]).generate(
        [PROMPT], SamplingParams(max_tokens=N)
    )[0]
    assert override.token_ids == tokens[: tokens.index(tokens[3]) + 1]


def test_qwen3_real_generation_config_gives_vllm_style_defaults(base, tmp_path):
    """Qwen3-0.6B's own generation_config.json: both EOS ids, and its recommended sampling as
    the default."""
    folder = shutil.copytree(base, tmp_path / "ckpt")
    (folder / "generation_config.json").write_text(
        json.dumps(
            {
                "bos_token_id": 151643,
                "do_sample": True,
                "eos_token_id": [151645, 151643],
                "pad_token_id": 151643,
                "temperature": 0.6,
                "top_k": 20,
                "top_p": 0.95,
                "transformers_version": "4.51.0",
            }
        )
    )
    g = read_generation_config(folder)
    assert g.eos_token_ids == (151645, 151643)
    assert g.sampling_defaults == dict(temperature=0.6, top_k=20, top_p=0.95)
    engine = LLMEngine(folder)
    assert engine.get_default_sampling_params() == SamplingParams(
        temperature=0.6, top_k=20, top_p=0.95
    )
    assert engine.eos_token_ids == frozenset(), (
        "ids beyond this small vocabulary can never be produced"
    )


def test_default_params_are_used_only_when_a_request_brings_none(base, tmp_path):
    folder = shutil.copytree(base, tmp_path / "ckpt")
    (folder / "generation_config.json").write_text(
        json.dumps({"max_new_tokens": 3, "temperature": 0.0})
    )
    engine = LLMEngine(folder)
    assert len(engine.generate([PROMPT])[0].token_ids) == 3  # max_new_tokens became max_tokens
    assert len(engine.generate([PROMPT], SamplingParams(max_tokens=5))[0].token_ids) == 5


@pytest.mark.parametrize(
    "content, message",
    [
        (
            {"eos_token_id": "2"},
            'eos_token_id in .*generation_config.json is a string "2": expected a token id',
        ),
        (
            {"eos_token_id": [1, -1]},
            r"eos_token_id in .*generation_config.json is a list \[1, -1\]: expected a token "
            r"id",
        ),
        (
            {"eos_token_id": []},
            r"eos_token_id in .*generation_config.json is a list \[\]: expected a token id",
        ),
        (
            {"temperature": -1},
            "temperature in .*generation_config.json is -1: expected a finite number >= 0",
        ),
        (
            {"top_p": 0},
            "top_p in .*generation_config.json is 0: expected a finite number > 0 and <= 1",
        ),
        ({"top_k": "20"}, "top_k in .*generation_config.json is '20': expected an int >= 0"),
        (
            {"max_new_tokens": 0},
            "max_new_tokens in .*generation_config.json is 0: expected an int >= 1",
        ),
        ([1, 2], r"generation_config.json holds a list \[1, 2\]: expected a JSON object"),
        (None, "generation_config.json holds null: expected a JSON object"),
    ],
)
def test_malformed_generation_config_is_named(base, tmp_path, content, message):
    folder = shutil.copytree(base, tmp_path / "ckpt")
    (folder / "generation_config.json").write_text(json.dumps(content))
    with pytest.raises(ValueError, match=message):
        Transformer.from_pretrained(folder)


def test_malformed_eos_in_config_json_is_named(base, tmp_path):
    folder = layout(base, tmp_path, [2, "x"], "no file")
    with pytest.raises(
        ValueError,
        match=r"eos_token_id in .*config.json is a list \[2, \"x\"\]: expected a token id",
    ):
        LLMEngine(folder)


def test_settings_minillm_does_not_implement_are_reported(base, tmp_path):
    folder = shutil.copytree(base, tmp_path / "ckpt")
    (folder / "generation_config.json").write_text(
        json.dumps({"repetition_penalty": 1.1, "min_p": 0.0})
    )
    with pytest.warns(
        UserWarning, match="repetition_penalty=1.1, which minillm does not implement"
    ):
        read_generation_config(folder)
