#!/usr/bin/env python3
"""Soak test: many streaming clients plus a hostile one against `ferrox serve`.

Usage: scripts/soak.py [--minutes 10] [--clients 16] [--model qwen2.5-coder:0.5b-instruct]
                       [--ferrox target/release/ferrox] [--url http://HOST:PORT --pid PID]
                       [--cache-ram 256] [--json]

Starts `ferrox serve` (speculation on, 4 slots, a `--cache-ram` MiB prefix cache) unless --url
names a running server (then --cache-ram says what that server was given, --pid which
process it is). First computes greedy references with `ferrox run --temp 0 -n 48` for a few
prompts. For the whole run, `--clients` clients stream chat completions back to back and
check that each one ends properly (a finish reason, then [DONE]); every third request of a
client (the first among them) is one of the reference prompts at temperature 0, whose text
must equal `ferrox run`'s. One hostile client cycles through mid-stream disconnects,
malformed and oversized bodies, a missing Content-Type, a slow sender, an overlong prompt,
garbage bytes and an idle connection, checking each gets its error (or the connection is cut)
and not a crash. A process of its own polls /health every 0.5 s (latency: in the clients' process the poll
would wait for Python's interpreter lock), a monitor the server's resident memory
and its prefix-cache size (/metrics).

Memory: the prefix cache keeps finished requests' keys and values up to its budget, so the
server grows by design until the cache is full. Warm-up ends at the first sample where the
cache holds its budget (within 2%) and the hostile client has made each of its probes once; the
growth judged is the peak anonymous RSS after that over the peak up to it. The pages of the
mapped model file (RssFile, reported apart) keep growing slowly as prompts touch embedding rows
not read before: bounded by the file, and reclaimable. The time to first token is measured from
sending a request to its first content delta.

Passes (exit 0) when no well-behaved request failed, every greedy answer equalled
`ferrox run`'s, every hostile probe was answered as expected, the server is alive at the end,
/health's worst latency stayed under 1 s (p99 under 100 ms), the cache reached its budget and
memory grew less than 5% after that. Prints a summary (JSON with --json).
"""
import argparse
import http.client
import json
import multiprocessing
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time

MODEL = ""  # the served model's id, read from /v1/models at the start
WORDS = ("river stone lantern orbit copper willow signal harbor ember prism canyon meadow "
         "falcon ledger quartz summit thistle voyage").split()


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--model", default="qwen2.5-coder:0.5b-instruct")
    p.add_argument("--ferrox", default=os.path.join(os.path.dirname(__file__), "..", "target", "release", "ferrox"))
    p.add_argument("--url", help="a running server (default: start one)")
    p.add_argument("--pid", type=int, help="with --url: the server's process id, to read its memory")
    p.add_argument("--cache-ram", type=int, default=256, help="the server's prefix-cache budget, MiB")
    p.add_argument("--samples", help="write the memory samples (s, RssAnon KiB, prefix-cache bytes, RssFile KiB) here, as JSON")
    p.add_argument("--json", action="store_true")
    return p.parse_args()


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.ok = 0
        self.tokens = 0
        self.failures = []
        self.hostile = {}
        # When the hostile client finished its first round of every probe (see memory_summary).
        self.hostile_round_at = None
        self.hostile_bad = []
        self.health_ms = []
        self.rss_kb = []
        self.cache_bytes = []
        self.ttft_ms = []
        self.greedy_checked = 0

    def add(self, field, value):
        with self.lock:
            getattr(self, field).append(value)


