//! Fill-in-the-middle prompts, laid out as llama-server's `/infill` lays them out (llama.cpp
//! `tools/server/server-common.cpp`, `format_prompt_infill`; the repo-level pattern of
//! Qwen2.5-Coder, arXiv 2409.12186):
//!
//! ```text
//! [FIM_REP]myproject\n[FIM_SEP]file0\n text0 … [FIM_SEP]filename\n
//! [BOS][FIM_PRE] prefix prompt [FIM_SUF] suffix [FIM_MID]
//! ```
//!
//! The FIM token ids come from the GGUF keys (`tokenizer.ggml.fim_*_token_id`), else from the
//! token texts llama.cpp's vocabulary loader looks for (`src/llama-vocab.cpp`).

use crate::vocab::Vocab;
use crate::{TokenId, Tokenizer, TokenizerError};

/// llama-server's default batch (`-b 2048`): the prefix and the suffix share one batch.
pub const FIM_BATCH: usize = 2048;

/// The FIM token ids a vocabulary has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FimIds {
    pub pre: Option<TokenId>,
    pub suf: Option<TokenId>,
    pub mid: Option<TokenId>,
    pub pad: Option<TokenId>,
    /// The repository-name token (`<|repo_name|>`).
    pub rep: Option<TokenId>,
    /// The file separator (`<|file_sep|>`).
    pub sep: Option<TokenId>,
}

// Token texts llama.cpp looks for when the GGUF names no FIM token ids.
pub(crate) const FIM_PAD_TEXTS: &[&str] =
    &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
pub(crate) const FIM_REP_TEXTS: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
pub(crate) const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];
pub(crate) const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
pub(crate) const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
pub(crate) const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];

impl FimIds {
    /// GGUF's name of each id (`tokenizer.ggml.fim_{name}_token_id`), in [`slots`](Self::slots)
    /// order.
    const GGUF_NAMES: [&'static str; 6] = ["pre", "suf", "mid", "pad", "rep", "sep"];

    /// The ids, one list for every reading and filling of them.
    fn slots(&mut self) -> [&mut Option<TokenId>; 6] {
        let FimIds {
            pre,
            suf,
            mid,
            pad,
            rep,
            sep,
        } = self;
        [pre, suf, mid, pad, rep, sep]
    }

    /// The ids `id(name)` gives for each of [`GGUF_NAMES`](Self::GGUF_NAMES).
    pub(crate) fn read<E>(id: impl Fn(&str) -> Result<Option<TokenId>, E>) -> Result<Self, E> {
        let mut ids = FimIds::default();
        for (slot, name) in ids.slots().into_iter().zip(Self::GGUF_NAMES) {
            *slot = id(name)?;
        }
        Ok(ids)
    }

    /// Each id passed through `f` (the spec's ids checked against the vocabulary).
    pub(crate) fn map(mut self, f: impl Fn(Option<TokenId>) -> Option<TokenId>) -> Self {
        for slot in self.slots() {
            *slot = f(*slot);
        }
        self
    }

    /// Fills the ids the metadata did not give from the token texts (first listed text wins).
    pub(crate) fn detect(&mut self, vocab: &Vocab) {
        let find = |list: &[&str]| list.iter().find_map(|t| vocab.get(t));
        let texts = [
            FIM_PRE_TEXTS,
            FIM_SUF_TEXTS,
            FIM_MID_TEXTS,
            FIM_PAD_TEXTS,
            FIM_REP_TEXTS,
            FIM_SEP_TEXTS,
        ];
        for (slot, list) in self.slots().into_iter().zip(texts) {
            if slot.is_none() {
                *slot = find(list);
            }
        }
    }
}

/// One `input_extra` chunk: another file of the project.
#[derive(Debug, Clone, Copy)]
pub struct FimChunk<'a> {
    /// llama-server names a chunk without one `tmp`.
    pub filename: Option<&'a str>,
    pub text: &'a str,
}

/// What to fill in: the text before and after the hole, other files, and the start of the
/// middle (`prompt`, special tokens parsed) the answer continues.
#[derive(Debug, Clone, Copy, Default)]
pub struct FimInput<'a> {
    pub prefix: &'a str,
    pub suffix: &'a str,
    pub extra: &'a [FimChunk<'a>],
    pub prompt: &'a str,
}

