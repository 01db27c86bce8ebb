//! Drafting with the model's own MTP (NextN) block (`crate::mtp`), as vLLM and SGLang run
//! DeepSeek-V3's and GLM-4.5's: after every forward the block takes the verified rows' hidden
//! states with the tokens that follow them (keeping its own cache level with the model's),
//! then chains greedily from the token just sampled: its output state stands in for the
//! model's at the next position.
//!
//! The block's first token comes with feeding the verified rows; the rest of its draft is only
//! chained when asked for. It drafts beside a lookup drafter ([`Beside`]): long verbatim copies
//! (code edits) are the lookup's, so its draft is taken, and the chain skipped, when it starts
//! with the block's first token. Verification is the engine's, exact whatever is drafted.

use super::beside::{Beside, ModelDraft};
use super::{DraftIn, Drafter, Observation};
use crate::decoder::Decoder;
use crate::mtp::MtpOut;
use crate::sampling::top2;
use crate::TokenId;
use ferrox_core::cache::KvCache;

/// The model's MTP block (or a trained draft head loaded as one) as a drafter's model part:
/// its cache, kept level with the model's, and its first draft token.
pub struct MtpBlock {
    /// The block's cache: position `i` holds the pair (hidden state `i`, token `i + 1`).
    /// Created at the first observation (models without a block never make one).
    cache: Option<KvCache>,
    /// The sequence position of the cache's first pair: 0, or where the block joined a
    /// history it had no pairs for (RoPE sees only distances, so counting its positions from
    /// there changes nothing but which rows it can attend to).
    base: usize,
    /// Sequence positions `base..fed` hold committed pairs (chained drafts lie beyond).
    fed: usize,
    out: MtpOut,
    /// The tokens of the pairs being fed (reused step to step).
    tokens: Vec<TokenId>,
    /// The block's state for its first draft token (what a chain continues from).
    row: Vec<f32>,
    /// The block's first draft token, its second choice there, and the history length
    /// (through the sampled token) they follow.
    first: Option<(TokenId, TokenId, usize)>,
    /// Its second choice beside each token of its last draft (a draft tree's branches).
    seconds: Vec<TokenId>,
    /// Verified rows not yet taken in ([`ModelDraft::defer`]): their hidden states, from
    /// sequence position `fed` on.
    waiting: Vec<f32>,
}

/// At most this many rows wait; past it they are dropped and the block starts over where it
/// is next fed (as after a prefix it never saw).
const MAX_WAITING: usize = 1024;

/// The block drafting beside a lookup drafter (`--drafter auto`, every server slot).
pub type MtpDrafter = Beside<MtpBlock>;

impl MtpDrafter {
    /// The model's block (where it has one), with `lookup` beside it.
    pub fn new(lookup: Box<dyn Drafter>) -> MtpDrafter {
        let block = MtpBlock {
            cache: None,
            base: 0,
            fed: 0,
            out: MtpOut::default(),
            tokens: Vec::new(),
            row: Vec::new(),
            first: None,
            seconds: Vec::new(),
            waiting: Vec::new(),
        };
        Beside::with(block, lookup)
    }
}

impl MtpBlock {
    /// Feeds the pairs of `o`'s verified rows and, when decoding, takes the block's first
    /// draft token (`None`: nothing taken). Where `o` starts past the pairs the block has (a
    /// prefix restored from the prompt cache or copied from another slot) or before them, the
    /// block starts over at `o`'s first row.
    fn advance(&mut self, dec: &Decoder, o: Observation<'_>) -> Option<()> {
        let d = dec.config.hidden_dim;
        if self.cache.is_none() {
            self.cache = dec.new_mtp_cache();
            (self.base, self.fed) = (0, 0);
        }
        let cache = self.cache.as_mut()?;
        let c = o.history.len();
        // Pair i needs token i + 1: the last row's is `following`, when known.
        let end = if o.following.is_some() { c } else { c - 1 };
        if end <= o.pos || (end - o.pos) * d > o.hidden.len() {
            return None;
        }
        if o.pos < self.base || o.pos > self.fed.min(self.base + cache.len()) {
            cache.truncate(0);
            (self.base, self.fed) = (o.pos, o.pos);
        }
        // Tokens pos + 1 .. end: the history's, then `following` for the last row.
        self.tokens.clear();
        self.tokens.extend_from_slice(&o.history[o.pos + 1..]);
        self.tokens.extend(o.following);
        self.tokens.truncate(end - o.pos);
        let k = self.tokens.len();
        let first_logit = if o.decoding { k - 1 } else { k };
        let (hidden, out) = (&o.hidden[..k * d], &mut self.out);
        dec.mtp_forward(
            hidden,
            &self.tokens,
            o.pos - self.base,
            cache,
            first_logit,
            out,
        )
        .ok()?;
        self.fed = end;
        if o.decoding {
            let block = dec.mtp.as_ref()?;
            let (best, second) = top2(&self.out.logits);
            self.first = Some((block.token(best), block.token(second), c + 1));
            self.row.clear();
            self.row.extend_from_slice(&self.out.hidden[(k - 1) * d..]);
        }
        Some(())
    }

