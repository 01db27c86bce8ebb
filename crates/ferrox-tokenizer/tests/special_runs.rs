//! Special-token matching (issue 20): a long run of a character that special tokens repeat
//! (Gemma's user-defined tokens of 2 to 31 spaces, 1 to 31 newlines) costs memory linear in
//! the text, not one entry per (position, token); and the matching stays llama.cpp's
//! `tokenizer_st_partition` (longest token first, leftmost non-overlapping occurrences in the
//! unclaimed text), checked against a direct transcription of it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use ferrox_tokenizer::{SpecialTokens, TokenId, Tokenizer, TokenizerSpec};
use proptest::prelude::*;

/// Counts live bytes and their peak since the last `reset_peak`.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
/// Peak measurements run one at a time (the test harness runs tests on threads).
static MEASURE: Mutex<()> = Mutex::new(());

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let now = LIVE.fetch_add(l.size(), Ordering::Relaxed) + l.size();
        PEAK.fetch_max(now, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        // SAFETY: `p` came from `alloc` with this layout.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static A: Counting = Counting;

/// Bytes allocated at the peak of `f` beyond what was live before it.
fn peak_of<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let _one = MEASURE.lock().unwrap_or_else(|e| e.into_inner());
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let out = f();
    (out, PEAK.load(Ordering::Relaxed) - before)
}

#[path = "tokenizer_common/spm.rs"]
mod spm;

/// Gemma's whitespace tokens over a SentencePiece vocabulary with byte fallback.
fn gemma_like() -> Tokenizer {
    let mut pieces = vec![("▁".to_string(), 0.0, 1)];
    for k in 1..=31 {
        if k > 1 {
            pieces.push((" ".repeat(k), 0.0, 4));
        }
        pieces.push(("\n".repeat(k), 0.0, 4));
    }
    pieces.push(("<start_of_turn>".into(), 0.0, 3));
    spm::spm_vocab(
        pieces,
        TokenizerSpec {
            add_bos: Some(false),
            add_space_prefix: Some(false),
            ..Default::default()
        },
    )
}

#[test]
fn a_long_run_of_spaces_costs_memory_linear_in_the_text() {
    let tok = gemma_like();
    let id = |s: &str| tok.token_to_id(s).unwrap();
    for (c, n) in [(' ', 1_000_000usize), ('\n', 1_000_000)] {
        let text = c.to_string().repeat(n);
        let (ids, peak) = peak_of(|| tok.encode(&text, false, false));
        // Longest first: as many 31-character tokens as fit, then the rest in one token.
        let mut want = vec![id(&c.to_string().repeat(31)); n / 31];
        want.push(id(&c.to_string().repeat(n % 31)));
        assert_eq!(ids, want, "{c:?}");
        // One entry per (position, token) would be ~30 × 12 bytes a character.
        assert!(peak < 48 * n, "{c:?} × {n}: {peak} bytes at the peak");
        eprintln!("{c:?} × {n}: peak {peak} bytes");
    }
    // And it scales with the text: four times the text, at most ~four times the memory.
    let (_, small) = peak_of(|| tok.encode(&" ".repeat(250_000), false, false));
    let (_, big) = peak_of(|| tok.encode(&" ".repeat(1_000_000), false, false));
    assert!(big < 5 * small, "{small} → {big}");
}

/// llama.cpp's `tokenizer_st_partition`, transcribed: for each special token, longest first
/// (ties in id order), split every text fragment at its leftmost non-overlapping occurrences.
fn reference(tok: &Tokenizer, specials: &[TokenId], text: &str) -> Vec<TokenId> {
    enum F {
        Text(String),
        Tok(TokenId),
    }
    let mut order = specials.to_vec();
    order.sort_by_key(|&i| std::cmp::Reverse(tok.token_text(i).unwrap().len()));
    let mut frags = vec![F::Text(text.to_string())];
    for &id in &order {
        let pat = tok.token_text(id).unwrap();
        let mut next = Vec::new();
        for f in frags {
            let F::Text(mut s) = f else {
                next.push(f);
                continue;
            };
            while let Some(at) = s.find(pat) {
                if at > 0 {
                    next.push(F::Text(s[..at].to_string()));
                }
                next.push(F::Tok(id));
                s = s[at + pat.len()..].to_string();
            }
            if !s.is_empty() {
                next.push(F::Text(s));
            }
        }
        frags = next;
    }
    let mut out = Vec::new();
    for f in frags {
        match f {
            F::Tok(id) => out.push(id),
            // No special token is left in a fragment, and byte-level BPE has no context.
            F::Text(s) => out.extend(tok.encode(&s, false, true)),
        }
    }
    out
}

/// A byte-level BPE vocabulary (printable ASCII bytes and GPT-2's `Ġ`, `Ċ`) whose special
/// tokens overlap each other in every way: prefixes, suffixes, equal lengths, runs.
fn overlapping() -> (Tokenizer, Vec<TokenId>) {
    let mut tokens: Vec<String> = (b'!'..=b'~').map(|b| char::from(b).to_string()).collect();
    tokens.extend(["Ġ".to_string(), "Ċ".to_string()]);
    let mut types = vec![1; tokens.len()];
    let specials = [
        "ab", "ba", "aba", "bab", "abab", "  ", "   ", "\n\n", " \n", "<a>", "a>", "<a", "aa",
    ];
    let first = tokens.len() as TokenId;
    for (i, s) in specials.iter().enumerate() {
        tokens.push(s.to_string());
        types.push(if i % 2 == 0 { 4 } else { 3 });
    }
    let tok = Tokenizer::from_spec(TokenizerSpec {
        model: "gpt2".into(),
        pre: Some("qwen2".into()),
        tokens,
        token_types: Some(types),
        merges: Some(Vec::new()),
        ..Default::default()
    })
    .unwrap();
    let ids = (first..first + specials.len() as TokenId).collect();
    (tok, ids)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn matching_is_llama_cpps_partition(text in "[ab<> \n]{0,40}") {
        let (tok, specials) = overlapping();
        prop_assert_eq!(tok.encode(&text, false, true), reference(&tok, &specials, &text));
    }
}
