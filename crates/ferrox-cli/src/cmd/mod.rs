pub mod inspect;
pub mod model;
pub mod pull;
pub mod tokenize;
pub mod engine;
pub mod logits;
pub mod perplexity;
