pub mod inspect;
pub mod pull;
pub mod tokenize;
