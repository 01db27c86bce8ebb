//! Incremental detokenization for streaming: token pieces are bytes, and a UTF-8 character may
//! span several tokens, so bytes are held back until they form complete characters. Invalid
//! sequences become U+FFFD exactly where `String::from_utf8_lossy` would put them, so the
//! concatenated output equals the lossy decoding of all bytes at once.

use crate::{TokenId, Tokenizer};

pub struct StreamDecoder<'t> {
    tok: &'t Tokenizer,
    pending: Vec<u8>,
    strip_space: bool,
    skip_special: bool,
}

impl<'t> StreamDecoder<'t> {
    pub(crate) fn new(tok: &'t Tokenizer, strip_first_space: bool) -> Self {
        Self {
            tok,
            pending: Vec::new(),
            strip_space: strip_first_space,
            skip_special: false,
        }
    }

    /// A decoder for tokens that continue earlier text (no leading-space stripping).
    pub fn continuing(tok: &'t Tokenizer) -> Self {
        Self::new(tok, false)
    }

    /// Produce no text for control/unknown tokens (e.g. when streaming generated text).
    pub fn skip_special(mut self, skip: bool) -> Self {
        self.skip_special = skip;
        self
    }

    /// Adds one token; returns the text that is now complete (possibly empty).
    pub fn push(&mut self, id: TokenId) -> String {
        if self.skip_special && self.tok.is_special(id) {
            // llama.cpp: a suppressed first token still ends the leading-space rule.
            self.strip_space = false;
            return String::new();
        }
        let mut piece = self.tok.token_to_piece(id);
        if std::mem::take(&mut self.strip_space) {
            if let Some(rest) = piece.strip_prefix(b" ") {
                piece = rest;
            }
        }
        self.pending.extend_from_slice(piece);
        self.drain(false)
    }

    /// Flushes held-back bytes of an incomplete character (as U+FFFD).
    pub fn finish(&mut self) -> String {
        self.drain(true)
    }

    fn drain(&mut self, eof: bool) -> String {
        let mut out = String::new();
        let mut start = 0;
        loop {
            match std::str::from_utf8(&self.pending[start..]) {
                Ok(s) => {
                    out.push_str(s);
                    start = self.pending.len();
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    out.push_str(
                        std::str::from_utf8(&self.pending[start..start + valid]).unwrap_or(""),
                    );
                    start += valid;
                    match e.error_len() {
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            start += bad;
                        }
                        None if eof => {
                            out.push('\u{FFFD}');
                            start = self.pending.len();
                            break;
                        }
                        None => break,
                    }
                }
            }
        }
        self.pending.drain(..start);
        out
    }
}

impl Tokenizer {
    /// An incremental decoder for a sequence that starts here (the SentencePiece leading-space
    /// rule applies to its first token). Use [`StreamDecoder::continuing`] for text that
    /// continues a prompt.
    pub fn stream_decoder(&self) -> StreamDecoder<'_> {
        StreamDecoder::new(self, self.add_space_prefix)
    }
}
