#!/usr/bin/env python3
"""Writes the hf-tiny checkpoints (crates/ferrox-models/tests/fixtures/hf-tiny/*) as F32 GGUF the
way llama.cpp's convert_hf_to_gguf.py does (`--outtype f32`), without torch.

Mirrors, per family, llama.cpp's conversion/*.py classes:
  deepseek_v3, glm4_moe_lite -> DeepseekV2Model / Glm4MoeLiteModel  (arch `deepseek2`)
  deepseek_v32               -> DeepseekV32Model                   (arch `deepseek32`)
  glm_moe_dsa                -> GlmMoeDsaModel                     (arch `glm-dsa`)
  glm4_moe                   -> Glm4MoeModel                       (arch `glm4moe`)
  glm4                       -> Glm4Model                          (arch `glm4`)
  qwen3_moe                  -> Qwen3MoeModel                      (arch `qwen3moe`)
  qwen2_moe                  -> Qwen2MoeModel                      (arch `qwen2moe`)
  gemma2                     -> Gemma2Model                        (arch `gemma2`; norms as 1 + w)
  olmoe                      -> OlmoeModel                         (arch `olmoe`)
  gpt_oss                    -> GptOssModel (conversion/gpt_oss.py) (arch `gpt-oss`; experts
                                from the unquantized path of `modify_tensors`: `gate_up_proj`
                                transposed, gate = rows ::2, up = rows 1::2, `down_proj`
                                transposed; `sinks` -> `attn_sinks.weight`)
  qwen3_next                 -> Qwen3NextModel                     (arch `qwen3next`)
  llama, mixtral, mistral    -> LlamaModel                         (arch `llama`; Llama 3.x
                                                                    scaling as `rope_freqs`)
  smollm3                    -> SmolLM3Model (conversion/llama.py)  (arch `smollm3`; LlamaModel
                                                                    as is: no NoPE key is written,
                                                                    llama.cpp fixes the interval
                                                                    at 4, `n_no_rope_layer_step`)
  granite                    -> GraniteModel (conversion/granite.py, arch `granite`): LlamaModel
                                (q/k permuted) plus the multipliers, written as below
  granitemoe                 -> GraniteMoeModel (conversion/granite.py, arch `granitemoe`):
       GraniteModel.set_gguf_parameters writes `attention_multiplier`, `embedding_multiplier`,
       `residual_multiplier`, `logits_scaling` as `attention.scale`, `embedding_scale`,
       `residual_scale`, `logit_scale` (each only when truthy) after dropping `head_dim`;
       GraniteMoeModel.modify_tensors splits `input_linear` `[E, 2F, H]` at F on dim -2 into
       `ffn_gate_exps` (first F rows) and `ffn_up_exps`; `output_linear` and `router.layer` map
       to `ffn_down_exps` / `ffn_gate_inp`; q/k permuted as LlamaModel does.
  phi3                       -> Phi3MiniModel (conversion/phi.py, arch `phi3`): its own
       set_gguf_parameters (no `rope.scaling.type`; `rope.scaling.original_context_length`,
       `rope.dimension_count` = int(partial_rotary_factor * hidden) // heads,
       `attention.sliding_window` = 0 when null, which llama.cpp ignores for phi3 anyway);
       generate_extra_tensors writes LongRoPE, when `long_factor` is set, as
       `rope_factors_long.weight` / `rope_factors_short.weight` and
       `rope.scaling.attn_factor` = sqrt(1 + ln(s) / ln(orig)) for s = max_pos / orig > 1
       (else 1); `qkv_proj` -> `attn_qkv`, `gate_up_proj` -> `ffn_up` kept fused, q/k not
       permuted (NeoX RoPE).
Transforms: routed experts stacked into 3-D `ffn_{gate,up,down}_exps` `[n_expert, rows, cols]`;
`e_score_correction_bias` -> `exp_probs_b.bias`; MLA `kv_b_proj` split per head into
`attn_k_b` `[n_head, kv_lora_rank, qk_nope]` (transposed) and `attn_v_b`
`[n_head, v_head_dim, kv_lora_rank]`; Llama-arch q/k rows permuted to adjacent-pair RoPE;
Qwen3-Next as `Qwen3NextModel.modify_tensors` (llama.cpp conversion/qwen.py, lines 394-427):
`A_log` -> `ssm_a` = -exp(A_log), `dt_bias` -> `ssm_dt.bias`, conv1d squeezed to
`[channels, kernel]`, every `*norm.weight` but the DeltaNet's gated `linear_attn.norm` stored as
1 + w, `in_proj_qkvz` (per key head [q, k, v, z]) regrouped into `attn_qkv` ([all q; all k;
all v]) and `attn_gate` (all z); `in_proj_ba` kept as `ssm_ba`.
Tensor names come from gguf-py's own TensorNameMap, as in the converter.

Where the tiny checkpoints differ from real ones, four things are added on purpose:
  * `expert_gating_func = sigmoid` for the DeepSeek/GLM-MLA families when config.json has no
    `scoring_func` (transformers always routes them with sigmoid; real DeepSeek-V3/V3.2 configs
    carry `scoring_func: sigmoid`, which the converter writes);
  * `attention.sliding_window` when the config enables a window on every layer (Mixtral,
    Mistral, Qwen3-MoE), which llama.cpp's converter drops for these archs but transformers
    applies;
  * Qwen3-MoE `mlp_only_layers` written as dense `ffn_{gate,up,down}` (llama.cpp has no
    dense layers in qwen3moe and its converter stops there);
  * a synthetic 512-entry SentencePiece-style vocabulary: hf-tiny has no tokenizer, and a GGUF
    model file is expected to carry one.

gpt_oss_mxfp4.gguf holds the same model with its expert stacks quantized to MXFP4 by gguf-py (the
type the released gpt-oss GGUFs use; `repack_mxfp4` writes the checkpoint's own MXFP4 blocks).

Usage: hf_tiny_to_gguf.py [--gguf-py DIR] [--fuse-gate-up-exps] [--mxfp4-experts] SRC_DIR OUT.gguf
       hf_tiny_to_gguf.py --all  (every supported fixture into tests/fixtures/gguf-tiny/, plus
                                  qwen3_moe_fused.gguf with fused `ffn_gate_up_exps`)
Needs numpy and safetensors (pip), and gguf-py (the llama.cpp tree, or `pip install gguf`);
qwen3_next needs a gguf-py new enough for `add_recurrent_layers`: without --gguf-py the one in
~/.cache/ferrox/llamacpp/src/gguf-py is used when it exists.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "crates/ferrox-models/tests/fixtures"
LLAMA_CPP_GGUF_PY = Path.home() / ".cache/ferrox/llamacpp/src/gguf-py"
# The llama.cpp tree ferrox's tools fetch; new enough for `qwen3next` (recurrent_layers).
LLAMA_CPP_CACHE_GGUF_PY = LLAMA_CPP_GGUF_PY

ARCHS = {
    "deepseek_v3": "DEEPSEEK2",
    "glm4_moe_lite": "DEEPSEEK2",
    "deepseek_v32": "DEEPSEEK32",
    "glm_moe_dsa": "GLM_DSA",
    "glm4_moe": "GLM4_MOE",
    "glm4": "GLM4",
    "qwen3_moe": "QWEN3MOE",
    "mixtral": "LLAMA",
    "mistral": "LLAMA",
    "llama": "LLAMA",
    "qwen2_moe": "QWEN2MOE",
    "gemma2": "GEMMA2",
    "olmoe": "OLMOE",
    "gpt_oss": "GPT_OSS",
    "smollm3": "SMOLLM3",
    "granite": "GRANITE",
    "granitemoe": "GRANITE_MOE",
    "phi3": "PHI3",
    "qwen3_next": "QWEN3NEXT",
}
LLAMA_TYPES = {"mixtral", "mistral", "llama"}
# LlamaModel subclasses: q/k rows permuted, `vocab_size` and `rope.dimension_count` written.
LLAMA_DERIVED = LLAMA_TYPES | {"smollm3", "granite", "granitemoe"}
# GraniteModel and its subclass GraniteMoeModel: the multipliers as `*_scale` keys, no head_dim.
GRANITE_TYPES = {"granite", "granitemoe"}
MLA_TYPES = {"deepseek_v3", "glm4_moe_lite", "deepseek_v32", "glm_moe_dsa"}
ALL_FIXTURES = [
    "deepseek_v3",
    "deepseek_v32",
    "glm4_moe",
    "glm4_moe_lite",
    "glm_moe_dsa",
    "glm_moe_dsa_shared_indexer",
    "qwen3_moe",
    "mixtral",
    "glm4",
    "mistral",
    "llama",
    "qwen2_moe",
    "gemma2",
    "olmoe",
    "gpt_oss",
    "smollm3",
    "granite",
    "granitemoe",
    "phi3",
    "qwen3_next",
]


def rope_params(h: dict) -> dict:
    p = h.get("rope_parameters") or h.get("rope_scaling") or {}
    p = dict(p)
    p.setdefault("rope_theta", h.get("rope_theta", 10000.0))
    return p


def add_present(h: dict, *writes) -> None:
    """For each (key, add) in order: add(h[key]) when `h` (a config or its rope parameters) has
    the key (not None)."""
    for key, add in writes:
        if h.get(key) is not None:
            add(h[key])


def write_common(w, gguf, h: dict, block_count: int) -> None:
    """TextModel.set_gguf_parameters (conversion/base.py)."""
    w.add_block_count(block_count)
    w.add_context_length(h["max_position_embeddings"])
    w.add_embedding_length(h["hidden_size"])
    w.add_feed_forward_length(h["intermediate_size"])
    w.add_head_count(h["num_attention_heads"])
    add_present(h, ("num_key_value_heads", w.add_head_count_kv))
    rp = rope_params(h)
    if rp.get("rope_type") == "yarn" and rp.get("factor") is not None:
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(rp["factor"])
        w.add_rope_scaling_orig_ctx_len(rp["original_max_position_embeddings"])
        add_present(
            rp,
            ("beta_fast", w.add_rope_scaling_yarn_beta_fast),
            ("beta_slow", w.add_rope_scaling_yarn_beta_slow),
        )
    elif rp.get("rope_type") == "linear" and rp.get("factor") is not None:
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(rp["factor"])
    elif rp.get("rope_type") == "llama3":
        pass  # LlamaModel writes the scaling as the `rope_freqs` tensor (llama3_rope_factors)
    elif rp.get("rope_type") not in (None, "default"):
        raise ValueError(f"rope_type {rp.get('rope_type')!r} not handled here")
    w.add_rope_freq_base(rp["rope_theta"])
    w.add_layer_norm_rms_eps(h.get("rms_norm_eps", 1e-6))
    n_exp = next(
        (h[k] for k in ("num_local_experts", "num_experts", "n_routed_experts") if h.get(k) is not None),
        None,
    )
    if n_exp is not None:
        w.add_expert_count(n_exp)
    add_present(
        h,
        ("num_experts_per_tok", w.add_expert_used_count),
        ("n_group", w.add_expert_group_count),
        ("topk_group", w.add_expert_group_used_count),
    )
    if h.get("scoring_func") is not None:
        w.add_expert_gating_func(
            gguf.ExpertGatingFuncType.SIGMOID
            if h["scoring_func"] == "sigmoid"
            else gguf.ExpertGatingFuncType.SOFTMAX
        )
    if h.get("head_dim") is not None:
        w.add_key_length(h["head_dim"])
        w.add_value_length(h["head_dim"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)


def write_arch_params(w, gguf, mt: str, h: dict) -> None:
    if mt in MLA_TYPES:
        # DeepseekV2Model.set_gguf_parameters: MLA is stored as MQA over the latent.
        w.add_head_count_kv(1)
        w.add_leading_dense_block_count(h.get("first_k_dense_replace") or _first_dense(h))
        w.add_vocab_size(h["vocab_size"])
        add_present(h, ("q_lora_rank", w.add_q_lora_rank))
        kv_lora = h.get("kv_lora_rank", 512)
        w.add_kv_lora_rank(kv_lora)
        w.add_key_length(kv_lora + h["qk_rope_head_dim"])
        w.add_value_length(kv_lora)
        w.add_key_length_mla(h["qk_nope_head_dim"] + h["qk_rope_head_dim"])
        w.add_value_length_mla(h["v_head_dim"])
        w.add_expert_feed_forward_length(h["moe_intermediate_size"])
        w.add_expert_count(h["n_routed_experts"])
        w.add_expert_shared_count(h.get("n_shared_experts", 0))
        add_present(h, ("routed_scaling_factor", w.add_expert_weights_scale))
        if h.get("norm_topk_prob"):
            w.add_expert_weights_norm(True)
        w.add_rope_dimension_count(h["qk_rope_head_dim"])
        rp = rope_params(h)
        if rp.get("mscale_all_dim") is not None:
            w.add_rope_scaling_yarn_log_mul(0.1 * rp["mscale_all_dim"])
        if h.get("scoring_func") is None:
            w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
        if mt in ("deepseek_v32", "glm_moe_dsa") or (mt == "glm4_moe_lite" and h.get("num_nextn_predict_layers")):
            add_present(h, ("num_nextn_predict_layers", w.add_nextn_predict_layers))
        if mt in ("deepseek_v32", "glm_moe_dsa"):
            w.add_indexer_head_count(h["index_n_heads"])
            w.add_indexer_key_length(h["index_head_dim"])
            w.add_indexer_top_k(h["index_topk"])
        if mt == "glm_moe_dsa" and h.get("indexer_types") is not None:
            w.add_indexer_types([t == "full" for t in h["indexer_types"]])
    elif mt == "glm4_moe":
        head_dim = h.get("head_dim") or h["hidden_size"] // h["num_attention_heads"]
        w.add_rope_dimension_count(int(head_dim * rope_params(h).get("partial_rotary_factor", 0.5)))
        w.add_expert_count(h["n_routed_experts"])
        w.add_expert_feed_forward_length(h["moe_intermediate_size"])
        w.add_expert_shared_count(h["n_shared_experts"])
        add_present(h, ("first_k_dense_replace", w.add_leading_dense_block_count))
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
        add_present(
            h,
            ("routed_scaling_factor", w.add_expert_weights_scale),
            ("norm_topk_prob", w.add_expert_weights_norm),
            ("num_nextn_predict_layers", w.add_nextn_predict_layers),
        )
    elif mt == "glm4":
        head_dim = h.get("head_dim") or h["hidden_size"] // h["num_attention_heads"]
        w.add_rope_dimension_count(int(head_dim * rope_params(h).get("partial_rotary_factor", 0.5)))
    elif mt == "qwen3_moe":
        w.add_expert_feed_forward_length(h["moe_intermediate_size"])
    elif mt == "gemma2":
        # Gemma2Model.set_gguf_parameters
        w.add_attn_logit_softcapping(h["attn_logit_softcapping"])
        w.add_final_logit_softcapping(h["final_logit_softcapping"])
        w.add_sliding_window(h["sliding_window"])
    elif mt == "gpt_oss":
        # GptOssModel.set_gguf_parameters
        w.add_sliding_window(h["sliding_window"])
        w.add_expert_feed_forward_length(h["intermediate_size"])
    elif mt in ("qwen2_moe", "qwen3_next"):
        # Qwen2MoeModel.set_gguf_parameters
        w.add_expert_feed_forward_length(h["moe_intermediate_size"])
        w.add_expert_shared_feed_forward_length(h["shared_expert_intermediate_size"])
        if mt == "qwen3_next":
            # Qwen3NextModel.set_gguf_parameters (conversion/qwen.py, lines 375-392)
            w.add_ssm_conv_kernel(h["linear_conv_kernel_dim"])
            w.add_ssm_state_size(h["linear_key_head_dim"])
            w.add_ssm_group_count(h["linear_num_key_heads"])
            w.add_ssm_time_step_rank(h["linear_num_value_heads"])
            w.add_ssm_inner_size(h["linear_value_head_dim"] * h["linear_num_value_heads"])
            if (layer_types := h.get("layer_types")) is not None:
                w.add_recurrent_layers([t == "linear_attention" for t in layer_types])
            w.add_full_attention_interval(h.get("full_attention_interval", 4))
            head_dim = h.get("head_dim") or h["hidden_size"] // h["num_attention_heads"]
            w.add_rope_dimension_count(int(head_dim * rope_params(h).get("partial_rotary_factor", 0.25)))
    elif mt in LLAMA_DERIVED:
        w.add_vocab_size(h["vocab_size"])
        head_dim = h.get("head_dim") or h["hidden_size"] // h["num_attention_heads"]
        w.add_rope_dimension_count(head_dim)
    if mt in GRANITE_TYPES:
        # GraniteModel.set_gguf_parameters: the multipliers as `*_scale` keys, when truthy.
        for key, add in (
            ("attention_multiplier", w.add_attention_scale),
            ("embedding_multiplier", w.add_embedding_scale),
            ("residual_multiplier", w.add_residual_scale),
            ("logits_scaling", w.add_logit_scale),
        ):
            if h.get(key):
                add(h[key])
        if h.get("shared_intermediate_size"):
            w.add_expert_shared_feed_forward_length(h["shared_intermediate_size"])
    if mt in ("mixtral", "mistral", "qwen3_moe") and h.get("sliding_window"):
        if mt in LLAMA_TYPES or h.get("use_sliding_window"):
            w.add_sliding_window(h["sliding_window"])


def phi3_rope_params(h: dict) -> dict:
    """TextModel.__init__: top-level `original_max_position_embeddings` and
    `partial_rotary_factor` mirrored into the rope parameters when absent there."""
    rp = rope_params(h)
    for k in ("original_max_position_embeddings", "partial_rotary_factor"):
        if k not in rp and h.get(k) is not None:
            rp[k] = h[k]
    return rp


def write_phi3(w, gguf, h: dict) -> None:
    """Phi3MiniModel.set_gguf_parameters (replaces TextModel's: no rope scaling type)."""
    rp = phi3_rope_params(h)
    n_embd, n_head = h["hidden_size"], h["num_attention_heads"]
    w.add_context_length(h["max_position_embeddings"])
    w.add_rope_scaling_orig_ctx_len(rp["original_max_position_embeddings"])
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(h["intermediate_size"])
    w.add_block_count(h["num_hidden_layers"])
    w.add_head_count(n_head)
    w.add_head_count_kv(h["num_key_value_heads"])
    w.add_layer_norm_rms_eps(h["rms_norm_eps"])
    w.add_rope_dimension_count(int(rp.get("partial_rotary_factor", 1.0) * n_embd) // n_head)
    w.add_rope_freq_base(rp["rope_theta"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    # "use zero value of sliding_window to distinguish Phi-4 from other PHI3 models"
    w.add_sliding_window(h.get("sliding_window") or 0)


def phi3_rope_tensors(w, gguf, h: dict) -> list[tuple[str, np.ndarray]]:
    """Phi3MiniModel.generate_extra_tensors: LongRoPE's factor sets and attention factor."""
    rp = phi3_rope_params(h)
    long_f, short_f = rp.get("long_factor"), rp.get("short_factor")
    if not long_f:
        return []
    orig = rp["original_max_position_embeddings"]
    scale = h["max_position_embeddings"] / orig
    if rp.get("rope_type", "").lower() not in ("su", "longrope"):
        raise ValueError(f"rope_type {rp.get('rope_type')!r} not handled here")
    w.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(orig)) if scale > 1.0 else 1.0)
    pairs = int(rp.get("partial_rotary_factor", 1.0) * h["hidden_size"]) // h["num_attention_heads"] / 2
    if short_f is None or len(long_f) != len(short_f) or len(long_f) != pairs:
        raise ValueError(f"LongRoPE long and short factors must list {pairs} numbers")
    names = gguf.TENSOR_NAMES
    return [
        (names[gguf.MODEL_TENSOR.ROPE_FACTORS_LONG] + ".weight", np.array(long_f, dtype=np.float32)),
        (names[gguf.MODEL_TENSOR.ROPE_FACTORS_SHORT] + ".weight", np.array(short_f, dtype=np.float32)),
    ]


def _first_dense(h: dict) -> int:
    types = h.get("mlp_layer_types")
    if types:
        return next((i for i, t in enumerate(types) if t != "dense"), len(types))
    return 0


def llama_permute(x: np.ndarray, n_head: int, n_head_kv: int | None) -> np.ndarray:
    """LlamaModel.permute: HF half-split rows -> adjacent-pair rows, per head."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (
        x.reshape(n_head, 2, x.shape[0] // n_head // 2, *x.shape[1:])
        .swapaxes(1, 2)
        .reshape(x.shape)
    )


def qwen3_next_tensor(name: str, t: np.ndarray) -> tuple[str, np.ndarray]:
    """Qwen3NextModel.modify_tensors' per-tensor transforms (all but the qkvz split)."""
    if name.endswith(".A_log"):
        return name, -np.exp(t)
    if name.endswith(".dt_bias"):
        return name.rpartition(".dt_bias")[0] + ".dt_proj.bias", t
    if "conv1d" in name:
        return name, t.squeeze()
    if name.endswith("norm.weight") and not name.endswith("linear_attn.norm.weight"):
        return name, t + 1.0
    return name, t


def qwen3_next_qkvz(h: dict, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`in_proj_qkvz` rows, per key head [q, k, v, z], as [all q; all k; all v] and [all z]."""
    dk, dv = h["linear_key_head_dim"], h["linear_value_head_dim"]
    nk, nv = h["linear_num_key_heads"], h["linear_num_value_heads"]
    sizes = [dk, dk, nv // nk * dv, nv // nk * dv]
    x = t.T.reshape(t.shape[1], nk, sum(sizes))  # (n_embd, head_count, q+k+v+z)
    q, k, v, z = np.split(x, np.cumsum(sizes)[:-1], axis=-1)
    flat = [p.reshape(t.shape[1], -1) for p in (q, k, v, z)]
    return np.concatenate(flat[:3], axis=-1).T, flat[3].T


def llama3_rope_factors(h: dict) -> np.ndarray:
    """LlamaModel.generate_extra_tensors: per rotated pair, the divisor of its frequency."""
    rp = rope_params(h)
    dim = h.get("head_dim") or h["hidden_size"] // h["num_attention_heads"]
    freqs = 1.0 / (rp["rope_theta"] ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    factor = rp.get("factor", 8.0)
    low, high = rp.get("low_freq_factor", 1.0), rp.get("high_freq_factor", 4.0)
    old = rp.get("original_max_position_embeddings", 8192)
    low_wavelen, high_wavelen = old / low, old / high
    out = []
    for freq in freqs:
        wavelen = 2 * np.pi / freq
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def gpt_oss_experts(name: str, t: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """GptOssModel.modify_tensors, unquantized path: Hub `x @ W` stacks -> llama.cpp rows."""
    base = name.rsplit(".", 1)[0]  # model.layers.N.mlp.experts
    if name.endswith("gate_up_proj_bias"):
        return [(f"{base}.gate_proj.bias", t[..., ::2]), (f"{base}.up_proj.bias", t[..., 1::2])]
    if name.endswith("gate_up_proj"):
        t = t.transpose(0, 2, 1)
        return [(f"{base}.gate_proj.weight", t[:, ::2, :]), (f"{base}.up_proj.weight", t[:, 1::2, :])]
    if name.endswith("down_proj_bias"):
        return [(f"{base}.down_proj.bias", t)]
    if name.endswith("down_proj"):
        return [(f"{base}.down_proj.weight", t.transpose(0, 2, 1))]
    raise ValueError(f"unexpected gpt-oss expert tensor {name!r}")


def convert(src: Path, out: Path, gguf, fuse_gate_up: bool = False, mxfp4_experts: bool = False) -> None:
    h = json.loads((src / "config.json").read_text())
    mt = h["model_type"]
    if mt not in ARCHS:
        raise SystemExit(f"{src}: model_type {mt!r} is not handled")
    arch = getattr(gguf.MODEL_ARCH, ARCHS[mt])
    n_layers = h["num_hidden_layers"]
    # Glm4MoeModel keeps the MTP (NextN) blocks as further blocks (`blk.N.nextn.*` beside the
    # block's own tensors) and counts them in block_count; DeepseekV2Model drops them.
    blocks = n_layers + (h.get("num_nextn_predict_layers") or 0 if mt == "glm4_moe" else 0)
    tmap = gguf.get_tensor_name_map(arch, blocks)
    tensors = load_file(str(src / "model.safetensors"))
    # llama.cpp's qwen3moe has no dense-FFN tensors, so its converter refuses `mlp_only_layers`;
    # those layers are written under the standard dense names (`blk.N.ffn_{gate,up,down}`).
    dense_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN3, n_layers) if mt == "qwen3_moe" else None

    def gguf_name(name: str) -> str:
        if name.endswith("e_score_correction_bias"):
            name = name.replace("e_score_correction_bias", "e_score_correction.bias")
        new = tmap.get_name(name, try_suffixes=(".weight", ".bias"))
        if new is None and dense_map is not None:
            new = dense_map.get_name(name, try_suffixes=(".weight", ".bias"))
        if new is None:
            raise ValueError(f"can not map tensor {name!r}")
        return new

    w = gguf.GGUFWriter(str(out), gguf.MODEL_ARCH_NAMES[arch])
    w.add_name(f"hf-tiny {src.name}")
    # The converter yields generate_extra_tensors() before the checkpoint's own tensors.
    out_tensors: list[tuple[str, np.ndarray]] = phi3_rope_tensors(w, gguf, h) if mt == "phi3" else []
    experts: dict[str, np.ndarray] = {}
    n_head = h["num_attention_heads"]
    n_kv = h.get("num_key_value_heads")
    for name in sorted(tensors):
        t = tensors[name].astype(np.float32)
        if (m := re.match(r"model\.layers\.(\d+)\.", name)) and int(m.group(1)) >= blocks:
            continue  # an MTP block this converter drops
        if h.get("tie_word_embeddings") and name == "lm_head.weight":
            continue
        if mt == "gpt_oss":
            if "sinks" in name:
                name += ".weight"  # GptOssModel.filter_tensors
            if ".mlp.experts." in name:
                out_tensors.extend((gguf_name(n), x) for n, x in gpt_oss_experts(name, t))
                continue
        if ".experts." in name and ".shared_experts." not in name:
            experts[name] = t
            continue
        if mt == "gemma2" and name.endswith("norm.weight"):
            t = t + 1.0
        if mt == "granitemoe" and name.endswith("block_sparse_moe.input_linear.weight"):
            # GraniteMoeModel.modify_tensors: gate, up = split(intermediate_size, dim=-2).
            f, bid = h["intermediate_size"], int(name.split(".")[2])
            assert t.shape[-2] == 2 * f, "Merged FFN tensor size must be 2 * intermediate_size"
            for tensor, part in ((gguf.MODEL_TENSOR.FFN_GATE_EXP, t[:, :f]), (gguf.MODEL_TENSOR.FFN_UP_EXP, t[:, f:])):
                out_tensors.append((gguf.TENSOR_NAMES[tensor].format(bid=bid) + ".weight", part))
            continue
        if mt == "qwen3_next":
            name, t = qwen3_next_tensor(name, t)
            if name.endswith("in_proj_qkvz.weight"):
                qkv, z = qwen3_next_qkvz(h, t)
                out_tensors.append((gguf_name(name).replace("ssm_in", "attn_qkv"), qkv))
                out_tensors.append((gguf_name(name).replace("ssm_in", "attn_gate"), z))
                continue
        if mt in LLAMA_DERIVED:
            if name.endswith("q_proj.weight"):
                t = llama_permute(t, n_head, n_head)
            elif name.endswith("k_proj.weight"):
                t = llama_permute(t, n_head, n_kv)
        if mt in MLA_TYPES and name.endswith("kv_b_proj.weight"):
            dn, dv = h["qk_nope_head_dim"], h["v_head_dim"]
            kv_b = t.reshape(n_head, dn + dv, t.shape[-1])
            k_b = np.ascontiguousarray(kv_b[:, :dn, :].transpose(0, 2, 1))
            v_b = np.ascontiguousarray(kv_b[:, dn:, :])
            out_tensors.append((gguf_name(name.replace("kv_b_proj", "k_b_proj")), k_b))
            out_tensors.append((gguf_name(name.replace("kv_b_proj", "v_b_proj")), v_b))
            continue
        out_tensors.append((gguf_name(name), t))

    # Stack routed experts per layer, as every MoE converter does (torch.stack(dim=0)).
    layers = sorted({int(m.group(1)) for k in experts if (m := re.match(r"model\.layers\.(\d+)\.", k))})
    for bid in layers:
        if mt == "mixtral":
            n_exp = h["num_local_experts"]
            for wid in ("w1", "w2", "w3"):
                data = np.stack(
                    [experts.pop(f"model.layers.{bid}.block_sparse_moe.experts.{x}.{wid}.weight") for x in range(n_exp)]
                )
                out_tensors.append((gguf_name(f"layers.{bid}.feed_forward.experts.{wid}.weight"), data))
        else:
            n_exp = h.get("n_routed_experts") or h.get("num_local_experts") or h["num_experts"]
            stacked = {}
            for wn in ("down_proj", "gate_proj", "up_proj"):
                stacked[wn] = np.stack(
                    [experts.pop(f"model.layers.{bid}.mlp.experts.{x}.{wn}.weight") for x in range(n_exp)]
                )
            if fuse_gate_up:
                # ModelBase.modify_tensors with --fuse-gate-up-exps: cat([gate, up], dim=1).
                fused = np.concatenate([stacked.pop("gate_proj"), stacked.pop("up_proj")], axis=1)
                out_tensors.append((f"blk.{bid}.ffn_gate_up_exps.weight", fused))
            for wn, data in stacked.items():
                out_tensors.append((gguf_name(f"model.layers.{bid}.mlp.experts.{wn}.weight"), data))
    if experts:
        raise ValueError(f"unprocessed experts: {sorted(experts)[:4]}")
    if mt in LLAMA_TYPES and rope_params(h).get("rope_type") == "llama3":
        out_tensors.append(("rope_freqs.weight", llama3_rope_factors(h)))

    if mt == "phi3":
        write_phi3(w, gguf, h)
    else:
        if mt in GRANITE_TYPES:
            h.pop("head_dim", None)  # GraniteModel ignores head_dim
        write_common(w, gguf, h, blocks)
        write_arch_params(w, gguf, mt, h)
    write_vocab(w, gguf, h["vocab_size"])
    for name, t in out_tensors:
        t = np.ascontiguousarray(t, dtype=np.float32)
        if mxfp4_experts and name.endswith("_exps.weight"):
            from gguf import quants  # noqa: E402

            q = quants.quantize(t, gguf.GGMLQuantizationType.MXFP4)
            w.add_tensor(name, q, raw_dtype=gguf.GGMLQuantizationType.MXFP4)
        else:
            w.add_tensor(name, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_vocab(w, gguf, n: int) -> None:
    """A stand-in SentencePiece vocabulary: <unk>, <s>, </s>, 256 byte tokens, then pieces."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tokens += [f"\u2581t{i}" for i in range(len(tokens), n)]
    tokens = tokens[:n]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * 256
    types += [gguf.TokenType.NORMAL] * (n - len(types))
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * 3 + [0.0] * 256 + [-float(i) for i in range(n - 259)])
    w.add_token_types(types[:n])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf-py", type=Path, default=LLAMA_CPP_GGUF_PY)
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--fuse-gate-up-exps", action="store_true", help="as convert_hf_to_gguf.py's option")
    ap.add_argument("--mxfp4-experts", action="store_true", help="expert stacks as MXFP4")
    ap.add_argument("src", nargs="?", type=Path)
    ap.add_argument("out", nargs="?", type=Path)
    a = ap.parse_args()
    if a.gguf_py.is_dir():
        sys.path.insert(0, str(a.gguf_py))
    elif LLAMA_CPP_CACHE_GGUF_PY.is_dir():
        sys.path.insert(0, str(LLAMA_CPP_CACHE_GGUF_PY))
    import gguf  # noqa: E402

    if a.all:
        dst = FIXTURES / "gguf-tiny"
        dst.mkdir(parents=True, exist_ok=True)
        for name in ALL_FIXTURES:
            convert(FIXTURES / "hf-tiny" / name, dst / f"{name}.gguf", gguf)
            print(f"wrote {dst / (name + '.gguf')}")
        convert(FIXTURES / "hf-tiny/qwen3_moe", dst / "qwen3_moe_fused.gguf", gguf, fuse_gate_up=True)
        print(f"wrote {dst / 'qwen3_moe_fused.gguf'}")
        convert(FIXTURES / "hf-tiny/gpt_oss", dst / "gpt_oss_mxfp4.gguf", gguf, mxfp4_experts=True)
        print(f"wrote {dst / 'gpt_oss_mxfp4.gguf'}")
        for name in ("glm4_moe", "deepseek_v3"):
            convert(FIXTURES / "hf-tiny-mtp" / name, dst / f"{name}_mtp.gguf", gguf)
            print(f"wrote {dst / (name + '_mtp.gguf')}")
    elif a.src and a.out:
        convert(a.src, a.out, gguf, a.fuse_gate_up_exps, a.mxfp4_experts)
    else:
        ap.error("give SRC_DIR OUT.gguf or --all")


if __name__ == "__main__":
    main()
