"""Tokens, model facts and embeddings."""

import json
import math

from conftest import run_cli

TEXT = "<|im_start|>user\nHello, wörld! 🦀 fn main() {}<|im_end|>"


def cli_ids(ferrox_bin, model_path, *flags):
    return json.loads(run_cli(ferrox_bin, "tokenize", "-m", model_path, "--ids", *flags, TEXT))


def test_tokenize_equals_cli(llm, ferrox_bin, model_path):
    data = TEXT.encode()
    assert llm.tokenize(data, special=True) == cli_ids(ferrox_bin, model_path)
    assert llm.tokenize(data) == cli_ids(ferrox_bin, model_path, "--no-parse-special")
    assert llm.tokenize(data, add_bos=False, special=True) == cli_ids(ferrox_bin, model_path, "--no-bos")
    # Special-token text is one token only when `special`.
    assert len(llm.tokenize(b"<|im_end|>", add_bos=False, special=True)) == 1
    assert len(llm.tokenize(b"<|im_end|>", add_bos=False)) > 1


def test_detokenize_round_trip(llm):
    ids = llm.tokenize(TEXT.encode(), add_bos=False, special=True)
    assert llm.detokenize(ids, special=True) == TEXT.encode()
    assert llm.detokenize(ids) == TEXT.replace("<|im_start|>", "").replace("<|im_end|>", "").encode()
    try:
        llm.detokenize([llm.n_vocab() + 5])
    except ValueError as e:
        assert "outside the vocabulary" in str(e)
    else:
        raise AssertionError("an id outside the vocabulary was accepted")


def test_model_facts(llm):
    assert llm.n_ctx() == 2048
    assert llm.n_vocab() > 150000
    assert llm.metadata["general.architecture"] == "qwen2"
    assert int(llm.metadata["qwen2.context_length"]) >= 32768
    assert llm.token_eos() >= 0


def test_embeddings(llm):
    v = llm.embed("Hello, world!")
    assert isinstance(v, list) and len(v) == 896
    assert abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-3
    out = llm.create_embedding(["Hello, world!", "Goodbye, world!"])
    assert out["object"] == "list" and len(out["data"]) == 2
    assert out["data"][0]["embedding"] == v
    vs, count = llm.embed(["a", "b c"], return_count=True)
    assert len(vs) == 2 and count > 0
