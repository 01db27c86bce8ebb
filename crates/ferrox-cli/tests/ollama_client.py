"""Drives a running `ferrox serve` with the official `ollama` Python client.

Usage: ollama_client.py HOST MODEL PROMPT MAX_TOKENS
Prints one JSON object: greedy texts of chat and generate, streamed and not, the done
reasons and counters, what list / show / ps report, embeddings, a JSON-format answer and
the error an unsupported option gets.
"""
import json
import sys

import ollama

host, model, prompt, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
c = ollama.Client(host=host, timeout=600)
opts = {"temperature": 0, "num_predict": n}
msgs = [{"role": "user", "content": prompt}]
out = {}

r = c.chat(model=model, messages=msgs, options=opts)
out["chat"] = r.message.content
out["chat_done"] = [r.done, r.done_reason, r.prompt_eval_count, r.eval_count]
parts = list(c.chat(model=model, messages=msgs, options=opts, stream=True))
out["chat_stream"] = "".join(p.message.content for p in parts)
out["chat_stream_chunks"] = len(parts)
out["chat_stream_last"] = [parts[-1].done, parts[-1].done_reason, parts[-1].eval_count]

g = c.generate(model=model, prompt=prompt, options=opts)
out["generate"] = g.response
out["generate_done"] = [g.done, g.done_reason]
out["generate_stream"] = "".join(
    p.response for p in c.generate(model=model, prompt=prompt, options=opts, stream=True))
# raw: the prompt as is, no template.
out["generate_raw"] = c.generate(model=model, prompt=prompt, raw=True, options=opts).response

# Multi-turn, with a system message.
turns = [{"role": "system", "content": "You answer in one short sentence."},
         {"role": "user", "content": "What is the capital of France?"},
         {"role": "assistant", "content": "Paris."},
         {"role": "user", "content": "And of Italy?"}]
out["multi_turn"] = c.chat(model=model, messages=turns, options=opts).message.content

out["list"] = [m.model for m in c.list().models]
s = c.show(model)
out["show"] = {"family": s.details.family, "quantization": s.details.quantization_level,
               "format": s.details.format, "template": s.template,
               "context_length": s.modelinfo.get("qwen2.context_length"),
               "capabilities": s.capabilities}
out["ps"] = [[m.model, m.context_length] for m in c.ps().models]
out["version"] = c._client.get("/api/version").json()

e = c.embed(model=model, input=["hello world", "goodbye"])
out["embed_shape"] = [len(e.embeddings), len(e.embeddings[0])]

schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 24},
                                             "age": {"type": "integer", "maximum": 150}},
          "required": ["name", "age"]}
j = c.chat(model=model, messages=[{"role": "user", "content": "Describe a person as JSON."}],
           format=schema, options={"temperature": 0, "num_predict": 200})
out["json_format"] = json.loads(j.message.content)

try:
    c.chat(model=model, messages=msgs, options={"mirostat": 2})
    out["unsupported"] = None
except ollama.ResponseError as ex:
    out["unsupported"] = [ex.status_code, ex.error]
try:
    c.chat(model="no-such-model", messages=msgs)
    out["unknown_model"] = None
except ollama.ResponseError as ex:
    out["unknown_model"] = ex.status_code

print(json.dumps(out))
