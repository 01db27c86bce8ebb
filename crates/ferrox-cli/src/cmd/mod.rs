pub mod inspect;
pub mod model;
pub mod pull;
pub mod tokenize;
