//! Expert parallelism for [`MoeBlock`] (issue 22): the driver sends each place the routed
//! (token, expert) pairs its experts own, runs its own experts and the shared expert while the
//! others work, then sums every token's expert outputs in ascending expert order — the order of
//! the single-process loop in `forward_rows` — so the result is bit-identical to it. Places
//! return each pair's output unsummed for that reason (partial sums per place would reorder
//! the additions).

use super::{add_weighted, MoeBlock};
use crate::blocks::{zeroed, FfnBlock};
use crate::distributed::{ExchangeError, ExpertWork, RemoteExperts};

/// Buffers of the remote path, kept in the block's scratch.
#[derive(Default)]
pub struct RemoteScratch {
    /// Per place: the work sent (index 0: the driver's own experts).
    work: Vec<ExpertWork>,
    /// Per place: pair outputs (index 0: the driver's own, computed here).
    outputs: Vec<Vec<f32>>,
    /// Per token: its row in the work being built (`u32::MAX`: not yet sent).
    row_of: Vec<u32>,
    /// Per place: pairs consumed while combining.
    cursor: Vec<usize>,
}

/// The scratch `forward_rows` lends the remote path.
pub(super) struct Buffers<'a> {
    pub xs: &'a mut Vec<f32>,
    pub ys: &'a mut Vec<f32>,
    pub gate: &'a mut Vec<f32>,
    pub scratch: &'a mut RemoteScratch,
}

impl MoeBlock {
    /// `out[n, hidden]` from the routed lists `per_expert` (token, weight) with the experts
    /// spread over places, plus the shared expert.
    ///
    /// # Panics
    /// When the transport fails (a lost place): the step cannot finish without its experts.
    pub(super) fn forward_remote(
        &self,
        remote: &RemoteExperts,
        x: &[f32],
        n: usize,
        per_expert: &[Vec<(usize, f32)>],
        b: Buffers<'_>,
        out: &mut [f32],
    ) {
        let d = self.hidden_dim();
        let places = remote.placement.places();
        let s = b.scratch;
        s.work.resize_with(places, ExpertWork::default);
        s.outputs.resize_with(places, Vec::new);
        for p in 0..places {
            s.work[p].clear();
            s.outputs[p].clear();
            s.row_of.clear();
            s.row_of.resize(n, u32::MAX);
            let w = &mut s.work[p];
            for e in remote.placement.range(p) {
                for &(t, _) in &per_expert[e] {
                    if s.row_of[t] == u32::MAX {
                        s.row_of[t] = (w.rows.len() / d) as u32;
                        w.rows.extend_from_slice(&x[t * d..(t + 1) * d]);
                    }
                    w.pairs.push((s.row_of[t], e as u32));
                }
            }
        }
        let remote_work = s.work[1..].iter().any(|w| !w.is_empty());
        if remote_work {
            if let Err(e) = remote.exchange.start(remote.layer, &s.work) {
                panic!("expert parallelism, layer {}: {e}", remote.layer);
            }
        }
        // The driver's own experts and the shared expert while the others work.
        let mut own = std::mem::take(&mut s.outputs[0]);
        let done = self.run_work(&s.work[0], b.xs, b.ys, &mut own);
        if let Err(e) = done {
            panic!("expert parallelism, layer {}: {e}", remote.layer);
        }
        let has_shared = self.shared_output(x, n, b.ys, b.gate);
        if remote_work {
            if let Err(e) = remote.exchange.finish(&mut s.outputs) {
                panic!("expert parallelism, layer {}: {e}", remote.layer);
            }
        }
        s.outputs[0] = own;
        for (p, w) in s.work.iter().enumerate() {
            let got = s.outputs[p].len();
            if got != w.pairs.len() * d {
                let want = w.pairs.len() * d;
                panic!(
                    "expert parallelism, layer {}: place {p} sent {got} values for {want}",
                    remote.layer
                );
            }
        }
        // The single-process accumulation: per expert ascending, its tokens in order.
        out.fill(0.0);
        s.cursor.clear();
        s.cursor.resize(places, 0);
        for (e, toks) in per_expert.iter().enumerate() {
            let p = remote.placement.owner(e);
            for &(t, w) in toks {
                let i = s.cursor[p];
                s.cursor[p] += 1;
                let y = &s.outputs[p][i * d..(i + 1) * d];
                add_weighted(&mut out[t * d..(t + 1) * d], w, y);
            }
        }
        if has_shared {
            self.add_shared(out, n, b.ys, b.gate);
        }
    }

