//! Fuzzes the GGUF parser: any input is either refused with an error or yields a file whose
//! every accessor and tensor view works without panicking.
#![no_main]

use ferrox_core::storage::Bytes;
use ferrox_format::gguf::GgufFile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(f) = GgufFile::from_bytes(Bytes::from_vec(data.to_vec())) else {
        return;
    };
    for (k, v) in f.metadata() {
        assert!(f.get(k).is_some());
        let _ = (v.as_u64(), v.as_i64(), v.as_f32(), v.as_str(), v.as_bool());
        if let Some(a) = v.as_array() {
            let _ = (a.to_i64_vec(), a.to_f32_vec(), a.iter().count());
            let _ = f.get_str_array(k);
        }
    }
    let _ = f.architecture();
    for t in f.tensors() {
        assert_eq!(f.tensor(&t.name).map(|x| &x.name), Some(&t.name));
        assert_eq!(f.tensor_data(t).len() as u64, t.n_bytes);
        if let Ok(w) = f.weight_matrix(&t.name) {
            assert_eq!((w.rows() * w.cols()) as u64, t.n_elements);
        }
    }
});
