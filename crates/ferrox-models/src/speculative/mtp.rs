//! Drafting with the model's own MTP (NextN) block (`crate::mtp`), as vLLM and SGLang run
//! DeepSeek-V3's and GLM-4.5's: after every forward the block takes the verified rows' hidden
//! states with the tokens that follow them (keeping its own cache level with the model's),
//! then chains greedily from the token just sampled: its output state stands in for the
//! model's at the next position.
//!
//! A lookup drafter runs beside it: long verbatim copies (code edits) are the lookup's, so its
//! draft is taken when it starts with the block's first token and is at least as long;
//! otherwise the block's. Verification is the engine's, exact whatever is drafted.

use super::{Drafter, Observation};
use crate::decoder::Decoder;
use crate::mtp::MtpOut;
use crate::sampling::argmax;
use crate::TokenId;
use ferrox_core::cache::KvCache;

pub struct MtpDrafter {
    fallback: Box<dyn Drafter>,
    /// The block's cache: position `i` holds the pair (hidden state `i`, token `i + 1`).
    /// Created at the first observation (models without a block never make one).
    cache: Option<KvCache>,
    /// Positions of `cache` that hold committed pairs (chained drafts lie beyond).
    fed: usize,
    out: MtpOut,
    row: Vec<f32>,
    /// The block's draft and the history length (through the sampled token) it follows.
    draft: Vec<TokenId>,
    draft_for: usize,
}

impl MtpDrafter {
    /// The block's drafts, with `fallback`'s where they agree and copy further.
    pub fn new(fallback: Box<dyn Drafter>) -> MtpDrafter {
        MtpDrafter {
            fallback,
            cache: None,
            fed: 0,
            out: MtpOut::default(),
            row: Vec::new(),
            draft: Vec::new(),
            draft_for: usize::MAX,
        }
    }

    /// Feeds the pairs of `o`'s verified rows and chains `o.draft` tokens; `None` when the
    /// block cannot follow (its cache lags what `o` starts from: a prefix restored or copied
    /// from elsewhere, which it has no pairs for).
    fn advance(&mut self, dec: &Decoder, o: Observation<'_>) -> Option<()> {
        let d = dec.config.hidden_dim;
        if self.cache.is_none() {
            self.cache = dec.new_mtp_cache();
            self.fed = 0;
        }
        let cache = self.cache.as_mut()?;
        let c = o.history.len();
        // Pair i needs token i + 1: the last row's is `following`, when known.
        let end = if o.following.is_some() { c } else { c - 1 };
        if o.pos > self.fed.min(cache.len()) || end <= o.pos || (end - o.pos) * d > o.hidden.len() {
            self.fed = self.fed.min(o.pos);
            return None;
        }
        let tokens: Vec<TokenId> = (o.pos..end)
            .map(|i| match o.history.get(i + 1) {
                Some(&t) => t,
                None => o.following.expect("end < c without a following token"),
            })
            .collect();
        let k = tokens.len();
        let first_logit = if o.draft > 0 { k - 1 } else { k };
        dec.mtp_forward(
            &o.hidden[..k * d],
            &tokens,
            o.pos,
            cache,
            first_logit,
            &mut self.out,
        )
        .ok()?;
        self.fed = end;
        if o.draft == 0 {
            return Some(());
        }
        let block = dec.mtp.as_ref()?;
        let mut tok = block.token(argmax(&self.out.logits));
        self.draft.push(tok);
        for j in 1..o.draft {
            self.row.clear();
            self.row
                .extend_from_slice(&self.out.hidden[(self.out.hidden.len() - d)..]);
            let pos = end + j - 1;
            dec.mtp_forward(&self.row, &[tok], pos, cache, 0, &mut self.out)
                .ok()?;
            tok = block.token(argmax(&self.out.logits));
            self.draft.push(tok);
        }
        self.draft_for = c + 1;
        Some(())
    }
}

impl Drafter for MtpDrafter {
    fn propose_into(&mut self, history: &[TokenId], max: usize, out: &mut Vec<TokenId>) {
        let start = out.len();
        self.fallback.propose_into(history, max, out);
        if self.draft_for != history.len() || self.draft.is_empty() {
            return;
        }
        let copy = &out[start..];
        if copy.first() == self.draft.first() && copy.len() >= self.draft.len() {
            return;
        }
        out.truncate(start);
        out.extend(self.draft.iter().take(max));
    }

    fn finished(&mut self, history: &[TokenId], prompt_len: usize) {
        self.fallback.finished(history, prompt_len);
    }

    fn name(&self) -> &'static str {
        // Without a block (the model has none) this is its fallback, under that name.
        match self.cache {
            Some(_) => "mtp",
            None => self.fallback.name(),
        }
    }

    fn wants_hidden(&self) -> bool {
        true
    }

    fn observe(&mut self, dec: &Decoder, o: Observation<'_>) {
        self.draft.clear();
        self.draft_for = usize::MAX;
        if dec.mtp.is_some() && self.advance(dec, o).is_none() {
            self.draft.clear();
        }
    }

    fn resume_limit(&self) -> usize {
        match self.cache {
            Some(_) => self.fed,
            None => usize::MAX,
        }
    }
}