def start_server(args):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [args.ferrox, "serve", "-m", args.model, "--port", str(port), "--parallel", "4",
         "-c", "2048", "--queue", "64", "--cache-ram", str(args.cache_ram)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if "serving" in line:
            break
    threading.Thread(target=lambda: proc.stderr.read(), daemon=True).start()
    return proc, "127.0.0.1", port


GREEDY_PROMPTS = [
    "Write a Python function that checks whether a number is prime.",
    "Explain in two sentences what a hash map is.",
    "List three uses of copper.",
    "Write a haiku about a river stone.",
]
GREEDY_TOKENS = 48


def greedy_references(args):
    """`ferrox run --temp 0` for each greedy prompt: the text the server must give back."""
    refs = {}
    for prompt in GREEDY_PROMPTS:
        out = subprocess.run([args.ferrox, "run", "-m", args.model, "--temp", "0", "-n",
                              str(GREEDY_TOKENS), prompt], capture_output=True, text=True,
                             timeout=600, check=True)
        refs[prompt] = out.stdout[:-1] if out.stdout.endswith("\n") else out.stdout
    return refs


def chat_stream(host, port, stats, stop_at, k, refs):
    rnd = random.Random(k)
    n = 0
    while time.time() < stop_at:
        n += 1
        prompt = "Write a short note mentioning " + ", ".join(rnd.sample(WORDS, 4)) + "."
        req = {"model": MODEL, "stream": True, "max_tokens": rnd.randint(16, 96),
               "temperature": rnd.choice([0, 0.7]), "seed": rnd.randint(0, 10**6)}
        want = None
        if refs and n % 3 == 1:
            prompt = GREEDY_PROMPTS[(k + n) % len(GREEDY_PROMPTS)]
            want = refs[prompt]
            req.update(temperature=0, max_tokens=GREEDY_TOKENS)
        req["messages"] = [{"role": "user", "content": prompt}]
        body = json.dumps(req)
        try:
            c = http.client.HTTPConnection(host, port, timeout=300)
            sent = time.time()
            c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
            r = c.getresponse()
            if r.status == 503:  # queue full: allowed back-pressure, retry later
                r.read()
                time.sleep(0.5)
                continue
            if r.status != 200:
                stats.add("failures", f"status {r.status}: {r.read()[:200]!r}")
                continue
            finish, done, pieces, text = None, False, 0, []
            for raw in r:
                line = raw.decode().strip()
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    done = True
                    break
                ev = json.loads(data)
                if "error" in ev:
                    stats.add("failures", f"stream error: {ev['error']}")
                for ch in ev.get("choices", []):
                    if ch.get("delta", {}).get("content"):
                        if not text:
                            stats.add("ttft_ms", (time.time() - sent) * 1000)
                        pieces += 1
                        text.append(ch["delta"]["content"])
                    finish = ch.get("finish_reason") or finish
            c.close()
            if not done or finish not in ("stop", "length"):
                stats.add("failures", f"stream ended badly: finish={finish} done={done}")
            elif want is not None and "".join(text) != want:
                stats.add("failures", f"greedy answer differs from ferrox run: {prompt!r}: "
                                      f"{''.join(text)[:120]!r} != {want[:120]!r}")
            else:
                if want is not None:
                    with stats.lock:
                        stats.greedy_checked += 1
                with stats.lock:
                    stats.ok += 1
                    stats.tokens += pieces
        except Exception as e:  # noqa: BLE001 - any failure of a well-behaved client counts
            stats.add("failures", repr(e)[:200])


def raw(host, port, data, read=True, timeout=30):
    s = socket.create_connection((host, port), timeout=timeout)
    try:
        s.sendall(data)
    except OSError:
        pass  # the server answered (413) and closed before all of it was sent
    out = b""
    if read:
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    break
                out += b
        except OSError:
            pass
    s.close()
    return out


def status_of(resp):
    parts = resp.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


def request_bytes(body, ctype="application/json", path="/v1/chat/completions", length=None):
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
    if ctype:
        head += f"Content-Type: {ctype}\r\n"
    head += f"Content-Length: {len(body) if length is None else length}\r\n\r\n"
    return head.encode() + body


def hostile(host, port, stats, stop_at):
    """Cycles through bad behaviour; each probe's expectation is checked."""
    good = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                       "max_tokens": 8}).encode()
    probes = {
        "malformed_json": lambda: status_of(raw(host, port, request_bytes(b'{"model": MODEL, "messages": ['))) == 400,
        "oversized_body": lambda: status_of(raw(host, port, request_bytes(b"x" * (17 << 20)))) in (413, None),
        "no_content_type": lambda: status_of(raw(host, port, request_bytes(good, ctype=None))) == 415,
        "overlong_prompt": lambda: status_of(raw(host, port, request_bytes(json.dumps(
            {"model": MODEL, "messages": [{"role": "user", "content": "word " * 5000}]}).encode()))) == 400,
        "garbage": lambda: status_of(raw(host, port, os.urandom(512))) in (400, None),
        "slow_sender": lambda: slow_sender(host, port),
        "idle_connection": lambda: idle(host, port),
        "mid_stream_disconnect": lambda: disconnect(host, port),
    }
    names = list(probes)
    i = 0
    while time.time() < stop_at:
        name = names[i % len(names)]
        i += 1
        try:
            ok = probes[name]()
        except Exception as e:  # noqa: BLE001
            ok, name = False, f"{name}: {e!r}"[:200]
        with stats.lock:
            stats.hostile[name.split(":")[0]] = stats.hostile.get(name.split(":")[0], 0) + 1
        if not ok:
            stats.add("hostile_bad", name)
        if i == len(names):
            stats.hostile_round_at = time.time()
        time.sleep(0.2)


