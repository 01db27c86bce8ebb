pub mod engine;
pub mod inspect;
pub mod logits;
pub mod model;
pub mod perplexity;
pub mod pull;
pub mod serve;
pub mod tokenize;
