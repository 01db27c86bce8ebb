"""Embeddings from a running `ferrox serve` with the official `openai` client.

Usage: embeddings_client.py BASE_URL MODEL TEXT...
Prints one JSON object: the vectors of the texts (one request, as floats) and of the first
text again (the client's default base64 transfer), with their cosine similarities.
"""
import json
import sys

from openai import OpenAI

base, model, texts = sys.argv[1], sys.argv[2], sys.argv[3:]
client = OpenAI(base_url=base, api_key="test-key", max_retries=0, timeout=600)
r = client.embeddings.create(model=model, input=texts, encoding_format="float")
vecs = [d.embedding for d in sorted(r.data, key=lambda d: d.index)]
again = client.embeddings.create(model=model, input=texts[0]).data[0].embedding


def cos(a, b):
    return sum(x * y for x, y in zip(a, b)) / (
        sum(x * x for x in a) ** 0.5 * sum(y * y for y in b) ** 0.5)


print(json.dumps({
    "vectors": vecs,
    "again": again,
    "usage": [r.usage.prompt_tokens, r.usage.total_tokens],
    "cos": [[cos(a, b) for b in vecs] for a in vecs],
}))
