"""Drives a running `ferrox serve` with the official OpenAI Python client.

Usage: openai_client.py BASE_URL MODEL PROMPT MAX_TOKENS
Prints one JSON object: the greedy texts of chat and completion, streamed and not, and of
four concurrent chats.
"""
import json
import sys

from openai import OpenAI

base, model, prompt, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
client = OpenAI(base_url=base, api_key="test-key", max_retries=0, timeout=600)
msgs = [{"role": "user", "content": prompt}]
out = {}

r = client.chat.completions.create(model=model, messages=msgs, max_tokens=n, temperature=0)
out["chat"] = r.choices[0].message.content
out["chat_finish"] = r.choices[0].finish_reason
out["chat_usage"] = [r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens]

parts, usage, finish = [], None, None
for c in client.chat.completions.create(model=model, messages=msgs, max_tokens=n, temperature=0,
                                        stream=True, stream_options={"include_usage": True}):
    if c.usage is not None:
        usage = [c.usage.prompt_tokens, c.usage.completion_tokens, c.usage.total_tokens]
    for ch in c.choices:
        if ch.delta.content:
            parts.append(ch.delta.content)
        if ch.finish_reason:
            finish = ch.finish_reason
out["chat_stream"] = "".join(parts)
out["chat_stream_finish"] = finish
out["chat_stream_usage"] = usage

r = client.completions.create(model=model, prompt=prompt, max_tokens=n, temperature=0)
out["completion"] = r.choices[0].text
out["completion_usage"] = [r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens]
out["completion_stream"] = "".join(
    c.choices[0].text for c in client.completions.create(
        model=model, prompt=prompt, max_tokens=n, temperature=0, stream=True) if c.choices)

# Four clients at once (two slots, so two wait in the queue): continuous batching must give
# each the text it gets alone.
from concurrent.futures import ThreadPoolExecutor


def chat_once(_):
    r = client.chat.completions.create(model=model, messages=msgs, max_tokens=n, temperature=0)
    return r.choices[0].message.content


with ThreadPoolExecutor(4) as pool:
    out["chat_concurrent"] = list(pool.map(chat_once, range(4)))

# Log-probabilities of a greedy completion, tokens named by id (vLLM's
# return_tokens_as_token_ids) so the test can recompute them with `ferrox logits`.
r = client.completions.create(model=model, prompt=prompt, max_tokens=8, temperature=0, logprobs=5,
                              extra_body={"return_tokens_as_token_ids": True})
lp = r.choices[0].logprobs
out["completion_logprobs"] = {"tokens": lp.tokens, "token_logprobs": lp.token_logprobs,
                              "top_logprobs": lp.top_logprobs}
r = client.chat.completions.create(model=model, messages=msgs, max_tokens=8, temperature=0,
                                   logprobs=True, top_logprobs=3)
out["chat_logprobs"] = [[e.token, e.logprob, [[t.token, t.logprob] for t in e.top_logprobs]]
                        for e in r.choices[0].logprobs.content]
streamed = []
for c in client.chat.completions.create(model=model, messages=msgs, max_tokens=8, temperature=0,
                                        logprobs=True, top_logprobs=3, stream=True):
    for ch in c.choices:
        if ch.logprobs and ch.logprobs.content:
            streamed += [[e.token, e.logprob] for e in ch.logprobs.content]
out["chat_stream_logprobs"] = streamed

# Seeds: two unseeded temperature-1 requests differ; two with one seed are equal.
def sampled(**kw):
    r = client.chat.completions.create(model=model, messages=msgs, max_tokens=24, temperature=1.0,
                                       **kw)
    return r.choices[0].message.content


out["unseeded"] = [sampled(), sampled()]
out["seeded"] = [sampled(seed=7), sampled(seed=7)]
r = client.chat.completions.create(model=model, messages=msgs, max_tokens=n, temperature=0, n=2)
out["n2"] = [c.message.content for c in r.choices]

out["models"] = [m.id for m in client.models.list().data]
try:
    client.chat.completions.create(model="no-such-model", messages=msgs, max_tokens=1)
    out["unknown_model"] = "accepted"
except Exception as e:  # the client raises NotFoundError
    out["unknown_model"] = type(e).__name__
print(json.dumps(out))
