#!/usr/bin/env python3
"""Trains a draft head for a model that ships none, in the MTP (NextN) block's form ferrox
already runs (`crates/ferrox-models/src/mtp.rs`; DeepSeek-V3 report §2.2, EAGLE's recipe):

    x_i    = eh_proj([enorm(embed(t_{i+1})); hnorm(h_i)])
    g_i    = one decoder layer of the model's own shape over x_0..x_i
    logits = head(head_norm(g_i))      over a sub-vocabulary (FR-Spec: the K tokens the model
                                       itself chooses most often in the data)

trained by self-distillation on `ferrox spec-data` output: the target of row i is the model's
own greedy choice at position i + 1 (`choices[i + 1]`), so any text on the machine serves.
The layer starts as a copy of the model's last layer, `eh_proj` as the identity on the hidden
half, `head_norm` as the model's output norm, the head as the model's output rows (frozen).

Writes a GGUF of the model's architecture holding `blk.N.*` (the layer) and `blk.N.nextn.*`
(N = the model's block count), the head's rows as `nextn.draft_head` and their token ids as
`nextn.draft_vocab` (float32). Save it as `NAME.draft-head.gguf` beside `NAME.gguf`: ferrox
loads it with the model and drafts with it (`--drafter auto`, the server's slots).

Usage: train_draft_head.py --model MODEL.gguf --data SPEC_DATA_DIR --out HEAD.gguf
       [--vocab 32768] [--epochs 2] [--lr 3e-4] [--batch 4] [--held-out 0.05] [--type q8_0]
Needs torch, numpy and gguf (pip).
"""

import argparse
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

import gguf
from gguf.quants import dequantize, quantize


def load_model(path: Path):
    r = gguf.GGUFReader(str(path))
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()

    def kv(key, default=None):
        f = r.fields.get(f"{arch}.{key}")
        return default if f is None else f.parts[-1][0].item()

    cfg = {
        "arch": arch,
        "blocks": kv("block_count"),
        "hidden": kv("embedding_length"),
        "ffn": kv("feed_forward_length"),
        "heads": kv("attention.head_count"),
        "kv_heads": kv("attention.head_count_kv"),
        "theta": kv("rope.freq_base", 10000.0),
        "eps": kv("attention.layer_norm_rms_epsilon", 1e-6),
    }
    tensors = {}
    for t in r.tensors:
        data = dequantize(t.data, t.tensor_type)
        tensors[t.name] = torch.from_numpy(np.ascontiguousarray(data, dtype=np.float32))
    return cfg, tensors


