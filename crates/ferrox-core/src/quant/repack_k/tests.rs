//! Tests of `repack_k`: round trips and the documented layouts, element by element.

// Element-by-element checks index the decoded quants by element number.
#![allow(clippy::needless_range_loop)]
use super::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Each layout with its repack and unpack, for the tests every type gets.
type Case = (
    &'static str,
    &'static Layout,
    fn(&[u8], usize, &mut [u8]),
    fn(&[u8], usize, usize, &mut [u8]),
);

const CASES: [Case; 6] = [
    ("q4k", &Q4K, repack_q4k, unpack_row_q4k),
    ("q6k", &Q6K, repack_q6k, unpack_row_q6k),
    ("q5k", &Q5K, repack_q5k, unpack_row_q5k),
    ("q2k", &Q2K, repack_q2k, unpack_row_q2k),
    ("q3k", &Q3K, repack_q3k, unpack_row_q3k),
    ("iq4xs", &IQ4XS, repack_iq4xs, unpack_row_iq4xs),
];

#[test]
fn x16_repack_round_trips() {
    for (name, layout, repack, unpack) in CASES {
        let mut rng = StdRng::seed_from_u64(3);
        for cols in [256, 1536, 4864] {
            let row_bytes = cols / QK_K * layout.bytes;
            let src: Vec<u8> = (0..ROWS * row_bytes).map(|_| rng.gen()).collect();
            let mut dst = vec![0u8; src.len()];
            repack(&src, cols, &mut dst);
            let mut row = vec![0u8; row_bytes];
            for lane in 0..ROWS {
                unpack(&dst, cols, lane, &mut row);
                assert_eq!(
                    row,
                    src[lane * row_bytes..][..row_bytes],
                    "{name} cols {cols} lane {lane}"
                );
            }
        }
    }
}

/// Repacks 16 random rows of one super-block of `layout`'s type and calls `check(i, b, tile)`
/// for each row `i` with its original block `b`.
fn check_tile(
    rng: &mut StdRng,
    layout: &Layout,
    repack: fn(&[u8], usize, &mut [u8]),
    check: impl Fn(usize, &[u8], &[u8]),
) {
    let src: Vec<u8> = (0..ROWS * layout.bytes).map(|_| rng.gen()).collect();
    let mut dst = vec![0u8; src.len()];
    repack(&src, QK_K, &mut dst);
    for i in 0..ROWS {
        check(i, &src[i * layout.bytes..][..layout.bytes], &dst);
    }
}

/// A Q4_K block's 4-bit quants in element order.
fn q4k_values(qs: &[u8]) -> [u8; QK_K] {
    let mut q = [0u8; QK_K];
    for (e, v) in q.iter_mut().enumerate() {
        let (n, h, l) = (e / 64, (e / 32) % 2, e % 32);
        *v = (qs[32 * n + l] >> (4 * h)) & 0x0F;
    }
    q
}

/// A Q6_K block's unsigned 6-bit quants in element order (ggml `dequantize_row_q6_K`).
fn q6k_values(ql: &[u8], qh: &[u8]) -> [u8; QK_K] {
    let mut q = [0u8; QK_K];
    for (e, v) in q.iter_mut().enumerate() {
        let (c, r) = (e / 128, e % 128);
        let low = (ql[64 * c + r % 64] >> (4 * (r / 64))) & 0x0F;
        let high = (qh[32 * c + r % 32] >> (2 * (r / 32))) & 3;
        *v = low | (high << 4);
    }
    q
}

