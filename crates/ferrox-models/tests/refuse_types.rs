//! A weight stored in a type no kernel can multiply is refused when the model loads, with an
//! error naming the tensor and the type (never a panic at the first token).

use ferrox_core::quant::GgmlType;
use ferrox_core::storage::Bytes;
use ferrox_models::weights::{LoadError, TensorRef};

#[test]
fn a_weight_type_without_a_kernel_is_refused_at_load() {
    for ty in [GgmlType::I8, GgmlType::I32, GgmlType::F64] {
        let (rows, cols) = (4, 64);
        let t = TensorRef {
            name: "blk.0.ffn_up.weight".into(),
            ty,
            shape: vec![rows, cols],
            data: Bytes::from_vec(vec![0u8; ty.row_bytes(cols).unwrap() * rows]),
        };
        let e = t.matrix().expect_err("no kernel for this type");
        assert!(matches!(e, LoadError::Tensor { .. }), "{e:?}");
        let msg = e.to_string();
        assert!(
            msg.contains("blk.0.ffn_up.weight") && msg.contains(ty.name()),
            "{msg}"
        );
    }
}
