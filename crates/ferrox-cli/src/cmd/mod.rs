pub mod inspect;
pub mod pull;
pub mod tokenize;
pub mod engine;
pub mod logits;
pub mod perplexity;