impl Tokenizer {
    /// The vocabulary's FIM token ids.
    pub fn fim_ids(&self) -> FimIds {
        self.fim
    }

    /// The prompt tokens of a fill-in-the-middle request in a context of `ctx` tokens that
    /// will generate up to `max_tokens` (None: unbounded, llama-server's `n_predict = -1`).
    /// Budget as llama-server's: the prefix's last 3/4 of a batch, the suffix's first 1/4 (less
    /// the prompt), the extra chunks' tail whatever the context leaves beyond a batch and
    /// twice the answer. A vocabulary without the prefix, suffix or middle token is an error
    /// naming the missing ones.
    pub fn fim_prompt(
        &self,
        input: &FimInput<'_>,
        ctx: usize,
        max_tokens: Option<usize>,
    ) -> Result<Vec<TokenId>, TokenizerError> {
        let f = self.fim;
        let (Some(pre), Some(suf), Some(mid)) = (f.pre, f.suf, f.mid) else {
            let missing: Vec<&str> = [(f.pre, "prefix"), (f.suf, "suffix"), (f.mid, "middle")]
                .into_iter()
                .filter(|(id, _)| id.is_none())
                .map(|(_, name)| name)
                .collect();
            return Err(TokenizerError::NoFim(missing.join(", ")));
        };
        let text = |t: &str| self.encode(t, false, false);
        let mut extra = Vec::new();
        if let Some(rep) = f.rep {
            extra.push(rep);
            extra.extend(text("myproject\n"));
        }
        for chunk in input.extra {
            match f.sep {
                Some(sep) => {
                    extra.push(sep);
                    extra.extend(text(&format!("{}\n", chunk.filename.unwrap_or("tmp"))));
                }
                None => extra.extend(text("\n\n--- snippet ---\n\n")),
            }
            extra.extend(text(chunk.text));
        }
        if let Some(sep) = f.sep {
            extra.push(sep);
            extra.extend(text("filename\n"));
        }
        let prefix = text(input.prefix);
        let suffix = text(input.suffix);
        let prompt = self.encode(input.prompt, false, true);

        // A context smaller than two batches gets half of it per batch.
        let batch = FIM_BATCH.min(ctx / 2);
        let n_prefix = prefix.len().min(3 * (batch / 4));
        let n_suffix = suffix
            .len()
            .min((batch / 4).saturating_sub(2 + prompt.len()));
        let n_predict = max_tokens.map_or(-1, |m| m as i64);
        let room = (ctx as i64 - batch as i64 - 2 * n_predict).max(0) as usize;
        let n_extra = room.min(extra.len());

        let mut out = Vec::with_capacity(n_extra + n_prefix + n_suffix + prompt.len() + 4);
        out.extend_from_slice(&extra[extra.len() - n_extra..]);
        if self.adds_bos() {
            out.extend(self.special.bos);
        }
        out.push(pre);
        out.extend_from_slice(&prefix[prefix.len() - n_prefix..]);
        out.extend_from_slice(&prompt);
        out.push(suf);
        out.extend_from_slice(&suffix[..n_suffix]);
        out.push(mid);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TokenizerSpec;

    const FIM: [&str; 5] = [
        "<|fim_prefix|>",
        "<|fim_suffix|>",
        "<|fim_middle|>",
        "<|repo_name|>",
        "<|file_sep|>",
    ];

    /// Byte tokens (so any text is one token a byte) and the FIM tokens named in `fim`.
    fn vocab(fim: &[&str], add_bos: bool) -> Tokenizer {
        crate::tests::spm::spm_vocab(
            fim.iter().map(|t| (t.to_string(), 0.0, 3)),
            TokenizerSpec {
                add_bos: Some(add_bos),
                add_space_prefix: Some(false),
                ..Default::default()
            },
        )
    }

    /// One `input_extra` chunk.
    fn chunk<'a>(filename: Option<&'a str>, text: &'a str) -> FimChunk<'a> {
        FimChunk { filename, text }
    }

    fn bytes(s: &str) -> Vec<TokenId> {
        s.bytes().map(|b| 3 + b as TokenId).collect()
    }

    /// The prompt as text: FIM tokens by name, bytes as characters.
    fn show(t: &Tokenizer, ids: &[TokenId]) -> String {
        ids.iter()
            .map(|&id| match id {
                3..=258 => ((id - 3) as u8 as char).to_string(),
                _ => t.token_text(id).unwrap().to_string(),
            })
            .collect()
    }

    #[test]
    fn repo_level_layout_as_llama_server() {
        let t = vocab(&FIM, false);
        let extra = [chunk(Some("a.py"), "x=1\n"), chunk(None, "y")];
        let input = FimInput {
            prefix: "ab",
            suffix: "cd",
            extra: &extra,
            prompt: "<|fim_suffix|>z",
        };
        let ids = t.fim_prompt(&input, 4096, Some(16)).unwrap();
        assert_eq!(
            show(&t, &ids),
            "<|repo_name|>myproject\n<|file_sep|>a.py\nx=1\n<|file_sep|>tmp\ny\
             <|file_sep|>filename\n<|fim_prefix|>ab<|fim_suffix|>z<|fim_suffix|>cd<|fim_middle|>"
        );
        // Special-token text in the code is text; in `prompt` it is the token.
        let input = FimInput {
            prefix: "<|fim_middle|>",
            ..input
        };
        let ids = t.fim_prompt(&input, 4096, Some(16)).unwrap();
        assert!(ids.windows(14).any(|w| w == bytes("<|fim_middle|>")));
    }

    #[test]
    fn budget_keeps_the_prefix_tail_the_suffix_head_and_the_extra_tail() {
        let t = vocab(&FIM, true);
        let prefix = "p".repeat(30) + "P";
        let suffix = "S".to_string() + &"s".repeat(30);
        let text = "e".repeat(40);
        let extra = [chunk(Some("f"), &text)];
        let input = FimInput {
            prefix: &prefix,
            suffix: &suffix,
            extra: &extra,
            prompt: "zz",
        };
        // ctx 64: a batch of 32; the prefix's last 24 tokens, the suffix's first 8 - 2 - 2;
        // the extras' last 64 - 32 - 2 * 5 = 22 tokens, then BOS.
        let ids = t.fim_prompt(&input, 64, Some(5)).unwrap();
        let mut want = Vec::new();
        let all_extra = [
            vec![t.fim.rep.unwrap()],
            bytes("myproject\n"),
            vec![t.fim.sep.unwrap()],
            bytes("f\n"),
            bytes(&"e".repeat(40)),
            vec![t.fim.sep.unwrap()],
            bytes("filename\n"),
        ]
        .concat();
        want.extend_from_slice(&all_extra[all_extra.len() - 22..]);
        want.push(1);
        want.push(t.fim.pre.unwrap());
        want.extend(bytes(&prefix[prefix.len() - 24..]));
        want.extend(bytes("zz"));
        want.push(t.fim.suf.unwrap());
        want.extend(bytes(&suffix[..4]));
        want.push(t.fim.mid.unwrap());
        assert_eq!(show(&t, &ids), show(&t, &want));
        // Unbounded (n_predict -1) leaves the extras ctx - batch + 2 tokens.
        let ids = t.fim_prompt(&input, 64, None).unwrap();
        assert_eq!(ids.len(), 34 + 1 + 1 + 24 + 2 + 1 + 4 + 1);
    }

    #[test]
    fn without_repo_and_file_tokens_chunks_get_llama_server_separator() {
        let t = vocab(&FIM[..3], false);
        let extra = [chunk(Some("a.py"), "x")];
        let input = FimInput {
            prefix: "a",
            suffix: "b",
            extra: &extra,
            ..FimInput::default()
        };
        let ids = t.fim_prompt(&input, 4096, Some(8)).unwrap();
        // SentencePiece writes the separator's spaces as `▁` (here in byte tokens).
        assert_eq!(
            t.decode(&ids),
            "\n\n---▁snippet▁---\n\nx<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>"
        );
    }

    #[test]
    fn a_vocabulary_without_fim_tokens_names_what_is_missing() {
        let t = vocab(&FIM[1..2], false);
        let e = t.fim_prompt(&FimInput::default(), 4096, None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "fill-in-the-middle is not supported by this model: its vocabulary has no prefix, middle token"
        );
        assert_eq!(vocab(&[], false).fim_ids(), FimIds::default());
    }
}
