#!/usr/bin/env python3
"""Generates the encoder fixtures under crates/ferrox-models/tests/fixtures/encoders (run once in a
throw-away venv with torch, transformers, sentence-transformers; CI needs none of them):

- minilm_embeddings.json: 20 sentences (long and non-ASCII ones among them) and their
  all-MiniLM-L6-v2 embeddings from sentence-transformers (`SentenceTransformer(dir).encode`).
- wordpiece_ids.json: 200 strings and the ids sentence-transformers' tokenizer (HF `tokenizers`,
  truncation at max_seq_length 256) gives them.
- tiny-reranker/: a BertForSequenceClassification (1 label) with random weights (seed 0) and a
  small WordPiece vocabulary, saved by transformers as safetensors; rerank.json: query/document
  pairs and transformers' logits for them.

usage: gen_encoder_fixtures.py MINILM_DIR
"""
import json
import random
import sys
from pathlib import Path

import torch
from sentence_transformers import SentenceTransformer
from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
from tokenizers.models import WordPiece
from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

OUT = Path(__file__).resolve().parent.parent / "crates/ferrox-models/tests/fixtures/encoders"

SENTENCES = [
    "The cat sits on the mat.",
    "A quick brown fox jumps over the lazy dog.",
    "How do I reverse a linked list in Rust?",
    "Embeddings map text to vectors that capture meaning.",
    "Il pleut des cordes à Paris aujourd'hui.",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "東京は日本の首都です。",
    "Москва — столица России.",
    "¿Dónde está la biblioteca? Está cerca de la estación.",
    "Emoji test 🚀🔥 with symbols: ©®™ and math ∑∫√.",
    "résumé naïve café façade coöperate",
    "",
    "   leading and trailing spaces   ",
    "UPPER CASE and MiXeD CaSe TeXt",
    "Numbers 3.14159, 2,718 and 1e-10 in a sentence.",
    "def add(a, b):\n    return a + b  # a tiny function",
    " ".join(["The history of the region spans many centuries and many peoples."] * 30),
    "supercalifragilisticexpialidocious " * 3 + "x" * 150,
    "Ελληνικά: η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο.",
    "한국어 문장과 中文句子 mixed with English words.",
]


def strings_200():
    rng = random.Random(39)
    pieces = ["hello", "world", "Ünïcödé", "naïve", "日本語", "中文", "😀", "🤖", "don't",
              "U.S.A.", "e-mail", "$100", "50%", "C++", "x86_64", "\t", "\n", "  ", "\u00a0",
              "\u200b", "\u0301", "ﬁ", "Ⅻ", "①", "ß", "İstanbul", "ΣΊΣΥΦΟΣ", "#hashtag",
              "@user", "http://example.com/a?b=c", "[CLS]", "[SEP]", "[MASK]", "<s>", "a" * 120,
              "ｆｕｌｌｗｉｄｔｈ", "क्षत्रिय", "ไทย", "עברית", "العربية", "\x00", "\ufffd", "…", "—"]
    out = SENTENCES[:]
    while len(out) < 200:
        k = rng.randint(1, 8)
        out.append(rng.choice(["", " "]).join(rng.choice(pieces) for _ in range(k)))
    return out


def tiny_vocab():
    words = ["the", "a", "is", "of", "and", "to", "in", "cat", "dog", "fox", "paris", "capital",
             "france", "city", "rust", "code", "what", "where", "how", "weather", "sunny", "today",
             "animal", "runs", "fast", "##s", "##ing", "##ed", "##ly"]
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    punct = list(".,?!'-:;()")
    toks = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + letters + ["##" + c for c in letters]
    toks += [str(i) for i in range(10)] + punct + words
    seen = []
    for t in toks:
        if t not in seen:
            seen.append(t)
    return {t: i for i, t in enumerate(seen)}


def tiny_reranker():
    d = OUT / "tiny-reranker"
    d.mkdir(parents=True, exist_ok=True)
    vocab = tiny_vocab()
    tok = Tokenizer(WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", sep_token="[SEP]",
                                   pad_token="[PAD]", cls_token="[CLS]", mask_token="[MASK]",
                                   model_input_names=["input_ids", "token_type_ids",
                                                      "attention_mask"])
    fast.save_pretrained(d)
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2,
                     num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
                     num_labels=1, initializer_range=0.3)
    model = BertForSequenceClassification(cfg).eval()
    with torch.no_grad():  # non-trivial LayerNorms and biases
        for n, p in model.named_parameters():
            if n.endswith("bias") or "LayerNorm" in n:
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(d, safe_serialization=True)
    query = "what is the capital of france?"
    docs = ["paris is the capital of france.", "the cat runs fast.", "rust code",
            "where is the weather sunny today?", "a fox and a dog", "zzz qqq unknownword",
            " ".join(["the city of paris"] * 20)]
    enc = fast([query] * len(docs), docs, padding=True, truncation=True, max_length=64,
               return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits[:, 0].tolist()
    assert enc["token_type_ids"].max() == 1, "the pair's second segment has token type 1"
    ids = [[i for i, m in zip(row, mask) if m] for row, mask in
           zip(enc["input_ids"].tolist(), enc["attention_mask"].tolist())]
    (OUT / "rerank.json").write_text(json.dumps(
        {"query": query, "documents": docs, "scores": logits, "input_ids": ids}, indent=1,
        ensure_ascii=False))


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    st = SentenceTransformer(sys.argv[1], device="cpu")
    emb = st.encode(SENTENCES, convert_to_numpy=True)
    (OUT / "minilm_embeddings.json").write_text(json.dumps(
        {"sentences": SENTENCES,
         "embeddings": [[round(float(x), 7) for x in v] for v in emb]}, ensure_ascii=False))
    strings = strings_200()
    feats = st.tokenize(strings)
    ids = [[i for i, m in zip(row, mask) if m] for row, mask in
           zip(feats["input_ids"].tolist(), feats["attention_mask"].tolist())]
    (OUT / "wordpiece_ids.json").write_text(json.dumps(
        {"max_seq_length": st.max_seq_length, "strings": strings, "ids": ids},
        ensure_ascii=False))
    tiny_reranker()


if __name__ == "__main__":
    main()
