"""Tool calling against a running `ferrox serve`, with the official OpenAI Python client.

Usage: openai_tools.py BASE_URL MODEL
Prints one JSON object: for each case, the calls the model made (arguments validated against
the tool's JSON schema with `jsonschema`) and the final answer after the tool's result.
"""
import json
import sys

import jsonschema
from openai import OpenAI

base, model = sys.argv[1], sys.argv[2]
client = OpenAI(base_url=base, api_key="test-key", max_retries=0, timeout=600)

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two numbers",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
        },
    },
}
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, ADD)}


def checked(calls):
    """The calls as [name, arguments], each validated against its tool's schema."""
    out = []
    for c in calls:
        args = json.loads(c.function.arguments)
        jsonschema.validate(args, SCHEMAS[c.function.name])
        out.append([c.function.name, args])
    return out


out = {}
question = [{"role": "user", "content": "What's the weather like in Paris today?"}]

r = client.chat.completions.create(model=model, messages=question, tools=[WEATHER], temperature=0,
                                   max_tokens=128)
msg = r.choices[0].message
out["finish"] = r.choices[0].finish_reason
out["calls"] = checked(msg.tool_calls or [])

# The tool's result goes back; the model answers (tools still shown, calls no longer wanted).
history = question + [
    {"role": "assistant", "content": None,
     "tool_calls": [c.model_dump() for c in (msg.tool_calls or [])]},
] + [
    {"role": "tool", "tool_call_id": c.id, "content": json.dumps({"temperature_c": 18, "sky": "cloudy"})}
    for c in (msg.tool_calls or [])
]
r = client.chat.completions.create(model=model, messages=history, tools=[WEATHER],
                                   tool_choice="none", temperature=0, max_tokens=64)
out["answer"] = r.choices[0].message.content
out["answer_finish"] = r.choices[0].finish_reason

# Streamed: content deltas stay free of call markers, the call arrives as tool_calls deltas.
content, calls, finish = [], {}, None
for chunk in client.chat.completions.create(model=model, messages=question, tools=[WEATHER],
                                            temperature=0, max_tokens=128, stream=True):
    for ch in chunk.choices:
        if ch.delta.content:
            content.append(ch.delta.content)
        for tc in ch.delta.tool_calls or []:
            entry = calls.setdefault(tc.index, {"name": "", "arguments": ""})
            entry["name"] += tc.function.name or ""
            entry["arguments"] += tc.function.arguments or ""
        if ch.finish_reason:
            finish = ch.finish_reason
out["stream_content"] = "".join(content)
out["stream_calls"] = [[c["name"], json.loads(c["arguments"])] for _, c in sorted(calls.items())]
out["stream_finish"] = finish
# tool_choice "required": a call every time, whatever the prompt (grammar-constrained).
PROMPTS = [
    "Tell me a joke.", "What is 17 plus 25?", "Weather in Oslo?", "Write a haiku about rain.",
    "How warm is it in Cairo in fahrenheit?", "Sum 3.5 and 4.25.", "Who are you?",
    "Is it raining in London?", "Add minus two and seven.", "Explain recursion briefly.",
    "Temperature in Tokyo please.", "What is 100 + 1?", "Say hello.", "Forecast for Lima.",
    "Compute 0.1 + 0.2.", "List three colors.", "Weather for Nairobi in celsius.",
    "What's 12 and 30 together?", "Translate 'cat' to French.", "Is Berlin cold today?",
]
required = []
for q in PROMPTS:
    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": q}],
                                       tools=[WEATHER, ADD], tool_choice="required",
                                       temperature=0, max_tokens=96)
    required.append([r.choices[0].finish_reason, checked(r.choices[0].message.tool_calls or [])])
out["required"] = required
r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Say hello."}],
                                   tools=[WEATHER, ADD],
                                   tool_choice={"type": "function", "function": {"name": "add"}},
                                   temperature=0, max_tokens=96)
out["named"] = [r.choices[0].finish_reason, checked(r.choices[0].message.tool_calls or [])]
print(json.dumps(out))
