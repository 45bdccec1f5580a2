//! The README's channel recipes are the code of `tests/fresh/app`, the app CI builds on a fresh
//! resolution and whose test pays the channel route: "Sell through payment channels" is its
//! `src/main.rs`, "Test a channel route" its `tests/channel.rs` (`main` becoming the
//! `#[tokio::test]` the README's comment names). Both blocks are also doctests of this crate.

use std::path::Path;

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The first Rust block of the README section headed `heading`.
fn block(readme: &str, heading: &str) -> String {
    let section = readme
        .split("\n### ")
        .find(|section| section.starts_with(heading))
        .unwrap_or_else(|| panic!("no section {heading:?} in the README"));
    let start = section
        .find("```rust")
        .unwrap_or_else(|| panic!("no Rust block in {heading:?}"));
    let code = &section[start..];
    let code = &code[code.find('\n').unwrap() + 1..];
    code[..code.find("```").unwrap()].to_owned()
}

#[test]
fn selling_through_channels_is_the_fresh_apps_main() {
    let readme = read("README.md");
    assert_eq!(
        block(&readme, "Sell through payment channels"),
        read("tests/fresh/app/src/main.rs")
    );
}

#[test]
fn testing_a_channel_route_is_the_fresh_apps_test() {
    let readme = read("README.md");
    let shown = block(&readme, "Test a channel route");
    let main =
        "#[tokio::main(flavor = \"current_thread\")] // in a test: #[tokio::test]\nasync fn main()";
    assert!(shown.contains(main), "the README's test keeps its main");
    let test = shown.replace(main, "#[tokio::test]\nasync fn a_deposit_then_vouchers()");
    assert_eq!(test, read("tests/fresh/app/tests/channel.rs"));
}
