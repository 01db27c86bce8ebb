"""Drives a several-model `ferrox serve` with the official `ollama` Python client.

Usage: multi_client.py HOST PROMPT MAX_TOKENS MODEL...
Prints one JSON object: each model's greedy chat text (asked alternately, twice each), what
`ps` lists after them, what it lists after a `keep_alive: 0` request on the first model, the
status of a request with keep_alive "abc", and the unknown model's error.
"""
import json
import sys

import ollama

host, prompt, n, models = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
c = ollama.Client(host=host, timeout=600)
opts = {"temperature": 0, "num_predict": n}
msgs = [{"role": "user", "content": prompt}]
out = {"answers": {m: [] for m in models}}

for _ in range(2):
    for m in models:
        out["answers"][m].append(c.chat(model=m, messages=msgs, options=opts).message.content)
out["list"] = sorted(m.model for m in c.list().models)
out["ps"] = sorted(m.model for m in c.ps().models)
out["ps_sizes"] = [m.size for m in c.ps().models]
out["ps_expires"] = [str(m.expires_at) for m in c.ps().models]
c.generate(model=models[0], prompt=prompt, options=opts, keep_alive=0)
out["ps_after_unload"] = sorted(m.model for m in c.ps().models)
try:
    c.generate(model=models[0], prompt=prompt, options=opts, keep_alive="abc")
    out["bad_keep_alive"] = 200
except ollama.ResponseError as e:
    out["bad_keep_alive"] = e.status_code
try:
    c.chat(model="no-such-model", messages=msgs)
    out["unknown"] = [200, ""]
except ollama.ResponseError as e:
    out["unknown"] = [e.status_code, e.error]
print(json.dumps(out))
