"""Every failure is a Python exception with the message; nothing aborts the interpreter."""

import struct

import pytest

import ferrox


def gguf_header(n_tensors, n_kv):
    return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not a gguf file at all",
        gguf_header(1 << 60, 1 << 60),
        # A key whose length claims more bytes than the file holds.
        gguf_header(0, 1) + struct.pack("<Q", 1 << 40) + b"abc",
        # A tensor with absurd dimensions and an unknown type.
        gguf_header(1, 0) + struct.pack("<Q", 1) + b"w" + struct.pack("<IQQ", 2, 1 << 40, 1 << 40) + struct.pack("<IQ", 999, 0),
    ],
)
def test_hostile_gguf_raises_value_error(tmp_path, data):
    path = tmp_path / "hostile.gguf"
    path.write_bytes(data)
    with pytest.raises(ValueError):
        ferrox.Llama(str(path), verbose=False)


def test_truncated_model_raises_value_error(tmp_path, model_path):
    path = tmp_path / "truncated.gguf"
    with open(model_path, "rb") as f:
        path.write_bytes(f.read(3 << 20))
    with pytest.raises(ValueError, match="truncated|loading"):
        ferrox.Llama(str(path), verbose=False)


def test_unknown_model_name_raises_value_error():
    with pytest.raises(ValueError):
        ferrox.Llama("no-such-model:7b", verbose=False)


def test_options_checked():
    with pytest.raises(TypeError, match="n_frobnicate"):
        ferrox.Llama("x", n_frobnicate=1)
    with pytest.raises(ValueError, match="cache_type_k"):
        ferrox.Llama(__file__, cache_type_k="q3_x", verbose=False)


def test_request_errors_name_the_field(llm):
    with pytest.raises(ValueError, match="mirostat_mode"):
        llm("hi", mirostat_mode=2)
    with pytest.raises(ValueError, match="typical_p"):
        llm.create_chat_completion(messages=[{"role": "user", "content": "hi"}], typical_p=0.5)
    with pytest.raises(ValueError, match="temperature"):
        llm("hi", temperature=7)
    with pytest.raises(ValueError, match="context"):
        llm("hi", max_tokens=10**6)
    with pytest.raises(ValueError):
        llm.create_chat_completion(messages=[{"role": "wizard"}])
    with pytest.raises(ValueError, match="normalize"):
        llm.embed("hi", normalize=False)
    with pytest.raises(ValueError, match="chat_format"):
        ferrox.Llama(llm.model_path, chat_format="llama-2", verbose=False)
    # The model still answers after refused requests.
    assert llm("def f(x):", max_tokens=2, temperature=0)["usage"]["completion_tokens"] == 2
