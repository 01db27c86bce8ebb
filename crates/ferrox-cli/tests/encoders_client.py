"""Embeddings of an encoder model served by `ferrox serve`, with the official clients.

Usage: encoders_client.py HOST:PORT MODEL TEXT...
Prints one JSON object: the vectors of the texts from the `openai` client (one request, floats),
the first text again through its default base64 transfer, and the vectors from the `ollama`
client's `embed` (one request), plus the error a chat request gets.
"""
import json
import sys

import ollama
import openai

addr, model, texts = sys.argv[1], sys.argv[2], sys.argv[3:]
client = openai.OpenAI(base_url=f"http://{addr}/v1", api_key="k", max_retries=0, timeout=600)
r = client.embeddings.create(model=model, input=texts, encoding_format="float")
vecs = [d.embedding for d in sorted(r.data, key=lambda d: d.index)]
again = client.embeddings.create(model=model, input=texts[0]).data[0].embedding
ol = ollama.Client(host=f"http://{addr}").embed(model=model, input=texts)
try:
    client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}])
    chat = None
except openai.BadRequestError as e:
    chat = {"status": e.status_code, "message": str(e)}
print(json.dumps({
    "vectors": vecs,
    "again": again,
    "ollama": [list(v) for v in ol.embeddings],
    "tokens": r.usage.prompt_tokens,
    "chat": chat,
}))
