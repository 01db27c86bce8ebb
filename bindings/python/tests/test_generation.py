"""Greedy generation through the bindings equals the CLI's; streams concatenate to the whole
answer; structured output, tools and log-probabilities arrive in the OpenAI shapes."""

import json

import jsonschema

from conftest import run_cli

PROMPT = "def fibonacci(n):"
QUESTION = "Write a Python function that reverses a string."


def test_greedy_completion_equals_cli_raw(llm, ferrox_bin, model_path):
    out = llm(PROMPT, max_tokens=40, temperature=0)
    cli = run_cli(ferrox_bin, "run", "-m", model_path, "--raw", "--temp", "0", "-n", "40", PROMPT)
    assert out["object"] == "text_completion"
    assert out["choices"][0]["text"] == cli[:-1]  # the CLI ends its output with a newline
    assert out["usage"]["completion_tokens"] == 40
    assert out["choices"][0]["finish_reason"] == "length"


def test_greedy_chat_equals_cli(llm, ferrox_bin, model_path):
    msgs = [{"role": "user", "content": QUESTION}]
    out = llm.create_chat_completion(messages=msgs, temperature=0, max_tokens=48)
    cli = run_cli(ferrox_bin, "run", "-m", model_path, "--temp", "0", "-n", "48", QUESTION)
    assert out["object"] == "chat.completion"
    msg = out["choices"][0]["message"]
    assert msg["role"] == "assistant"
    assert msg["content"] == cli[:-1]


def test_streams_concatenate_to_the_whole_answer(llm):
    whole = llm(PROMPT, max_tokens=24, temperature=0)["choices"][0]["text"]
    chunks = list(llm(PROMPT, max_tokens=24, temperature=0, stream=True))
    assert len(chunks) > 2
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole

    msgs = [{"role": "user", "content": QUESTION}]
    whole = llm.create_chat_completion(messages=msgs, temperature=0, max_tokens=24)
    chunks = list(llm.create_chat_completion(messages=msgs, temperature=0, max_tokens=24, stream=True))
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == whole["choices"][0]["message"]["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_json_schema_answer_validates(llm):
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    out = llm.create_chat_completion(
        messages=[{"role": "user", "content": "Invent a person; answer in JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": schema}},
        temperature=0,
        max_tokens=80,
    )
    jsonschema.validate(json.loads(out["choices"][0]["message"]["content"]), schema)
    # llama-cpp-python's own form: json_object with a schema.
    out = llm.create_chat_completion(
        messages=[{"role": "user", "content": "Invent a person; answer in JSON."}],
        response_format={"type": "json_object", "schema": schema},
        max_tokens=80,
    )
    jsonschema.validate(json.loads(out["choices"][0]["message"]["content"]), schema)


def test_tool_call(llm):
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The weather in a city",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
        }
    ]
    out = llm.create_chat_completion(
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=tools,
        tool_choice="required",
        temperature=0,
        max_tokens=64,
    )
    call = out["choices"][0]["message"]["tool_calls"][0]
    assert call["function"]["name"] == "get_weather"
    assert "city" in json.loads(call["function"]["arguments"])
    assert out["choices"][0]["finish_reason"] == "tool_calls"


def test_logprobs(llm):
    out = llm.create_chat_completion(
        messages=[{"role": "user", "content": "Say hi."}],
        temperature=0,
        max_tokens=5,
        logprobs=True,
        top_logprobs=3,
    )
    content = out["choices"][0]["logprobs"]["content"]
    assert len(content) == out["usage"]["completion_tokens"]
    for t in content:
        assert t["logprob"] <= 0 and len(t["top_logprobs"]) == 3
        # Greedy: the chosen token is the most likely one.
        assert t["logprob"] >= max(a["logprob"] for a in t["top_logprobs"]) - 1e-5
    out = llm(PROMPT, max_tokens=4, temperature=0, logprobs=2)
    lp = out["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == 4


def test_speculation_counters_on_the_result(llm):
    code = "\n".join(f"    x{i} = compute(x{i - 1}, {i})" for i in range(1, 30))
    prompt = f"Repeat this code exactly:\n```python\n{code}\n```"
    out = llm.create_chat_completion(
        messages=[{"role": "user", "content": prompt}], temperature=0, max_tokens=120
    )
    spec = out["speculation"]
    assert spec["drafted"] > 0 and 0 < spec["accepted"] <= spec["drafted"]
    assert llm.speculation == spec


def test_seeded_sampling_is_reproducible(llm):
    a = llm(PROMPT, max_tokens=16, seed=11)["choices"][0]["text"]
    b = llm(PROMPT, max_tokens=16, seed=11)["choices"][0]["text"]
    assert a == b


def test_echo_and_stop(llm):
    out = llm("Q: Name the planets in the solar system? A: ", max_tokens=32, stop=["Q:", "\n"], echo=True)
    text = out["choices"][0]["text"]
    assert text.startswith("Q: Name the planets in the solar system? A: ")
    assert "\n" not in text
