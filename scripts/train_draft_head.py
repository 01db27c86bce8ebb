#!/usr/bin/env python3
"""Trains a draft head for a model that ships none, in the MTP (NextN) block's form ferrox
already runs (`crates/ferrox-models/src/mtp.rs`; DeepSeek-V3 report §2.2, EAGLE's recipe):

    x_i    = eh_proj([enorm(embed(t_{i+1})); hnorm(h_i)])
    g_i    = one decoder layer of the model's own shape over x_0..x_i
    logits = head(head_norm(g_i))      over a sub-vocabulary (FR-Spec: the K tokens the model
                                       itself chooses most often in the data)

trained by self-distillation on `ferrox spec-data` output: the target of row i is the model's
own next-token distribution at position i + 1 over the sub-vocabulary (its stored state times
the head's rows; weight `--soft`) and its greedy choice there (`choices[i + 1]`; the rest), so
any text on the machine serves. The whole distribution teaches more per position than the
choice alone (DistillSpec; EAGLE's and SpecForge's losses read the target's logits too).
With `--steps S` the chain is trained too, as decoding runs it (EAGLE-3's training-time test):
step s reads the state step s - 1 left (through `head_norm`; the GGUF says so with
`ferrox.draft_head.chain_normed`) and attends to the rows before it as the block's cache holds
them. In ChatML transcripts, rows outside assistant answers (system and user turns, which
decoding never drafts) weigh `--prompt-weight`; agreement is reported on all rows and on
answer rows, per step, a step counting only where every earlier one agreed.
The layer starts as a copy of the model's last layer, `eh_proj` as the identity on the hidden
half, `head_norm` as the model's output norm, the head as the model's output rows (frozen).

Writes a GGUF of the model's architecture holding `blk.N.*` (the layer) and `blk.N.nextn.*`
(N = the model's block count), the head's rows as `nextn.draft_head` and their token ids as
`nextn.draft_vocab` (float32). Save it as `NAME.draft-head.gguf` beside `NAME.gguf`: ferrox
loads it with the model and drafts with it (`--drafter auto`, the server's slots).

Usage: train_draft_head.py --model MODEL.gguf --data SPEC_DATA_DIR --out HEAD.gguf
       [--vocab 32768] [--epochs 2] [--lr 3e-4] [--batch 4] [--held-out 0.05] [--type q4_0|q5_0|q8_0|f16]
       [--steps 1] [--step-weight 0.5] [--prompt-weight 1.0] [--soft 0.7] [--plain-chain]
       train_draft_head.py --model MODEL.gguf --data DIR --init HEAD.gguf --epochs 0 [--steps S]
       (evaluates a head on every window of DIR; with --out, writes it again, e.g. as --type q4_0)
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
    f = r.fields["tokenizer.ggml.tokens"]
    cfg["vocab"] = [bytes(f.parts[i]).decode("utf-8", "replace") for i in f.data]
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

    def qkv(self, x, pos):
        c, w = self.cfg, self.w
        B, T, H = x.shape
        nh, nkv = c["heads"], c["kv_heads"]
        hd = H // nh
        a = rms(x, w["attn_norm_weight"], c["eps"])
        q = F.linear(a, w["attn_q_weight"], w["attn_q_bias"]).view(B, T, nh, hd).transpose(1, 2)
        k = F.linear(a, w["attn_k_weight"], w["attn_k_bias"]).view(B, T, nkv, hd).transpose(1, 2)
        v = F.linear(a, w["attn_v_weight"], w["attn_v_bias"]).view(B, T, nkv, hd).transpose(1, 2)
        q, k = rope(q, pos, c["theta"]), rope(k, pos, c["theta"])
        return q, k.repeat_interleave(nh // nkv, 1), v.repeat_interleave(nh // nkv, 1)

    def finish(self, x, o):
        """The layer after attention: output projection, residual, MLP; the block's state."""
        c, w = self.cfg, self.w
        B, T, H = x.shape
        x = x + F.linear(o.transpose(1, 2).reshape(B, T, H), w["attn_output_weight"])
        f = rms(x, w["ffn_norm_weight"], c["eps"])
        f = F.silu(F.linear(f, w["ffn_gate_weight"])) * F.linear(f, w["ffn_up_weight"])
        return x + F.linear(f, w["ffn_down_weight"])

    def inputs(self, h, nxt):
        eps = self.cfg["eps"]
        return F.linear(torch.cat([rms(self.embed[nxt], self.enorm, eps), rms(h, self.hnorm, eps)], -1), self.eh_proj)

    def logits(self, g):
        return F.linear(rms(g, self.head_norm, self.cfg["eps"]), self.head)

    def forward(self, h, nxt, steps=1, chain_normed=True):
        """`h` [B, T, H] the model's states, `nxt` [B, T] the tokens that follow: per step s
        (1-based), logits over the sub-vocabulary [B, T, K] of the draft's token s from each
        row i, as decoding chains them (EAGLE-3's training-time test): step s's row i stands at
        position i + s - 1, reads the state step s - 1 left there (through `head_norm` when
        `chain_normed`, as ferrox chains a head that says so) with the text's token, and
        attends to step 1's rows up to i and to its own earlier steps at i, as the block's
        cache holds them when it chains. Rows past the window's end are junk: mask them."""
        B, T, H = h.shape
        x = self.inputs(h, nxt)
        pos = torch.arange(T)
        q, k1, v1 = self.qkv(x, pos)
        g = self.finish(x, F.scaled_dot_product_attention(q, k1, v1, is_causal=True))
        out = [self.logits(g)]
        scale = 1.0 / math.sqrt(H // self.cfg["heads"])
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        diag_k, diag_v = [], []
        for s in range(2, steps + 1):
            prev = rms(g, self.head_norm, self.cfg["eps"]) if chain_normed else g
            x = self.inputs(prev, F.pad(nxt[:, s - 1 :], (0, s - 1)))
            q, k, v = self.qkv(x, pos + s - 1)
            diag_k.append(k)
            diag_v.append(v)
            sc1 = (q @ k1.transpose(-1, -2) * scale).masked_fill(~causal, float("-inf"))
            scd = torch.stack([(q * kd).sum(-1) * scale for kd in diag_k], -1)
            p = torch.softmax(torch.cat([sc1, scd], -1), -1)
            o = p[..., :T] @ v1 + sum(p[..., T + j, None] * vd for j, vd in enumerate(diag_v))
            g = self.finish(x, o)
            out.append(self.logits(g))
        return out


def batches(windows, tokens, choices, hidden, answer, batch, rng):
    """Per batch of windows: states, following tokens, targets (the model's choices) and
    whether each row's drafted token lies in an assistant answer."""
    order = rng.permutation(len(windows))
    for i in range(0, len(order), batch):
        ws = [windows[j] for j in order[i : i + batch]]
        n = min(int(l) for _, l in ws) - 1
        # States of rows 0..n: the head reads rows 0..n-1; row i + 1 is where the model chose
        # row i's target, so its logits are that target's distribution (the soft target).
        states = torch.stack([torch.from_numpy(hidden[s : s + n + 1].astype(np.float32)) for s, _ in ws])
        h, after = states[:, :n], states[:, 1:]
        nxt = torch.stack([torch.from_numpy(tokens[s + 1 : s + n + 1].astype(np.int64)) for s, _ in ws])
        tgt = torch.stack([torch.from_numpy(choices[s + 1 : s + n + 1].astype(np.int64)) for s, _ in ws])
        ans = torch.stack([torch.from_numpy(answer[s + 2 : s + n + 2]) for s, _ in ws])
        yield h, nxt, tgt, ans, after


def answer_rows(tokens, vocab):
    """Positions inside a ChatML assistant turn (after `<|im_start|>assistant\n`, through
    `<|im_end|>`): what decoding drafts. All positions when the vocabulary has no ChatML."""
    ids = {t: i for i, t in enumerate(vocab)}
    need = ("<|im_start|>", "<|im_end|>", "assistant", "\u010a")
    if any(t not in ids for t in need) or not (tokens == ids["<|im_start|>"]).any():
        return np.ones(len(tokens) + 2, bool)
    start, end, asst, nl = (ids[t] for t in need)
    out = np.zeros(len(tokens) + 2, bool)
    inside = False
    for i, t in enumerate(tokens.tolist()):
        if inside:
            out[i] = True
            inside = t != end
        elif i >= 2 and t == nl and tokens[i - 1] == asst and tokens[i - 2] == start:
            inside = True
    return out


def shifted(x, s, fill):
    """Row i of step s reads row i + s - 1 of step 1's tensors."""
    return F.pad(x[:, s - 1 :], (0, 0) * (x.dim() - 2) + (0, s - 1), value=fill) if s > 1 else x


def layer_tensor(L, key):
    """The GGUF name of the head layer's parameter `key` (`attn_q_weight` -> `blk.L.attn_q.weight`)."""
    return f"blk.{L}." + key.replace("_weight", ".weight").replace("_bias", ".bias")


def load_head(m, path, L):
    """A head written by this script, into `m` (to evaluate it, or to train it further)."""
    r = gguf.GGUFReader(str(path))
    ht = {x.name: torch.from_numpy(np.ascontiguousarray(dequantize(x.data, x.tensor_type), dtype=np.float32)) for x in r.tensors}
    with torch.no_grad():
        for k in m.w:
            m.w[k].copy_(ht[layer_tensor(L, k)].reshape(m.w[k].shape))
        for name, p in [("enorm", m.enorm), ("hnorm", m.hnorm), ("eh_proj", m.eh_proj), ("shared_head_norm", m.head_norm)]:
            p.copy_(ht[f"blk.{L}.nextn.{name}.weight"].reshape(p.shape))
    m.head = ht[f"blk.{L}.nextn.draft_head.weight"].reshape(-1, m.head.shape[1])
    return ht[f"blk.{L}.nextn.draft_vocab"].long().numpy()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--data", type=Path, required=True, action="append", help="a spec-data directory (repeatable)")
    ap.add_argument("--out", type=Path, help="the head's GGUF (required unless --epochs 0)")
    ap.add_argument("--init", type=Path, help="start from this head (its sub-vocabulary too); with --epochs 0, evaluate it")
    ap.add_argument("--vocab", type=int, default=32768)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--held-out", type=float, default=0.05)
    ap.add_argument("--steps", type=int, default=1, help="chained draft steps trained (training-time test)")
    ap.add_argument("--step-weight", type=float, default=0.5, help="each further step's loss weight, relative")
    ap.add_argument("--prompt-weight", type=float, default=1.0, help="loss weight of rows outside assistant answers")
    ap.add_argument("--soft", type=float, default=0.7, help="weight of the loss on the model's whole distribution (the rest on its choice)")
    ap.add_argument("--plain-chain", action="store_true", help="chain the block's state without `head_norm` (heads before chained training)")
    ap.add_argument("--type", choices=["q4_0", "q5_0", "q8_0", "f16"], default="q4_0", help="the layer's matrices' type (the projection and the head's rows stay Q8_0 unless f16; Q4_0 measured faster than Q8_0 at -0.4 points of agreement)")
    a = ap.parse_args()
    if a.out is None and a.epochs > 0:
        raise SystemExit("--out is required to train")
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
    answer = answer_rows(tokens, cfg["vocab"])
    np.random.default_rng(2).shuffle(windows)
    # FR-Spec: the model's most frequent choices; rows whose target is outside are not scored.
    counts = np.bincount(choices, minlength=t["token_embd.weight"].shape[0])
    vocab_ids = np.sort(np.argsort(-counts, kind="stable")[: a.vocab])
    model = Head(cfg, t, torch.from_numpy(vocab_ids))
    if a.init:
        vocab_ids = load_head(model, a.init, cfg["blocks"])
    sub = np.full(counts.shape[0], -100, dtype=np.int64)
    sub[vocab_ids] = np.arange(len(vocab_ids))
    covered = counts[vocab_ids].sum() / counts.sum()
    print(f"{len(tokens)} positions in {len(windows)} windows ({answer[: len(tokens)].mean():.2f} in answers); sub-vocabulary {len(vocab_ids)} covers {covered:.3f} of the choices")

    n_held = max(1, int(len(windows) * a.held_out))
    held, train = (windows, []) if a.epochs == 0 else (windows[:n_held], windows[n_held:])
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=a.lr, weight_decay=0.0)
    steps = max(1, a.epochs * math.ceil(len(train) / a.batch))
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=a.lr, total_steps=steps, pct_start=0.05)
    sub_t, ids_t = torch.from_numpy(sub), torch.from_numpy(vocab_ids)
    chain_normed = not a.plain_chain

    def evaluate():
        """Per step: agreement with the model's choice on every row and on answer rows; a
        step's token counts only where every earlier step agreed (what a chain keeps)."""
        model.eval()
        hit, tot = np.zeros((a.steps, 2)), np.zeros((a.steps, 2))
        with torch.no_grad():
            for h, nxt, tgt, ans, _ in batches(held, tokens, choices, hidden, answer, a.batch, np.random.default_rng(1)):
                ok = torch.ones_like(tgt, dtype=torch.bool)
                for s, lg in enumerate(model(h, nxt, a.steps, chain_normed), 1):
                    valid = torch.zeros_like(ok)
                    valid[:, : tgt.shape[1] - s + 1] = True
                    ok = ok & (ids_t[lg.argmax(-1)] == shifted(tgt, s, -1))
                    for j, m in enumerate([valid, valid & shifted(ans, s, False)]):
                        hit[s - 1, j] += (ok & m).sum().item()
                        tot[s - 1, j] += m.sum().item()
        model.train()
        return " ".join(f"step {s + 1}: {hit[s, 0] / tot[s, 0]:.3f} (answers {hit[s, 1] / max(tot[s, 1], 1):.3f})" for s in range(a.steps))

    print(f"held-out agreement before training: {evaluate()}", flush=True)
    t0, step = time.time(), 0
    for ep in range(a.epochs):
        for h, nxt, tgt, ans, after in batches(train, tokens, choices, hidden, answer, a.batch, rng):
            loss = 0.0
            if a.soft > 0:
                # Distillation on the model's whole distribution over the sub-vocabulary (its
                # state is stored after the output norm: its logits are a product with the
                # head's frozen rows), not only on its choice. Step s's targets are step 1's,
                # shifted.
                with torch.no_grad():
                    target = torch.softmax(F.linear(after, model.head), -1)
                if step == 0:
                    same = (ids_t[target.argmax(-1)] == tgt).float().mean().item()
                    print(f"the soft targets' argmax is the model's choice on {same:.3f} of rows", flush=True)
            for s, lg in enumerate(model(h, nxt, a.steps, chain_normed), 1):
                w = torch.where(shifted(ans, s, False), 1.0, a.prompt_weight).flatten()
                ce = F.cross_entropy(lg.flatten(0, 1), sub_t[shifted(tgt, s, 0)].flatten(), ignore_index=-100, reduction="none")
                if a.soft > 0:
                    p = shifted(target, s, 0.0).flatten(0, 1)
                    soft = -(p * torch.log_softmax(lg.flatten(0, 1), -1)).sum(-1)
                    ce = (1.0 - a.soft) * ce + a.soft * soft
                valid = (sub_t[shifted(tgt, s, 0)].flatten() != -100).float()
                valid.view(tgt.shape)[:, tgt.shape[1] - s + 1 :] = 0.0
                loss = loss + a.step_weight ** (s - 1) * (ce * w * valid).sum() / (w * valid).sum().clamp(min=1.0)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            if step % 50 == 0:
                print(f"step {step}/{steps} loss {loss.item():.3f} ({time.time() - t0:.0f} s)", flush=True)
        print(f"epoch {ep + 1}: held-out agreement {evaluate()}", flush=True)
    if a.out is None:
        return

    L = cfg["blocks"]
    w = gguf.GGUFWriter(str(a.out), cfg["arch"])
    w.add_name(f"ferrox draft head for {a.model.name}")
    w.add_string("ferrox.draft_head.model", a.model.name)
    w.add_uint32("ferrox.draft_head.block", L)
    # How the head was trained to chain: from its own state through `head_norm`, or as is.
    w.add_bool("ferrox.draft_head.chain_normed", chain_normed)
    out = {layer_tensor(L, k): v for k, v in model.w.items()}
    out[f"blk.{L}.nextn.enorm.weight"] = model.enorm
    out[f"blk.{L}.nextn.hnorm.weight"] = model.hnorm
    out[f"blk.{L}.nextn.eh_proj.weight"] = model.eh_proj
    out[f"blk.{L}.nextn.shared_head_norm.weight"] = model.head_norm
    out[f"blk.{L}.nextn.draft_head.weight"] = model.head
    out[f"blk.{L}.nextn.draft_vocab"] = torch.from_numpy(vocab_ids.astype(np.float32))
    for name, v in out.items():
        v = v.detach().float().numpy()
        # Matrices quantized (drafting must be nearly free: every byte is read per draft; the
        # projection and the head's rows, which decide the token, stay Q8_0) or float16;
        # vectors as float32.
        ty = a.type if ".nextn." not in name or a.type == "f16" else "q8_0"
        if v.ndim == 2 and ty != "f16" and v.shape[-1] % 32 == 0:
            qt = getattr(gguf.GGMLQuantizationType, ty.upper())
            w.add_tensor(name, quantize(v, qt), raw_dtype=qt)
        else:
            w.add_tensor(name, v.astype(np.float16) if v.ndim == 2 else v)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
