"""Encode throughput of HF `tokenizers` (Python) built equivalently to ferrox's GGUF tokenizers.

Usage: python3 tokenizer_hf.py MODEL.gguf CORPUS.txt [ids.json]
Needs: pip install gguf tokenizers. Prints `<name>: <tokens> tokens, <MB/s> MB/s` (best of 3);
with ids.json (a JSON list of ferrox's ids for the same text) also whether the ids are equal.
Qwen2 (byte-level BPE): BPE(vocab, merges) + Split(qwen2 regex, isolated) + ByteLevel.
Gemma 3 (SentencePiece): BPE with byte fallback and merges derived from the scores (as
transformers' converters do), spaces replaced by U+2581, control and user-defined tokens added.
"""
import json, sys, time
import gguf
from tokenizers import Tokenizer, Regex, AddedToken
from tokenizers.models import BPE
from tokenizers import pre_tokenizers, decoders, normalizers

QWEN2 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"

def field(r, k):
    f = r.fields.get(k)
    if f is None:
        return None
    if f.types[0] == gguf.GGUFValueType.ARRAY:
        return [f.contents(i) for i in range(len(f.data))]
    return f.contents()

def build(path):
    r = gguf.GGUFReader(path)
    toks = field(r, 'tokenizer.ggml.tokens'); types = field(r, 'tokenizer.ggml.token_type')
    vocab = {t: i for i, t in enumerate(toks)}
    model = field(r, 'tokenizer.ggml.model')
    if model == 'gpt2':
        pre = field(r, 'tokenizer.ggml.pre')
        assert pre == 'qwen2', f'only qwen2 is set up here, got {pre}'
        merges = [tuple(m.split(' ', 1)) for m in field(r, 'tokenizer.ggml.merges')]
        tk = Tokenizer(BPE(vocab=vocab, merges=merges))
        tk.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2), behavior='isolated', invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tk.decoder = decoders.ByteLevel()
    else:
        scores = field(r, 'tokenizer.ggml.scores')
        merges = []
        for t, i in vocab.items():
            if types[i] != 1:
                continue
            for k in range(1, len(t)):
                a, b = t[:k], t[k:]
                if a in vocab and b in vocab:
                    merges.append((-scores[i], vocab[a], vocab[b], a, b))
        merges.sort()
        tk = Tokenizer(BPE(vocab=vocab, merges=[(m[3], m[4]) for m in merges], byte_fallback=True,
                           fuse_unk=True, unk_token='<unk>'))
        tk.normalizer = normalizers.Replace(' ', '▁')
        tk.decoder = decoders.Sequence([decoders.Replace('▁', ' '), decoders.ByteFallback(), decoders.Fuse()])
        tk.add_tokens([AddedToken(toks[i], special=False, normalized=False) for i in range(len(toks)) if types[i] == 4])
    tk.add_special_tokens([AddedToken(toks[i], special=True, normalized=False) for i in range(len(toks)) if types[i] == 3])
    return tk

def main():
    path, corpus = sys.argv[1], sys.argv[2]
    text = open(corpus, encoding='utf-8').read()
    tk = build(path)
    best = float('inf')
    for _ in range(3):
        t0 = time.perf_counter(); enc = tk.encode(text, add_special_tokens=False); best = min(best, time.perf_counter() - t0)
    name = path.rsplit('/', 1)[-1]
    print(f'{name}: {len(enc.ids)} tokens, {len(text.encode()) / best / 1e6:.2f} MB/s (HF tokenizers, Python)')
    if len(sys.argv) > 3:
        ours = json.load(open(sys.argv[3]))
        print('ids identical to ferrox:', enc.ids == ours)

main()
