"""Decoding speed through the Python bindings against `ferrox bench`'s tg128 (the same model,
2 threads): `python3 bench_overhead.py MODEL_PATH FERROX_BINARY [ROUNDS]`. Each round runs
`ferrox bench -p 0 -n 128 -r 1` and a greedy 128-token completion through `ferrox.Llama`
without drafts (the bench decodes plainly), in alternating order; prints each round, the
medians and the median of the rounds' ratios. The Python rate
is 127 tokens over the time the 128-token call takes beyond a 1-token call of the same prompt
(whose prefix the slot keeps), i.e. decoding only, as tg128 is."""

import json
import statistics
import subprocess
import sys
import time

import ferrox

model, binary = sys.argv[1], sys.argv[2]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
llm = ferrox.Llama(model, n_ctx=1024, n_threads=2, no_spec=True, verbose=False)
prompt = "Count from 1 to 1000, one number a line:\n"
# No end of generation before 128 tokens.
eog = {llm.token_eos()} | {
    t for s in [b"<|im_end|>", b"<|endoftext|>"] for t in llm.tokenize(s, add_bos=False, special=True)
}
bias = {t: -100.0 for t in eog}


def timed(n):
    t0 = time.perf_counter()
    out = llm(prompt, max_tokens=n, temperature=0, logit_bias=bias)
    assert out["usage"]["completion_tokens"] == n
    return time.perf_counter() - t0


def python_rate():
    t1 = timed(1)
    return 127 / (timed(128) - t1)


def bench_rate():
    out = subprocess.run(
        [binary, "bench", "-m", model, "-p", "0", "-n", "128", "-t", "2", "-r", "1", "-o", "json"],
        capture_output=True, text=True, check=True,
    ).stdout
    return json.loads(out)[0]["avg_ts"]


timed(8)  # warm: pages the weights in
py, cli = [], []
for r in range(rounds):
    # One run each, the order alternating, so a drift of the machine's speed hits both alike.
    if r % 2 == 0:
        cli.append(bench_rate())
        py.append(python_rate())
    else:
        py.append(python_rate())
        cli.append(bench_rate())
    print(f"round {r + 1}: ferrox bench tg128 {cli[-1]:.2f} t/s, Python {py[-1]:.2f} t/s", flush=True)
a, b = statistics.median(cli), statistics.median(py)
ratio = statistics.median(p / c for p, c in zip(py, cli))
print(f"median: ferrox bench {a:.2f} t/s, Python {b:.2f} t/s ({100 * (b / a - 1):+.1f}%); "
      f"median of the rounds' ratios {100 * (ratio - 1):+.1f}%")