def rms(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rope(x, pos, theta):
    """NeoX halves (llama.cpp's qwen2 and HF's rotate_half)."""
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    ang = pos[:, None].float() * inv[None]
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class Head(torch.nn.Module):
    def __init__(self, cfg, t, vocab_ids):
        super().__init__()
        L, H = cfg["blocks"] - 1, cfg["hidden"]
        self.cfg = cfg
        p = lambda x: torch.nn.Parameter(x.clone())  # noqa: E731
        last = {k[len(f"blk.{L}.") :]: v for k, v in t.items() if k.startswith(f"blk.{L}.")}
        self.w = torch.nn.ParameterDict({k.replace(".", "_"): p(v) for k, v in last.items()})
        self.enorm = p(torch.ones(H))
        self.hnorm = p(torch.ones(H))
        eh = torch.zeros(H, 2 * H)
        eh[:, H:] = torch.eye(H)
        eh[:, :H] = torch.randn(H, H) * 0.01
        self.eh_proj = p(eh)
        self.head_norm = p(t["output_norm.weight"])
        head = t.get("output.weight", t["token_embd.weight"])
        self.register_buffer("head", head[vocab_ids].clone())
        self.register_buffer("embed", t["token_embd.weight"])

    def forward(self, h, nxt):
        """`h` [B, T, H] the model's states, `nxt` [B, T] the tokens that follow: logits over
        the sub-vocabulary [B, T, K]."""
        c, w = self.cfg, self.w
        eps, nh, nkv = c["eps"], c["heads"], c["kv_heads"]
        B, T, H = h.shape
        hd = H // nh
        x = F.linear(torch.cat([rms(self.embed[nxt], self.enorm, eps), rms(h, self.hnorm, eps)], -1), self.eh_proj)
        a = rms(x, w["attn_norm_weight"], eps)
        q = F.linear(a, w["attn_q_weight"], w["attn_q_bias"]).view(B, T, nh, hd).transpose(1, 2)
        k = F.linear(a, w["attn_k_weight"], w["attn_k_bias"]).view(B, T, nkv, hd).transpose(1, 2)
        v = F.linear(a, w["attn_v_weight"], w["attn_v_bias"]).view(B, T, nkv, hd).transpose(1, 2)
        pos = torch.arange(T)
        q, k = rope(q, pos, c["theta"]), rope(k, pos, c["theta"])
        k = k.repeat_interleave(nh // nkv, 1)
        v = v.repeat_interleave(nh // nkv, 1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + F.linear(o.transpose(1, 2).reshape(B, T, H), w["attn_output_weight"])
        f = rms(x, w["ffn_norm_weight"], eps)
        f = F.silu(F.linear(f, w["ffn_gate_weight"])) * F.linear(f, w["ffn_up_weight"])
        x = x + F.linear(f, w["ffn_down_weight"])
        return F.linear(rms(x, self.head_norm, eps), self.head)


def batches(windows, tokens, choices, hidden, batch, rng):
    order = rng.permutation(len(windows))
    for i in range(0, len(order), batch):
        ws = [windows[j] for j in order[i : i + batch]]
        n = min(int(l) for _, l in ws) - 1
        h = torch.stack([torch.from_numpy(hidden[s : s + n].astype(np.float32)) for s, _ in ws])
        nxt = torch.stack([torch.from_numpy(tokens[s + 1 : s + n + 1].astype(np.int64)) for s, _ in ws])
        tgt = torch.stack([torch.from_numpy(choices[s + 1 : s + n + 1].astype(np.int64)) for s, _ in ws])
        yield h, nxt, tgt


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--data", type=Path, required=True, action="append", help="a spec-data directory (repeatable)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--vocab", type=int, default=32768)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--held-out", type=float, default=0.05)
    ap.add_argument("--type", choices=["q8_0", "f16"], default="q8_0", help="the matrices' type")
    a = ap.parse_args()
    torch.manual_seed(0)
    rng = np.random.default_rng(0)

    cfg, t = load_model(a.model)
    if cfg["arch"] not in ("qwen2", "llama", "qwen3"):
        raise SystemExit(f"{cfg['arch']}: only qwen2/llama-shaped layers are handled")
    # Several `spec-data` directories are one data set (their windows renumbered).
    tokens, choices, hidden, windows, base = [], [], [], [], 0
    for d in a.data:
        tokens.append(np.load(d / "tokens.npy"))
        choices.append(np.load(d / "choices.npy"))
        hidden.append(np.load(d / "hidden.npy"))
        windows += [(int(s) + base, int(n)) for s, n in np.load(d / "windows.npy")]
        base += len(tokens[-1])
    tokens, choices, hidden = np.concatenate(tokens), np.concatenate(choices), np.concatenate(hidden)
    np.random.default_rng(2).shuffle(windows)
    # FR-Spec: the model's most frequent choices; rows whose target is outside are not scored.
    counts = np.bincount(choices, minlength=t["token_embd.weight"].shape[0])
    vocab_ids = np.sort(np.argsort(-counts, kind="stable")[: a.vocab])
    sub = np.full(counts.shape[0], -100, dtype=np.int64)
    sub[vocab_ids] = np.arange(len(vocab_ids))
    covered = counts[vocab_ids].sum() / counts.sum()
    print(f"{len(tokens)} positions in {len(windows)} windows; sub-vocabulary {len(vocab_ids)} covers {covered:.3f} of the choices")

    n_held = max(1, int(len(windows) * a.held_out))
    held, train = windows[:n_held], windows[n_held:]
    model = Head(cfg, t, torch.from_numpy(vocab_ids))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=a.lr, weight_decay=0.0)
    steps = a.epochs * math.ceil(len(train) / a.batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=a.lr, total_steps=steps, pct_start=0.05)
    sub_t = torch.from_numpy(sub)

    def evaluate():
        model.eval()
        hit = tot = 0
        with torch.no_grad():
            for h, nxt, tgt in batches(held, tokens, choices, hidden, a.batch, np.random.default_rng(1)):
                pred = torch.from_numpy(vocab_ids)[model(h, nxt).argmax(-1)]
                hit += (pred == tgt).sum().item()
                tot += tgt.numel()
        model.train()
        return hit / tot

    print(f"held-out agreement before training: {evaluate():.3f}")
    t0, step = time.time(), 0
    for ep in range(a.epochs):
        for h, nxt, tgt in batches(train, tokens, choices, hidden, a.batch, rng):
            loss = F.cross_entropy(model(h, nxt).flatten(0, 1), sub_t[tgt].flatten(), ignore_index=-100)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            if step % 50 == 0:
                print(f"step {step}/{steps} loss {loss.item():.3f} ({time.time() - t0:.0f} s)", flush=True)
        print(f"epoch {ep + 1}: held-out agreement {evaluate():.3f}", flush=True)

    L = cfg["blocks"]
    w = gguf.GGUFWriter(str(a.out), cfg["arch"])
    w.add_name(f"ferrox draft head for {a.model.name}")
    w.add_string("ferrox.draft_head.model", a.model.name)
    w.add_uint32("ferrox.draft_head.block", L)
    out = {f"blk.{L}.{k.replace('_weight', '.weight').replace('_bias', '.bias')}": v for k, v in model.w.items()}
    out[f"blk.{L}.nextn.enorm.weight"] = model.enorm
    out[f"blk.{L}.nextn.hnorm.weight"] = model.hnorm
    out[f"blk.{L}.nextn.eh_proj.weight"] = model.eh_proj
    out[f"blk.{L}.nextn.shared_head_norm.weight"] = model.head_norm
    out[f"blk.{L}.nextn.draft_head.weight"] = model.head
    out[f"blk.{L}.nextn.draft_vocab"] = torch.from_numpy(vocab_ids.astype(np.float32))
    for name, v in out.items():
        v = v.detach().float().numpy()
        # Matrices as Q8_0 (a quarter of float32's bytes to read per draft: drafting must be
        # nearly free) or float16; vectors as float32.
        if v.ndim == 2 and a.type == "q8_0" and v.shape[-1] % 32 == 0:
            q = quantize(v, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(name, q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(name, v.astype(np.float16) if v.ndim == 2 else v)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
