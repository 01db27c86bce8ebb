"""Time to first token of a prompt sharing a ~2,000-token prefix with an earlier request whose
slot another request took since (so the prefix comes from the prefix cache, on another slot).

Usage: prefix_ttft.py BASE_URL MODEL
Prints one JSON object: the two TTFTs (streamed completions), prompt and cached tokens.
"""
import json
import sys
import threading
import time

from openai import OpenAI

base, model = sys.argv[1], sys.argv[2]
client = OpenAI(base_url=base, api_key="x", max_retries=0, timeout=600)
prefix = "Inventory:\n" + "\n".join(f"item {i}: {i * 37 % 1000} units at {i % 17 + 3} euros" for i in range(160)) + "\n"


def ttft(prompt, max_tokens=4):
    t, first, usage = time.time(), None, None
    for ch in client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens,
                                        temperature=0, stream=True,
                                        stream_options={"include_usage": True}):
        if first is None and ch.choices and ch.choices[0].text:
            first = time.time() - t
        if ch.usage:
            usage = ch.usage
    cached = usage.prompt_tokens_details.cached_tokens if usage.prompt_tokens_details else 0
    return first, usage.prompt_tokens, cached


out = {"first": ttft(prefix + "Question: how many units of item 3?")}
# An unrelated long-running request takes the first request's slot (the tie between two free
# slots goes to the one it used), so the next prompt runs on the other slot.
busy = threading.Thread(target=ttft, args=("Write a long story about a lighthouse keeper.", 200))
busy.start()
time.sleep(1.0)
out["second"] = ttft(prefix + "Question: how many units of item 5?")
busy.join()
print(json.dumps(out))
