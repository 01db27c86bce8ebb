//! The payload of one place's expert work as MPI words: the (row, expert) pairs, then the
//! rows' f32 bit patterns.

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

#[cfg(test)]
mod tests {
    use super::*;

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
