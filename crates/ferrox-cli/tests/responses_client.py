"""Drives a running `ferrox serve` through `/v1/responses` with the official OpenAI client.

Usage: responses_client.py BASE_URL MODEL PROMPT MAX_TOKENS
Prints one JSON object: the chat-completions greedy text and the Responses API's for the same
conversation (whole, raw stream, the SDK's stream helper), a function-tool round trip through
previous_response_id, a json_schema answer checked with jsonschema, and the refusals.
"""
import json
import sys

import jsonschema
import openai
from openai import OpenAI

base, model, prompt, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
client = OpenAI(base_url=base, api_key="test-key", max_retries=0, timeout=600)
system = "You are a poet."
out = {}

msgs = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
r = client.chat.completions.create(model=model, messages=msgs, max_tokens=n, temperature=0)
out["chat"] = r.choices[0].message.content

common = dict(model=model, instructions=system, max_output_tokens=n, temperature=0)
r = client.responses.create(input=prompt, **common)
out["whole"] = r.output_text
out["whole_status"] = [r.status, r.incomplete_details.reason if r.incomplete_details else None]
out["usage"] = [r.usage.input_tokens, r.usage.output_tokens, r.usage.total_tokens,
                r.usage.input_tokens_details.cached_tokens]
out["retrieved"] = client.responses.retrieve(r.id).output_text

# The same conversation as items, streamed raw.
items = [{"role": "user", "content": [{"type": "input_text", "text": prompt}]}]
deltas, kinds, seqs = [], [], []
for ev in client.responses.create(input=items, stream=True, **common):
    kinds.append(ev.type)
    seqs.append(ev.sequence_number)
    if ev.type == "response.output_text.delta":
        deltas.append(ev.delta)
out["stream"] = "".join(deltas)
out["stream_first_last"] = [kinds[0], kinds[-1]]
out["stream_seq_ok"] = seqs == list(range(len(seqs)))

# The SDK's stream helper wants `response.completed`: an answer that ends on its own.
short = dict(model=model, input="Reply with the single word yes.", temperature=0,
             max_output_tokens=20)
with client.responses.stream(**short) as s:
    helper_deltas = [ev.delta for ev in s if ev.type == "response.output_text.delta"]
    final = s.get_final_response()
    out["stream_helper"] = [final.status, final.output_text, "".join(helper_deltas)]
out["short_whole"] = client.responses.create(**short).output_text

# A function-tool round trip.
tools = [{
    "type": "function",
    "name": "get_weather",
    "description": "The current weather of a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"], "additionalProperties": False},
    "strict": True,
}]
r = client.responses.create(model=model, input="What is the weather in Paris?", tools=tools,
                            tool_choice="required", temperature=0, max_output_tokens=60)
calls = [o for o in r.output if o.type == "function_call"]
out["call"] = [calls[0].name, json.loads(calls[0].arguments)] if calls else None
if calls:
    r2 = client.responses.create(
        model=model, previous_response_id=r.id, tools=tools, temperature=0, max_output_tokens=40,
        input=[{"type": "function_call_output", "call_id": calls[0].call_id,
                "output": json.dumps({"temperature_c": 21, "sky": "sunny"})}])
    out["after_call"] = r2.output_text
    out["after_call_input_tokens"] = [r.usage.input_tokens, r2.usage.input_tokens]

# Structured output.
schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}
r = client.responses.create(
    model=model, input="Invent a person. Answer in JSON.", temperature=0, max_output_tokens=60,
    text={"format": {"type": "json_schema", "name": "person", "schema": schema, "strict": True}})
person = json.loads(r.output_text)
jsonschema.validate(person, schema)
out["person"] = person

# Refusals.
try:
    client.responses.create(input="hi", extra_body={"frobnicate": 1}, **common)
    out["unknown_field"] = None
except openai.BadRequestError as e:
    out["unknown_field"] = [e.status_code, e.message]
try:
    client.responses.create(input="hi", previous_response_id="resp-missing", **common)
    out["missing_previous"] = None
except openai.NotFoundError as e:
    out["missing_previous"] = [e.status_code, e.message]

print(json.dumps(out))
