//! Longer explanations than the README's: how the layer behaves, what each piece holds, and how
//! the project is tested and measured. The README's recipes show the code; these pages say why.

#[doc = include_str!("behaviour.md")]
pub mod behaviour {}

#[doc = include_str!("crates.md")]
pub mod crates {}

#[doc = include_str!("project.md")]
pub mod project {}
