"""Drives `deploy/local-cluster` (3 replicas behind HAProxy) with the official OpenAI client.

Usage: cluster_client.py PORT MODEL PID_1 PID_2 PID_3
Prints one JSON object:
- affinity: 50 two-turn conversations with distinct X-Session-Id headers: whether every turn of
  a conversation was answered by one instance, the instances used, and the share of second-turn
  prompt tokens served from cache; the same share without session ids (round robin).
- kill: load from 6 clients while replica 1 gets SIGKILL: failures among requests started
  after the kill, and among those in flight at the kill.
- drain: load while replica 2 gets SIGTERM: every failure.
"""
import json
import os
import signal
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from openai import OpenAI

port, model, pids = sys.argv[1], sys.argv[2], [int(p) for p in sys.argv[3:6]]
client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=120)
SYSTEM = "You are a helpful assistant for a bookshop. Answer briefly."


def document(i):
    """A conversation's own long context (as a coding agent sends a file): ~300 tokens."""
    return "\n".join(f"Shelf {i}-{k}: atlas of region {i * 31 + k} costs {(i * 7 + k * 3) % 90 + 10} euros."
                     for k in range(16))
out = {}


def chat(messages, session):
    headers = {"X-Session-Id": session} if session else {}
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=messages, max_tokens=16, temperature=0, extra_headers=headers)
    r = raw.parse()
    cached = r.usage.prompt_tokens_details.cached_tokens if r.usage.prompt_tokens_details else 0
    return (raw.headers.get("x-ferrox-instance"), r.choices[0].message.content,
            r.usage.prompt_tokens, cached)


def conversation(i, with_session):
    session = f"conv-{i}-{uuid.uuid4().hex[:8]}" if with_session else None
    msgs = [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Our stock list:\n{document(i)}\nDo you sell maps of region {i * 31}?"}]
    inst1, answer, _, _ = chat(msgs, session)
    msgs += [{"role": "assistant", "content": answer},
             {"role": "user", "content": "And how much do they cost?"}]
    inst2, _, prompt2, cached2 = chat(msgs, session)
    return inst1, inst2, prompt2, cached2


def affinity(with_session, n):
    with ThreadPoolExecutor(6) as pool:
        rows = list(pool.map(lambda i: conversation(i, with_session), range(n)))
    prompt = sum(r[2] for r in rows)
    cached = sum(r[3] for r in rows)
    return {"same_instance": sum(r[0] == r[1] for r in rows), "instances": sorted({r[0] for r in rows}),
            "second_turn_cached": cached / prompt}


out["affinity"] = affinity(True, 24)
# Round robin (no session key) for comparison, on fewer conversations.
out["round_robin"] = affinity(False, 12)


def load(seconds, action_at, action):
    """6 clients send requests for `seconds`; `action` runs at `action_at`. Each request's
    (start, end, ok, error)."""
    results, lock = [], threading.Lock()
    t0 = time.time()
    stop = t0 + seconds

    def worker(w):
        k = 0
        while time.time() < stop:
            k += 1
            start = time.time()
            try:
                chat([{"role": "user", "content": f"Worker {w} request {k}: name a colour."}],
                     f"load-{w}-{k}")
                ok, err = True, None
            except Exception as e:  # noqa: BLE001 - any failure counts
                ok, err = False, repr(e)[:200]
            with lock:
                results.append((start, time.time(), ok, err))

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    time.sleep(action_at)
    at = time.time()
    action()
    for t in threads:
        t.join()
    return at, results


at, res = load(8, 3, lambda: os.kill(pids[0], signal.SIGKILL))
out["kill"] = {
    "requests": len(res),
    "failed_after": [r[3] for r in res if r[0] >= at and not r[2]],
    "failed_in_flight": sum(1 for r in res if r[0] < at <= r[1] and not r[2]),
}
at, res = load(8, 3, lambda: os.kill(pids[1], signal.SIGTERM))
out["drain"] = {"requests": len(res), "failed": [r[3] for r in res if not r[2]]}
# The drained replica exits by itself once its streams are done.
def exited(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1].startswith("Z")  # a zombie until reaped
    except FileNotFoundError:
        return True


deadline = time.time() + 60
while time.time() < deadline and not exited(pids[1]):
    time.sleep(0.2)
out["drained_exited"] = exited(pids[1])
print(json.dumps(out))
