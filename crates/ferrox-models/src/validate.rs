//! Checks of a whole [`ModelConfig`] before anything is built from it, driven by the key table
//! (`arch::keys`): every size positive and bounded, every float finite and in its domain, and
//! the values consistent with each other (KV heads dividing the heads, the rotated part fitting
//! the head, experts used among those there are). The readers (`arch::gguf`, `arch::hf`)
//! already refuse values of the wrong type; what passes here cannot divide by zero, overflow,
//! index out of bounds or ask for an absurd allocation when the decoder is built and run.
//! Errors name the key of the file the value came from ([`LoadError::Value`]).

use crate::arch::hf::HfConfig;
use crate::arch::keys::{self, Below, Bound, Check, Domain, Get, Key, Rel};
use crate::config::{AttnKind, ModelConfig, RopeConfig};
use crate::decoder::Decoder;
use crate::weights::LoadError;
use ferrox_tokenizer::Tokenizer;

/// Where the config came from, to name a value's key.
pub enum Keys<'a> {
    /// GGUF metadata of this `general.architecture` (keys are `{arch}.{key}`).
    Gguf(&'a str),
    /// A `config.json`.
    Hf(&'a HfConfig<'a>),
}

impl Keys<'_> {
    /// The name of `k` in the file: its GGUF key (a tensor name when GGUF keeps the value as a
    /// shape), or the `config.json` name present in the file. When the file has none of the
    /// row's own names, the value came from `k.or_from`'s key.
    fn name(&self, k: &Key) -> String {
        match self {
            Keys::Gguf(_) if k.gguf.ends_with(".weight") => k.gguf.to_string(),
            Keys::Gguf(arch) if !k.gguf.is_empty() => k.gguf_key(arch),
            Keys::Gguf(arch) => match k.or_from {
                Some(from) if !from.gguf.is_empty() => from.gguf_key(arch),
                _ => format!("{arch}.{}", k.field),
            },
            Keys::Hf(c) => {
                // Rows of the RoPE dict are named inside it.
                let dict = c
                    .sub(&keys::ROPE_PARAMETERS)
                    .or_else(|| c.sub(&keys::ROPE_SCALING));
                let obj = |k: &Key| match &dict {
                    Some(d) if k.in_rope_dict => d,
                    _ => *c,
                };
                let k = match k.or_from {
                    Some(from) if !obj(k).has(k) && obj(from).has(from) => from,
                    _ => k,
                };
                obj(k).path(k)
            }
        }
    }

    fn bad(&self, k: &Key, problem: impl std::fmt::Display) -> LoadError {
        LoadError::Value {
            key: self.name(k),
            problem: problem.to_string(),
        }
    }
}

/// Refuses a tokenizer that can produce ids the model has no embedding row for (one with
/// fewer tokens than rows is fine: the extra rows are padding).
pub fn check_tokenizer(dec: &Decoder, tok: &Tokenizer) -> Result<(), LoadError> {
    let (tokens, rows) = (tok.vocab_size(), dec.embed.rows());
    if tokens <= rows {
        return Ok(());
    }
    let key = match dec.source.is_gguf {
        true => "tokenizer.ggml.tokens",
        false => "tokenizer.json",
    };
    Err(LoadError::Value {
        key: key.into(),
        problem: format!("lists {tokens} tokens but the model's embedding has {rows} rows"),
    })
}

/// Checks `cfg`, read from the file `keys` describes: the per-layer lists, then every row of
/// the key table in its order (a per-RoPE row for each of the config's RoPEs).
pub fn validate(cfg: &ModelConfig, keys: &Keys<'_>) -> Result<(), LoadError> {
    layer_lists(cfg, keys)?;
    let ropes: Vec<&RopeConfig> = std::iter::once(&cfg.rope)
        .chain(cfg.rope_local.as_ref())
        .collect();
    for key in keys::ALL.iter().copied() {
        let per_rope = matches!(
            key.check,
            Check::Count {
                get: Get::Rope(_),
                ..
            } | Check::Float {
                get: Get::Rope(_),
                ..
            }
        );
        let scopes = if per_rope { &ropes[..] } else { &ropes[..1] };
        for rope in scopes {
            check(key, cfg, rope, keys)?;
        }
    }
    Ok(())
}

