#!/usr/bin/env python3
"""Soak test: many streaming clients plus a hostile one against `ferrox serve`.

Usage: scripts/soak.py [--minutes 10] [--clients 16] [--model qwen2.5-coder:0.5b-instruct]
                       [--ferrox target/release/ferrox] [--url http://HOST:PORT] [--json]

Starts `ferrox serve` (speculation on, 4 slots) unless --url names a running server. For the
whole run, `--clients` clients stream chat completions back to back and check that each one
ends properly (a finish reason, then [DONE]); one hostile client cycles through mid-stream
disconnects, malformed and oversized bodies, a missing Content-Type, a slow sender, an
overlong prompt, garbage bytes and an idle connection, checking each gets its error (or the
connection is cut) and not a crash. A monitor polls /health every 0.5 s (latency) and the
server's resident memory.

Passes (exit 0) when no well-behaved request failed, every hostile probe was answered as
expected, the server is alive at the end, /health's worst latency stayed under 1 s (p99 under
100 ms) and memory did not keep growing (the last third's peak within 10% of the middle
third's). Prints a summary (JSON with --json).
"""
import argparse
import http.client
import json
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
    p.add_argument("--json", action="store_true")
    return p.parse_args()


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.ok = 0
        self.tokens = 0
        self.failures = []
        self.hostile = {}
        self.hostile_bad = []
        self.health_ms = []
        self.rss_kb = []

    def add(self, field, value):
        with self.lock:
            getattr(self, field).append(value)


def start_server(args):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [args.ferrox, "serve", "-m", args.model, "--port", str(port), "--parallel", "4",
         "-c", "2048", "--queue", "64"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if "serving" in line:
            break
    threading.Thread(target=lambda: proc.stderr.read(), daemon=True).start()
    return proc, "127.0.0.1", port


def chat_stream(host, port, stats, stop_at, k):
    rnd = random.Random(k)
    while time.time() < stop_at:
        prompt = "Write a short note mentioning " + ", ".join(rnd.sample(WORDS, 4)) + "."
        body = json.dumps({"model": MODEL, "stream": True, "max_tokens": rnd.randint(16, 96),
                           "temperature": rnd.choice([0, 0.7]), "seed": rnd.randint(0, 10**6),
                           "messages": [{"role": "user", "content": prompt}]})
        try:
            c = http.client.HTTPConnection(host, port, timeout=300)
            c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
            r = c.getresponse()
            if r.status == 503:  # queue full: allowed back-pressure, retry later
                r.read()
                time.sleep(0.5)
                continue
            if r.status != 200:
                stats.add("failures", f"status {r.status}: {r.read()[:200]!r}")
                continue
            finish, done, pieces = None, False, 0
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
                        pieces += 1
                    finish = ch.get("finish_reason") or finish
            c.close()
            if not done or finish not in ("stop", "length"):
                stats.add("failures", f"stream ended badly: finish={finish} done={done}")
            else:
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


def monitor(host, port, pid, stats, stop_at):
    while time.time() < stop_at:
        t = time.time()
        try:
            c = http.client.HTTPConnection(host, port, timeout=10)
            c.request("GET", "/health")
            c.getresponse().read()
            c.close()
            stats.add("health_ms", (time.time() - t) * 1000)
        except Exception as e:  # noqa: BLE001
            stats.add("failures", f"/health: {e!r}")
        if pid:
            try:
                with open(f"/proc/{pid}/status") as f:
                    rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS"))
                stats.add("rss_kb", rss)
            except (OSError, StopIteration):
                pass
        time.sleep(0.5)


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
    stats = Stats()
    stop_at = time.time() + args.minutes * 60
    threads = [threading.Thread(target=chat_stream, args=(host, port, stats, stop_at, k)) for k in range(args.clients)]
    threads.append(threading.Thread(target=hostile, args=(host, port, stats, stop_at)))
    threads.append(threading.Thread(target=monitor, args=(host, port, proc.pid if proc else None, stats, stop_at)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    alive = proc is None or proc.poll() is None
    h = sorted(stats.health_ms) or [0.0]
    rss = stats.rss_kb
    third = max(1, len(rss) // 3)
    growth = (max(rss[-third:]) / max(rss[third:2 * third] or rss)) if len(rss) >= 3 else 1.0
    summary = {
        "minutes": args.minutes, "clients": args.clients, "streams_ok": stats.ok,
        "stream_pieces": stats.tokens, "failures": stats.failures[:20], "failure_count": len(stats.failures),
        "hostile_probes": stats.hostile, "hostile_unexpected": stats.hostile_bad[:20],
        "health_ms_p50": statistics.median(h), "health_ms_p99": h[int(len(h) * 0.99) - 1 if len(h) > 1 else 0],
        "health_ms_max": h[-1], "rss_mb_first": rss[0] // 1024 if rss else None,
        "rss_mb_peak": max(rss) // 1024 if rss else None, "rss_growth_last_third": round(growth, 3),
        "server_alive": alive,
    }
    if proc:
        proc.terminate()
        proc.wait(timeout=60)
    passed = (not stats.failures and not stats.hostile_bad and alive and summary["health_ms_max"] < 1000
              and summary["health_ms_p99"] < 100 and growth <= 1.10 and stats.ok > 0)
    summary["passed"] = passed
    print(json.dumps(summary) if args.json else json.dumps(summary, indent=2))
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