    /// Runs `work` on this place's experts: `out` receives each pair's output (`hidden`
    /// values, unweighted), in pair order. Every expert's rows go through one batched forward,
    /// as in the single-process block, so the outputs are the same bits.
    pub fn run_work(
        &self,
        work: &ExpertWork,
        xs: &mut Vec<f32>,
        ys: &mut Vec<f32>,
        out: &mut Vec<f32>,
    ) -> Result<(), ExchangeError> {
        let d = self.hidden_dim();
        if !work.rows.len().is_multiple_of(d) {
            return Err(ExchangeError::Malformed(format!(
                "{} values are not rows of {d}",
                work.rows.len()
            )));
        }
        let rows = work.rows.len() / d;
        out.clear();
        let mut i = 0;
        while i < work.pairs.len() {
            let e = work.pairs[i].1 as usize;
            let m = work.pairs[i..]
                .iter()
                .take_while(|p| p.1 as usize == e)
                .count();
            let expert = self
                .experts
                .get(e)
                .ok_or(ExchangeError::NotHere { expert: e })?;
            xs.clear();
            for &(r, _) in &work.pairs[i..i + m] {
                let r = r as usize;
                if r >= rows {
                    return Err(ExchangeError::Malformed(format!("row {r} of {rows}")));
                }
                xs.extend_from_slice(&work.rows[r * d..(r + 1) * d]);
            }
            let ys = zeroed(ys, m * d);
            expert.forward(xs, m, ys);
            out.extend_from_slice(ys);
            i += m;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blocks::moe::bench::{random_layer, MoeShape};
    use crate::distributed::{ExpertExchange, ExpertPlacement};
    use std::sync::{Arc, Mutex};

    /// Runs every place's work at `start` on a block holding all experts; counts pairs.
    struct Local {
        block: MoeBlock,
        pending: Mutex<Vec<Vec<f32>>>,
    }

    impl ExpertExchange for Local {
        fn start(&self, _layer: usize, work: &[ExpertWork]) -> Result<(), ExchangeError> {
            let mut outs = vec![Vec::new(); work.len()];
            for (p, w) in work.iter().enumerate().skip(1) {
                self.block
                    .run_work(w, &mut Vec::new(), &mut Vec::new(), &mut outs[p])?;
            }
            *self.pending.lock().unwrap() = outs;
            Ok(())
        }
        fn finish(&self, out: &mut Vec<Vec<f32>>) -> Result<(), ExchangeError> {
            let got = std::mem::take(&mut *self.pending.lock().unwrap());
            for (p, v) in got.into_iter().enumerate().skip(1) {
                out[p] = v;
            }
            Ok(())
        }
    }

    #[test]
    fn spread_experts_give_the_same_bits() {
        let shape = MoeShape {
            hidden: 256,
            expert_ffn: 256,
            n_experts: 16,
            n_active: 4,
            n_shared: 1,
        };
        let whole = random_layer(shape, 7);
        let n = 9;
        let x: Vec<f32> = (0..n * 256)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 40.0)
            .collect();
        let mut want = vec![0f32; n * 256];
        whole.forward_rows(&x, n, &mut want);
        for places in [2, 3, 4] {
            let mut spread = random_layer(shape, 7);
            spread.remote = Some(RemoteExperts {
                layer: 0,
                placement: ExpertPlacement::even(16, places).unwrap(),
                exchange: Arc::new(Local {
                    block: random_layer(shape, 7),
                    pending: Mutex::new(Vec::new()),
                }),
            });
            let mut got = vec![0f32; n * 256];
            spread.forward_rows(&x, n, &mut got);
            assert_eq!(got, want, "{places} places");
        }
    }

    #[test]
    fn malformed_work_is_an_error() {
        let shape = MoeShape {
            hidden: 256,
            expert_ffn: 256,
            n_experts: 4,
            n_active: 2,
            n_shared: 0,
        };
        let b = random_layer(shape, 1);
        let (mut xs, mut ys, mut out) = (Vec::new(), Vec::new(), Vec::new());
        let bad_row = ExpertWork {
            rows: vec![0.0; 256],
            pairs: vec![(1, 0)],
        };
        assert!(b.run_work(&bad_row, &mut xs, &mut ys, &mut out).is_err());
        let bad_expert = ExpertWork {
            rows: vec![0.0; 256],
            pairs: vec![(0, 9)],
        };
        assert!(b.run_work(&bad_expert, &mut xs, &mut ys, &mut out).is_err());
    }
}
