"""Fill in the middle through the official clients against a running `ferrox serve`:
`suffix` on OpenAI's completions and on Ollama's generate, streamed and not.

Usage: fim_clients.py HOST MODEL PREFIX SUFFIX MAX_TOKENS
Prints one JSON object with the four greedy texts.
"""
import json
import sys

import ollama
import openai

host, model, prefix, suffix, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
oa = openai.OpenAI(base_url=f"{host}/v1", api_key="none", timeout=600)
ol = ollama.Client(host=host, timeout=600)
out = {}
args = dict(model=model, prompt=prefix, suffix=suffix, max_tokens=n, temperature=0)
out["openai"] = oa.completions.create(**args).choices[0].text
out["openai_stream"] = "".join(
    c.choices[0].text for c in oa.completions.create(stream=True, **args) if c.choices)
opts = {"temperature": 0, "num_predict": n}
out["ollama"] = ol.generate(model=model, prompt=prefix, suffix=suffix, options=opts).response
out["ollama_stream"] = "".join(
    p.response for p in ol.generate(model=model, prompt=prefix, suffix=suffix, options=opts,
                                    stream=True))
print(json.dumps(out))
