//! What travels as MPI words: the payload of one place's expert work — the (row, expert)
//! pairs, then the rows' f32 bit patterns — and the KV cache format a pipelined forward's
//! header carries, one explicit code per variant each way, so a type added later is a compile
//! error here rather than a cache that silently travels as another.

use ferrox_core::cache::{CacheFormat, KvType};
use ferrox_models::distributed::{ExchangeError, ExpertWork};

/// Appends `work` to `out`.
pub fn pack(work: &ExpertWork, out: &mut Vec<u32>) {
    out.reserve(2 * work.pairs.len() + work.rows.len());
    for &(r, e) in &work.pairs {
        out.push(r);
        out.push(e);
    }
    out.extend(work.rows.iter().map(|v| v.to_bits()));
}

/// The work of `pairs` pairs packed in `words`.
pub fn unpack(words: &[u32], pairs: usize, work: &mut ExpertWork) -> Result<(), ExchangeError> {
    let head = pairs
        .checked_mul(2)
        .filter(|&h| h <= words.len())
        .ok_or_else(|| {
            ExchangeError::Malformed(format!("{pairs} pairs in {} words", words.len()))
        })?;
    work.clear();
    work.pairs
        .extend(words[..head].chunks_exact(2).map(|p| (p[0], p[1])));
    work.rows
        .extend(words[head..].iter().map(|&b| f32::from_bits(b)));
    Ok(())
}

/// Why header words are not a [`CacheFormat`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatCodeError {
    #[error("unknown KV cache type code {0}")]
    Type(u64),
    #[error("bf16 products flag {0} (0 or 1)")]
    Bf16Flag(u64),
}

impl From<FormatCodeError> for ExchangeError {
    fn from(e: FormatCodeError) -> Self {
        ExchangeError::Malformed(format!("pipeline header: {e}"))
    }
}

/// Words of a [`CacheFormat`] in a header.
pub const FORMAT_WORDS: usize = 3;

/// A cache type's code. Codes are the wire format: a new type takes a new one.
fn type_code(t: KvType) -> u64 {
    match t {
        KvType::F32 => 0,
        KvType::F16 => 1,
        KvType::Q8_0 => 2,
        KvType::Bf16 => 3,
    }
}

fn code_type(c: u64) -> Result<KvType, FormatCodeError> {
    match c {
        0 => Ok(KvType::F32),
        1 => Ok(KvType::F16),
        2 => Ok(KvType::Q8_0),
        3 => Ok(KvType::Bf16),
        _ => Err(FormatCodeError::Type(c)),
    }
}

/// `format` as header words: key type, value type, bf16 products.
pub fn format_words(format: CacheFormat) -> [u64; FORMAT_WORDS] {
    let CacheFormat {
        k,
        v,
        bf16_products,
    } = format;
    [type_code(k), type_code(v), u64::from(bf16_products)]
}

/// The format of [`format_words`]' words.
pub fn words_format(w: [u64; FORMAT_WORDS]) -> Result<CacheFormat, FormatCodeError> {
    let bf16_products = match w[2] {
        0 => false,
        1 => true,
        f => return Err(FormatCodeError::Bf16Flag(f)),
    };
    Ok(CacheFormat {
        k: code_type(w[0])?,
        v: code_type(w[1])?,
        bf16_products,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every type and flag survives the trip; codes no format has are refused by name.
    #[test]
    fn cache_formats_round_trip_and_unknown_codes_are_refused() {
        let types = [KvType::F32, KvType::F16, KvType::Bf16, KvType::Q8_0];
        for k in types {
            for v in types {
                for bf16_products in [false, true] {
                    let f = CacheFormat {
                        k,
                        v,
                        bf16_products,
                    };
                    assert_eq!(words_format(format_words(f)), Ok(f));
                }
            }
        }
        let mut codes = types.map(type_code);
        codes.sort();
        assert_eq!(codes, [0, 1, 2, 3], "one code per type");
        assert_eq!(words_format([4, 0, 0]), Err(FormatCodeError::Type(4)));
        assert_eq!(words_format([0, 9, 0]), Err(FormatCodeError::Type(9)));
        assert_eq!(words_format([0, 0, 2]), Err(FormatCodeError::Bf16Flag(2)));
        let e = ExchangeError::from(FormatCodeError::Type(4));
        assert!(
            e.to_string().contains("unknown KV cache type code 4"),
            "{e}"
        );
    }

    #[test]
    fn round_trip_keeps_every_bit() {
        let work = ExpertWork {
            rows: vec![1.5, -0.0, f32::MIN_POSITIVE, 3e38],
            pairs: vec![(0, 3), (1, 3), (0, 7)],
        };
        let mut words = Vec::new();
        pack(&work, &mut words);
        let mut back = ExpertWork::default();
        unpack(&words, 3, &mut back).unwrap();
        assert_eq!(back.pairs, work.pairs);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&back.rows), bits(&work.rows));
        assert!(unpack(&words, 99, &mut back).is_err());
    }
}