/// The layout as documented, element by element (the round trip alone would accept any
/// bijection).
#[test]
fn x16_repack_layout_matches_doc() {
    let mut rng = StdRng::seed_from_u64(4);
    check_tile(&mut rng, &Q4K, repack_q4k, |i, b, tile| {
        let q = q4k_values(&b[16..][..128]);
        for e in 0..QK_K {
            let (j, p, bb, hi) = (e / 32, (e % 32) / 8, e % 4, (e % 8) / 4);
            let x = tile[Q4K_QS + 64 * (4 * j + p) + 4 * i + bb];
            assert_eq!((x >> (4 * hi)) & 0x0F, q[e], "q4k row {i} e {e}");
        }
    });
    check_tile(&mut rng, &Q6K, repack_q6k, |i, b, tile| {
        let q = q6k_values(&b[..128], &b[128..192]);
        for e in 0..QK_K {
            let (j, p, bb, hi) = (e / 16, (e % 16) / 8, e % 4, (e % 8) / 4);
            let base = Q6K_QS + 192 * j + 4 * i;
            let low = (tile[base + 64 * p + bb] >> (4 * hi)) & 0x0F;
            let c = (e % 16) / 4;
            let high = (tile[base + 128 + bb] >> (2 * c)) & 3;
            assert_eq!(low | (high << 4), q[e], "q6k row {i} e {e}");
        }
    });
}

/// The Q2_K, Q3_K, Q5_K and IQ4_XS layouts as documented, element by element, from ggml's
/// element definitions (`dequantize_row_q2_K` / `_q3_K` / `_q5_K` / `_iq4_xs`).
#[test]
fn x16_repack_q2k_q3k_q5k_iq4xs_layout_matches_doc() {
    let mut rng = StdRng::seed_from_u64(5);
    check_tile(&mut rng, &Q3K, repack_q3k, |i, b, tile| {
        for e in 0..QK_K {
            let (c, jj, l) = (e / 128, (e / 32) % 4, e % 32);
            let low = (b[32 + 32 * c + l] >> (2 * jj)) & 3;
            let high = (b[l] >> (e / 32)) & 1;
            let (j, cc, bb) = (e / 16, (e % 16) / 4, e % 4);
            let got_low = (tile[q3k_low(j) + 4 * i + bb] >> (2 * cc)) & 3;
            let got_high = (tile[q3k_hm(j / 2) + 4 * i + bb] >> (cc + 4 * (j % 2))) & 1;
            assert_eq!((got_low, got_high), (low, high), "q3k row {i} e {e}");
        }
        assert_eq!(tile[2 * i..2 * i + 2], b[108..110], "q3k d");
    });
    check_tile(&mut rng, &Q2K, repack_q2k, |i, b, tile| {
        for e in 0..QK_K {
            let (c, jj, l) = (e / 128, (e / 32) % 4, e % 32);
            let q = (b[16 + 32 * c + l] >> (2 * jj)) & 3;
            let (j, cc, bb) = (e / 16, (e % 16) / 4, e % 4);
            let got = (tile[Q2K_QS + 64 * j + 4 * i + bb] >> (2 * cc)) & 3;
            assert_eq!(got, q, "q2k row {i} e {e}");
        }
        assert_eq!(tile[64 + 4 * i..68 + 4 * i], b[0..4], "q2k scales");
    });
    check_tile(&mut rng, &Q5K, repack_q5k, |i, b, tile| {
        let q = q4k_values(&b[48..]);
        for e in 0..QK_K {
            let (j, l) = (e / 32, e % 32);
            let high = (b[16 + l] >> j) & 1;
            let (p, bb, h) = (l / 8, e % 4, (l % 8) / 4);
            let x = tile[Q5K_QS + Q5K_SUB * j + 64 * p + 4 * i + bb];
            let got_high = (tile[Q5K_QH + Q5K_SUB * j + 4 * i + bb] >> (2 * p + h)) & 1;
            assert_eq!((x >> (4 * h)) & 0x0F, q[e], "q5k row {i} e {e}");
            assert_eq!(got_high, high, "q5k high bit row {i} e {e}");
        }
    });
    check_tile(&mut rng, &IQ4XS, repack_iq4xs, |i, b, tile| {
        for e in 0..QK_K {
            let (ib, l) = (e / 32, e % 32);
            let q = (b[8 + 16 * ib + l % 16] >> (4 * (l / 16))) & 0x0F;
            let (p, bb, hi) = ((e % 32) / 8, e % 4, (e % 8) / 4);
            let x = tile[IQ4XS_QS + 64 * (4 * ib + p) + 4 * i + bb];
            assert_eq!((x >> (4 * hi)) & 0x0F, q, "iq4xs row {i} e {e}");
        }
    });
}
