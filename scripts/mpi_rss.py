#!/usr/bin/env python3
"""Resident memory per rank of `mpiexec -n R ferrox serve --expert-parallel` (issue 22), or
of `--pipeline-parallel` with `--mode pipeline`.

  scripts/mpi_rss.py MODEL.gguf [--ranks 1,2,4] [--ferrox target/release/ferrox] [--tokens 16]
                     [--mode expert|pipeline]

For each R: starts the server under mpiexec (R = 1: one plain process for the baseline), sends
one greedy chat of --tokens tokens after a ~900-token prompt (so each rank has touched the
experts it owns), reads every
rank's VmRSS and VmHWM from /proc (ranks found by PMI_RANK in their environment), drains the
server and prints one line per rank. Also prints the model's routed-expert bytes per MoE layer
and in all, from the GGUF tensor table, for the ≈ shared + routed/R comparison.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time
import urllib.request


def expert_bytes(path):
    import gguf

    r = gguf.GGUFReader(path)
    routed = sum(int(t.n_bytes) for t in r.tensors if "_exps." in t.name)
    total = sum(int(t.n_bytes) for t in r.tensors)
    return routed, total


def ranks_of(root_pid):
    """(rank, pid) of every ferrox process under root_pid."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            if not cmd or not cmd[0].endswith(b"ferrox"):
                continue
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        rank = next((int(e.split(b"=")[1]) for e in env if e.startswith(b"PMI_RANK=")), 0)
        if int(pid) == root_pid or any(e.startswith(b"PMI_RANK=") for e in env):
            out.append((rank, int(pid)))
    return sorted(out)


def mem(pid):
    s = open(f"/proc/{pid}/status").read()
    get = lambda k: int(re.search(rf"{k}:\s+(\d+) kB", s).group(1)) / 1024
    return get("VmRSS"), get("VmHWM")


def one(args, ranks):
    cmd = [args.ferrox, "serve", "-m", args.model, "--port", "0", "-t", "1", "--parallel", "1"]
    if ranks > 1:
        cmd = ["mpiexec", "-n", str(ranks)] + cmd + [f"--{args.mode}-parallel"]
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    addr = None
    for line in p.stderr:
        m = re.search(r"http://(\S+)", line)
        if m:
            addr = m.group(1)
            break
    if addr is None:
        sys.exit(f"server did not start: {cmd}")
    # A long varied prompt routes to (nearly) every expert, so each rank pages in its share.
    text = " ".join(f"item{i} value{i * 7 % 101}" for i in range(150))
    body = json.dumps({"model": args.model, "messages": [{"role": "user", "content": text}],
                       "max_tokens": args.tokens, "temperature": 0}).encode()
    req = urllib.request.Request(f"http://{addr}/v1/chat/completions", body,
                                 {"Content-Type": "application/json"})
    try:
        urllib.request.urlopen(req, timeout=3600).read()
        rows = [(r, *mem(pid)) for r, pid in ranks_of(p.pid)]
        urllib.request.urlopen(urllib.request.Request(f"http://{addr}/admin/drain", b"{}",
                                                      {"Content-Type": "application/json"}))
        p.wait(timeout=120)
    finally:
        if p.poll() is None:
            p.terminate()
            p.wait()
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--ferrox", default="target/release/ferrox")
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--mode", choices=["expert", "pipeline"], default="expert")
    args = ap.parse_args()
    routed, total = expert_bytes(args.model)
    print(f"model {total / 2**20:.0f} MiB, routed experts {routed / 2**20:.0f} MiB, "
          f"rest {(total - routed) / 2**20:.0f} MiB")
    for r in map(int, args.ranks.split(",")):
        for rank, rss, hwm in one(args, r):
            print(f"R={r} rank {rank}: RSS {rss:.0f} MiB (peak {hwm:.0f}); "
                  f"routed/R = {routed / r / 2**20:.0f} MiB")
        time.sleep(1)


if __name__ == "__main__":
    main()