/// One entry per layer in every per-layer list the readers build (lists read from the file were
/// checked against the layer count by name).
fn layer_lists(cfg: &ModelConfig, k: &Keys<'_>) -> Result<(), LoadError> {
    if cfg.layer_attn.len() != cfg.n_layers || cfg.layer_moe.len() != cfg.n_layers {
        return Err(LoadError::Config(format!(
            "{} attention kinds and {} FFN kinds for {} layers",
            cfg.layer_attn.len(),
            cfg.layer_moe.len(),
            cfg.n_layers
        )));
    }
    if cfg.layer_attn.contains(&AttnKind::Linear) && cfg.linear.is_none() {
        return Err(LoadError::Config(
            "linear-attention layers without linear-attention sizes".into(),
        ));
    }
    if let (Some(_), Some(d)) = (&cfg.mla, &cfg.dsa) {
        if d.indexer_types.len() != cfg.n_layers {
            return Err(k.bad(&keys::INDEXER_TYPES, "does not list every layer"));
        }
    }
    Ok(())
}

/// Row `k`'s value in `cfg` (of `rope` for a per-RoPE row) against its rule.
fn check(k: &Key, cfg: &ModelConfig, rope: &RopeConfig, keys: &Keys<'_>) -> Result<(), LoadError> {
    match k.check {
        Check::Read => Ok(()),
        Check::Count { get, min, max, rel } => {
            let Some(v) = get.of(cfg, rope) else {
                return Ok(());
            };
            // A bound of a row that does not apply bounds nothing (rows are gated alike).
            let bound = |b: Bound| match b {
                Bound::At(x) => Some(x),
                Bound::Of(o) => count_of(o, cfg, rope),
            };
            let (lo, hi) = (bound(min).unwrap_or(0), bound(max).unwrap_or(usize::MAX));
            if !(lo..=hi).contains(&v) {
                return Err(keys.bad(k, format!("= {v} is outside {lo}..={hi}")));
            }
            count_relation(k, v, rel, cfg, rope, keys)
        }
        Check::Float { get, domain, below } => {
            let Some(v) = get.of(cfg, rope) else {
                return Ok(());
            };
            let ok = match domain {
                Domain::Finite | Domain::NonZero => v.is_finite(),
                Domain::Positive => v.is_finite() && v > 0.0,
            };
            if !ok {
                let want = if domain == Domain::Positive {
                    "positive"
                } else {
                    "finite"
                };
                return Err(keys.bad(k, format!("= {v} is not {want}")));
            }
            if domain == Domain::NonZero && v == 0.0 {
                return Err(keys.bad(k, "is 0"));
            }
            let hi = match below {
                None => None,
                Some(Below::At(x)) => Some(x),
                Some(Below::Of(o)) => float_of(o, cfg, rope),
            };
            match hi {
                Some(hi) if v >= hi => Err(keys.bad(k, format!("= {v} is not below {hi}"))),
                _ => Ok(()),
            }
        }
    }
}

fn count_relation(
    k: &Key,
    v: usize,
    rel: Rel,
    cfg: &ModelConfig,
    rope: &RopeConfig,
    keys: &Keys<'_>,
) -> Result<(), LoadError> {
    let problem = match rel {
        Rel::None => None,
        Rel::Even => (v % 2 == 1).then(|| format!("gives an odd {v} rotated dims")),
        Rel::Divides(o, noun) => count_of(o, cfg, rope)
            .filter(|n| !n.is_multiple_of(v))
            .map(|n| format!("= {v} does not divide the {n} {noun}")),
        Rel::MultipleOf(o, noun) => count_of(o, cfg, rope)
            .filter(|&n| !v.is_multiple_of(n))
            .map(|n| format!("= {v} is not a multiple of {n} {noun}")),
    };
    problem.map_or(Ok(()), |p| Err(keys.bad(k, p)))
}

/// The value of count row `k` in `cfg` (of `rope` for a per-RoPE row).
fn count_of(k: &Key, cfg: &ModelConfig, rope: &RopeConfig) -> Option<usize> {
    match k.check {
        Check::Count { get, .. } => get.of(cfg, rope),
        _ => None,
    }
}

/// The value of float row `k` in `cfg` (of `rope` for a per-RoPE row).
fn float_of(k: &Key, cfg: &ModelConfig, rope: &RopeConfig) -> Option<f32> {
    match k.check {
        Check::Float { get, .. } => get.of(cfg, rope),
        _ => None,
    }
}
