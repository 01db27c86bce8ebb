"""Bounded load test for `ferrox serve`: C concurrent streaming clients for D seconds.

Usage: loadtest.py BASE_URL MODEL SERVER_PID [CLIENTS=8] [SECONDS=60] [MAX_TOKENS=64]
Reports errors, aggregate completion tokens/s, the single-stream rate measured first, and the
server's RSS sampled after warm-up (VmRSS from /proc).
"""
import sys
import threading
import time

from openai import OpenAI

base, model, pid = sys.argv[1], sys.argv[2], int(sys.argv[3])
clients = int(sys.argv[4]) if len(sys.argv) > 4 else 8
seconds = float(sys.argv[5]) if len(sys.argv) > 5 else 60
max_tokens = int(sys.argv[6]) if len(sys.argv) > 6 else 64
prompts = ["Write a Python function that checks whether a number is prime.",
           "Explain what a hash map is in two sentences.",
           "Write a bash one-liner that counts lines in all .py files.",
           "What is the difference between a list and a tuple in Python?"]


def rss_kib():
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def one(client, i):
    n = 0
    for c in client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": prompts[i % len(prompts)]}],
            max_tokens=max_tokens, temperature=0.7, seed=i, stream=True,
            stream_options={"include_usage": True}):
        if c.usage is not None:
            n = c.usage.completion_tokens
    return n


client = OpenAI(base_url=base, api_key="x", max_retries=0, timeout=600)
t = time.time()
single = one(client, 0) / (time.time() - t)

lock = threading.Lock()
stats = {"tokens": 0, "errors": 0, "requests": 0}
end = time.time() + seconds


def worker(k):
    c = OpenAI(base_url=base, api_key="x", max_retries=0, timeout=600)
    i = k
    while time.time() < end:
        try:
            n = one(c, i)
            with lock:
                stats["tokens"] += n
                stats["requests"] += 1
        except Exception as e:  # count, keep going
            with lock:
                stats["errors"] += 1
            print("error:", e, file=sys.stderr)
        i += clients


rss = []
start = time.time()
threads = [threading.Thread(target=worker, args=(k,)) for k in range(clients)]
for th in threads:
    th.start()
while any(th.is_alive() for th in threads):
    time.sleep(2)
    if time.time() - start > min(15, seconds / 4):
        rss.append(rss_kib())
for th in threads:
    th.join()
wall = time.time() - start
agg = stats["tokens"] / wall
print(f"clients={clients} seconds={wall:.1f} requests={stats['requests']} errors={stats['errors']}")
print(f"single-stream {single:.2f} tok/s; aggregate {agg:.2f} tok/s; ratio {agg / single:.2f}x")
if rss:
    print(f"RSS after warm-up: min {min(rss) / 1024:.1f} MiB, max {max(rss) / 1024:.1f} MiB")