def slow_sender(host, port):
    """Headers, then the body one byte a second: the server cuts it off (no 200)."""
    s = socket.create_connection((host, port), timeout=120)
    s.sendall(request_bytes(b"", length=200))
    t = time.time()
    try:
        while time.time() - t < 90:
            s.sendall(b"{")
            time.sleep(1)
            s.settimeout(0.01)
            try:
                if s.recv(1024) == b"":
                    break
            except socket.timeout:
                pass
            s.settimeout(120)
    except OSError:
        pass
    s.close()
    return time.time() - t < 90


def idle(host, port):
    """A connection that sends nothing is closed by the server."""
    s = socket.create_connection((host, port), timeout=120)
    t = time.time()
    try:
        closed = s.recv(1) == b""
    except OSError:
        closed = True
    s.close()
    return closed and time.time() - t < 90


def disconnect(host, port):
    """Starts a long stream, reads a little, hangs up: the slot must come back."""
    body = json.dumps({"model": MODEL, "stream": True, "max_tokens": 400,
                       "messages": [{"role": "user", "content": "Count to 500."}]}).encode()
    s = socket.create_connection((host, port), timeout=60)
    s.sendall(request_bytes(body))
    got = s.recv(4096)
    s.close()
    return status_of(got) in (200, 503)


def health_poller(host, port, stop_at, conn):
    """/health latencies, polled every 0.5 s from a process of its own: in the clients' process
    a poll waits for the interpreter lock behind 16 streaming threads (tens of ms), which
    would be measuring this script, not the server. Sends (ms or None for a failure, error)."""
    while time.time() < stop_at:
        t = time.time()
        try:
            c = http.client.HTTPConnection(host, port, timeout=10)
            c.request("GET", "/health")
            c.getresponse().read()
            c.close()
            conn.send(((time.time() - t) * 1000, None))
        except Exception as e:  # noqa: BLE001
            conn.send((None, f"/health: {e!r}"))
        time.sleep(0.5)
    conn.send("done")
    conn.close()


def monitor(host, port, pid, stats, stop_at):
    """Collects the health poller's latencies, and samples the server's memory every 0.5 s."""
    recv, send = multiprocessing.Pipe(duplex=False)
    poller = multiprocessing.get_context("fork").Process(target=health_poller, args=(host, port, stop_at, send))
    poller.start()
    send.close()
    done = False
    while not done or time.time() < stop_at:
        while recv.poll():
            msg = recv.recv()
            if msg == "done":
                done = True
                break
            ms, err = msg
            if err:
                stats.add("failures", err)
            else:
                stats.add("health_ms", ms)
        if done and time.time() >= stop_at:
            break
        if pid:
            try:
                with open(f"/proc/{pid}/status") as f:
                    kb = {l.split(":")[0]: int(l.split()[1]) for l in f if l.startswith(("RssAnon", "RssFile"))}
                with stats.lock:
                    stats.rss_kb.append((time.time(), kb["RssAnon"], prefix_cache_bytes(host, port), kb["RssFile"]))
            except (OSError, StopIteration, ValueError):
                pass
        time.sleep(0.5)
    poller.join()


def prefix_cache_bytes(host, port):
    c = http.client.HTTPConnection(host, port, timeout=10)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    return int(next(l.split()[1] for l in text.splitlines() if l.startswith("ferrox_prefix_cache_bytes ")))


