#!/usr/bin/env python3
"""Writes a BERT-family model directory (sentence-transformers embedding model or a
BertForSequenceClassification cross-encoder, safetensors) as a GGUF the way llama.cpp's
convert_hf_to_gguf.py `BertModel` lays it out, without torch.

Facts followed (llama.cpp gguf-py constants and conversion/bert): arch `bert`; keys
`bert.context_length` (max_position_embeddings), `bert.embedding_length`,
`bert.feed_forward_length`, `bert.block_count`, `bert.attention.head_count`,
`bert.attention.layer_norm_epsilon`, `bert.attention.causal` = false, `bert.token_type_count`, `bert.pooling_type`
(1 mean, 2 CLS from sentence-transformers' 1_Pooling/config.json; 4 rank for a classifier);
tokenizer `bert` with the "phantom space" vocabulary (word-initial pieces get a U+2581 prefix,
`##` continuations lose it, `[...]` tokens stay), token types 1 normal / 3 control, and the
`[CLS]` `[SEP]` `[UNK]` `[PAD]` `[MASK]` ids. Tensors: token_embd, token_types, position_embd,
token_embd_norm, blk.N.{attn_q,attn_k,attn_v,attn_output,attn_output_norm,ffn_up,ffn_down,
layer_output_norm}, cls (pooler dense) and cls.output (classifier).

usage: bert_to_gguf.py MODEL_DIR OUT.gguf [--f16]
"""
import json
import sys
from pathlib import Path

import gguf
import numpy as np


def read_safetensors(path):
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    body = raw[8 + n:]
    kinds = {"F32": np.float32, "F16": np.float16, "I64": np.int64}
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(body[a:b], dtype=kinds[t["dtype"]]).reshape(t["shape"])
    return out


def pooling_type(d: Path, cfg):
    if "BertForSequenceClassification" in cfg.get("architectures", []):
        return 4
    pc = json.loads((d / "1_Pooling" / "config.json").read_text())
    if pc.get("pooling_mode_cls_token"):
        return 2
    if pc.get("pooling_mode_mean_tokens"):
        return 1
    raise SystemExit("unsupported pooling")


def phantom(tok):
    if tok.startswith("[") and tok.endswith("]"):
        return tok
    if tok.startswith("##"):
        return tok[2:]
    return "\u2581" + tok


def main():
    d, out = Path(sys.argv[1]), sys.argv[2]
    f16 = "--f16" in sys.argv[3:]
    cfg = json.loads((d / "config.json").read_text())
    tj = json.loads((d / "tokenizer.json").read_text())
    vocab = tj["model"]["vocab"]
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    special = {a["content"]: a["id"] for a in tj.get("added_tokens", []) if a.get("special")}
    w = gguf.GGUFWriter(out, "bert")
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_layer_norm_eps(cfg.get("layer_norm_eps", 1e-12))
    w.add_causal_attention(False)
    # llama.cpp refuses a bert GGUF without it ("needs to define token type count").
    w.add_token_type_count(cfg.get("type_vocab_size", 2))
    w.add_pooling_type(gguf.PoolingType(pooling_type(d, cfg)))
    w.add_file_type(1 if f16 else 0)
    w.add_tokenizer_model("bert")
    w.add_token_list([phantom(t) for t in tokens])
    w.add_token_types([3 if t in special else 1 for t in tokens])
    w.add_bos_token_id(vocab["[CLS]"])  # llama.cpp keeps [CLS] as BOS (no cls key)
    w.add_sep_token_id(vocab["[SEP]"])
    w.add_unk_token_id(vocab["[UNK]"])
    w.add_pad_token_id(vocab["[PAD]"])
    w.add_mask_token_id(vocab["[MASK]"])

    st = read_safetensors(d / "model.safetensors")
    p = "bert." if "bert.embeddings.word_embeddings.weight" in st else ""
    names = {
        f"{p}embeddings.word_embeddings": "token_embd",
        f"{p}embeddings.token_type_embeddings": "token_types",
        f"{p}embeddings.position_embeddings": "position_embd",
        f"{p}embeddings.LayerNorm": "token_embd_norm",
        f"{p}pooler.dense": "cls",
        "classifier": "cls.output",
    }
    per_layer = {
        "attention.self.query": "attn_q",
        "attention.self.key": "attn_k",
        "attention.self.value": "attn_v",
        "attention.output.dense": "attn_output",
        "attention.output.LayerNorm": "attn_output_norm",
        "intermediate.dense": "ffn_up",
        "output.dense": "ffn_down",
        "output.LayerNorm": "layer_output_norm",
    }
    for i in range(cfg["num_hidden_layers"]):
        for hf, g in per_layer.items():
            names[f"{p}encoder.layer.{i}.{hf}"] = f"blk.{i}.{g}"
    rank = pooling_type(d, cfg) == 4
    for name, t in st.items():
        base, _, part = name.rpartition(".")
        if base not in names or (names[base] == "cls" and not rank):
            continue  # the pooler of an embedding model is unused, as llama.cpp drops it
        g = f"{names[base]}.{part}"
        t = t.astype(np.float32)
        if f16 and t.ndim == 2 and not g.startswith(("token_types", "position_embd")):
            t = t.astype(np.float16)
        w.add_tensor(g, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