    /// The sequence position after the waiting rows (they follow the pairs fed).
    fn waiting_end(&self, d: usize) -> usize {
        self.fed + self.waiting.len() / d
    }

    /// The block's draft after `first`: `max` tokens in all, chained from its state.
    fn chain(&mut self, dec: &Decoder, first: TokenId, max: usize, out: &mut Vec<TokenId>) {
        let (Some(cache), Some(block)) = (self.cache.as_mut(), dec.mtp.as_ref()) else {
            return;
        };
        out.push(first);
        self.seconds.extend(self.first.map(|(_, second, _)| second));
        let mut tok = first;
        for j in 1..max {
            // Token `fed + j` follows the state of position `fed + j - 1`.
            let pos = self.fed + j - 1 - self.base;
            if dec
                .mtp_forward(&self.row, &[tok], pos, cache, 0, &mut self.out)
                .is_err()
            {
                return;
            }
            let (best, second) = top2(&self.out.logits);
            tok = block.token(best);
            out.push(tok);
            self.seconds.push(block.token(second));
            self.row.clear();
            self.row.extend_from_slice(&self.out.hidden);
        }
    }
}

impl ModelDraft for MtpBlock {
    fn name(&self) -> Option<&'static str> {
        // Without a block (the model has none) the drafter is its lookup, under that name.
        self.cache.as_ref().map(|_| "mtp")
    }

    fn ready(&self, cx: &DraftIn<'_>) -> bool {
        self.first(cx).is_some()
    }

    fn first(&self, cx: &DraftIn<'_>) -> Option<TokenId> {
        let (t, _, at) = self.first?;
        (at == cx.history.len()).then_some(t)
    }

    fn draft(&mut self, cx: DraftIn<'_>, out: &mut Vec<TokenId>) {
        self.seconds.clear();
        if let Some(first) = self.first(&cx) {
            self.chain(cx.dec, first, cx.max, out);
        }
    }

    fn seconds(&self) -> &[TokenId] {
        &self.seconds
    }

    fn wants_hidden(&self) -> bool {
        true
    }

    fn observe(&mut self, dec: &Decoder, o: Observation<'_>) {
        // No first token unless this feed gives one (a feed it cannot take drafts none).
        self.first = None;
        if dec.mtp.is_none() {
            return;
        }
        let d = dec.config.hidden_dim;
        if self.waiting.is_empty() || self.waiting_end(d) != o.pos {
            self.waiting.clear();
            self.advance(dec, o);
            return;
        }
        // The waiting rows and these in one batch, as if fed all along.
        let mut rows = std::mem::take(&mut self.waiting);
        rows.extend_from_slice(o.hidden);
        let all = Observation {
            pos: self.fed,
            hidden: &rows,
            ..o
        };
        self.advance(dec, all);
        rows.clear();
        self.waiting = rows;
    }

    fn defer(&mut self, dec: &Decoder, o: Observation<'_>) {
        self.first = None;
        let d = dec.config.hidden_dim;
        // The verified rows: those of the history (the last one's pair waits for the token
        // sampled after it, which the next feed's history holds).
        let n = o.history.len().saturating_sub(o.pos);
        if dec.mtp.is_none() || n * d > o.hidden.len() {
            return;
        }
        if self.waiting_end(d) != o.pos || self.waiting.len() / d + n > MAX_WAITING {
            // Rows it cannot join to what it holds: it starts over at the next feed.
            self.waiting.clear();
            return;
        }
        self.waiting.extend_from_slice(&o.hidden[..n * d]);
    }

    fn resume_limit(&self) -> usize {
        match self.cache {
            Some(_) => self.fed,
            None => usize::MAX,
        }
    }
}