def memory_summary(samples, budget, started, seen_all_at=None):
    """Anonymous memory before and after warm-up: the prefix cache at its budget, within 2%
    (until then the server grows by design, and at 90% a tenth of the budget is still to come),
    and every kind of request seen once (`seen_all_at`: the hostile client's first round, whose
    oversized body and overlong prompt size buffers a 45-second run may meet only late). The
    mapped model file's pages (RssFile) are reported apart: they grow as prompts touch
    embedding rows not read before, are bounded by the file and are reclaimable."""
    if not samples:
        return {"warmup_s": None, "rss_growth_after_warmup": None}
    w = next((i for i, (t, _, b, _) in enumerate(samples)
              if b >= 0.98 * budget and (seen_all_at is None or t >= seen_all_at)), None)
    anon = [a for _, a, _, _ in samples]
    file = [f for _, _, _, f in samples]
    out = {"rss_anon_mb_first": anon[0] // 1024, "rss_anon_mb_peak": max(anon) // 1024,
           "rss_file_mb_first": file[0] // 1024, "rss_file_mb_peak": max(file) // 1024,
           "prefix_cache_mb_peak": max(b for _, _, b, _ in samples) >> 20,
           "prefix_cache_budget_mb": budget >> 20}
    if w is None:
        return {**out, "warmup_s": None, "rss_growth_after_warmup": None}
    before, after = max(anon[:w + 1]), max(anon[w:])
    return {**out, "warmup_s": round(samples[w][0] - started, 1), "rss_anon_mb_at_warmup": before // 1024,
            "rss_anon_mb_peak_after_warmup": after // 1024, "rss_growth_after_warmup": round(after / before, 4),
            "rss_file_mb_at_warmup": max(file[:w + 1]) // 1024}


def pct(xs, q):
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(len(xs) * q))], 1) if xs else None


def main():
    args = parse_args()
    proc = None
    if args.url:
        host, port = args.url.split("//")[-1].rstrip("/").split(":")
        port = int(port)
    else:
        proc, host, port = start_server(args)
    global MODEL
    c = http.client.HTTPConnection(host, port, timeout=60)
    c.request("GET", "/v1/models")
    MODEL = json.loads(c.getresponse().read())["data"][0]["id"]
    c.close()
    refs = greedy_references(args)
    stats = Stats()
    started = time.time()
    stop_at = started + args.minutes * 60
    threads = [threading.Thread(target=chat_stream, args=(host, port, stats, stop_at, k, refs))
               for k in range(args.clients)]
    threads.append(threading.Thread(target=hostile, args=(host, port, stats, stop_at)))
    threads.append(threading.Thread(target=monitor, args=(host, port, proc.pid if proc else args.pid, stats, stop_at)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    alive = proc is None or proc.poll() is None
    h = sorted(stats.health_ms) or [0.0]
    mem = memory_summary(stats.rss_kb, args.cache_ram << 20, started, stats.hostile_round_at or float("inf"))
    if args.samples:
        with open(args.samples, "w") as f:
            json.dump([[round(t - started, 1), a, b, fl] for t, a, b, fl in stats.rss_kb], f)
    growth = mem["rss_growth_after_warmup"]
    summary = {
        "minutes": args.minutes, "clients": args.clients, "streams_ok": stats.ok,
        "stream_pieces": stats.tokens, "failures": stats.failures[:20], "failure_count": len(stats.failures),
        "hostile_probes": stats.hostile, "hostile_unexpected": stats.hostile_bad[:20],
        "health_ms_p50": statistics.median(h), "health_ms_p99": h[int(len(h) * 0.99) - 1 if len(h) > 1 else 0],
        "health_ms_max": h[-1], "ttft_ms_p50": pct(stats.ttft_ms, 0.5), "ttft_ms_p99": pct(stats.ttft_ms, 0.99),
        "greedy_checked": stats.greedy_checked, **mem, "server_alive": alive,
    }
    if proc:
        proc.terminate()
        proc.wait(timeout=60)
    passed = (not stats.failures and not stats.hostile_bad and alive and summary["health_ms_max"] < 1000
              and summary["health_ms_p99"] < 100 and growth is not None and growth < 1.05
              and stats.ok > 0 and stats.greedy_checked > 0)
    summary["passed"] = passed
    print(json.dumps(summary) if args.json else json.dumps(summary, indent=2))
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
