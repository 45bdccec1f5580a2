//! Every published package's README reads the same on crates.io as in its docs: each Rust block
//! is compiled as shown (the README is part of the crate's docs, so its blocks are doctests),
//! none hides lines (rustdoc's `# ` lines) or is skipped (`ignore`), each README has its install
//! line, and each feature of the package is named in it.

use std::path::{Path, PathBuf};

/// The packages published beside tower-x402. Its own README (`.`) shows excerpts of
/// `tests/readme.rs` (`readme_blocks` checks them); its install line and features are checked
/// here too.
const PACKAGES: [&str; 9] = [
    "crates/x402-wire",
    "crates/tower-x402-solana",
    "crates/tower-x402-siwx",
    "crates/tower-x402-postgres",
    "crates/tower-x402-evm",
    "crates/tower-x402-channels",
    "crates/tower-x402-metrics",
    "tests/sandbox",
    "examples/buyer",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Each fenced block of `markdown`: its info string and its lines.
fn blocks(markdown: &str) -> Vec<(String, Vec<String>)> {
    let mut blocks = Vec::new();
    let mut open: Option<(String, Vec<String>)> = None;
    for line in markdown.lines() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(info)) => open = Some((info.trim().to_owned(), Vec::new())),
            (Some(_), Some(_)) => blocks.extend(open.take()),
            (Some((_, lines)), None) => lines.push(line.to_owned()),
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "a fenced block is never closed");
    blocks
}

/// The value of `key = "…"` in the `[package]` table of `manifest`.
fn package_field(manifest: &str, key: &str) -> String {
    let prefix = format!("{key} = \"");
    manifest
        .lines()
        .skip_while(|line| *line != "[package]")
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|rest| rest.strip_suffix('"'))
        .unwrap_or_else(|| panic!("no {key} in [package]"))
        .to_owned()
}

/// The features declared in `manifest`'s `[features]` table, `default` left out.
fn features(manifest: &str) -> Vec<String> {
    manifest
        .lines()
        .skip_while(|line| *line != "[features]")
        .skip(1)
        .take_while(|line| !line.starts_with('['))
        .filter(|line| !line.starts_with('#') && line.contains(" = "))
        .filter_map(|line| line.split(" = ").next())
        .filter(|name| *name != "default")
        .map(str::to_owned)
        .collect()
}

#[test]
fn no_rust_block_hides_lines_or_is_skipped() {
    for package in PACKAGES {
        let readme = read(&root().join(package).join("README.md"));
        for (info, lines) in blocks(&readme) {
            if info.split(',').next() != Some("rust") {
                continue;
            }
            assert!(
                !info.split(',').any(|attribute| attribute == "ignore"),
                "{package}/README.md: a ```{info} block is not compiled"
            );
            for line in &lines {
                assert!(
                    !line.starts_with("# ") && line != "#",
                    "{package}/README.md: a hidden line in a ```{info} block: {line}"
                );
            }
        }
    }
}

#[test]
fn every_readme_is_compiled_with_its_crate() {
    for package in PACKAGES {
        let readme = read(&root().join(package).join("README.md"));
        let has_rust = blocks(&readme)
            .iter()
            .any(|(info, _)| info.split(',').next() == Some("rust"));
        if !has_rust {
            continue;
        }
        let lib = read(&root().join(package).join("src/lib.rs"));
        assert!(
            lib.contains("include_str!(\"../README.md\")"),
            "{package}: src/lib.rs does not include README.md, so its blocks are not doctests"
        );
    }
}

#[test]
fn every_readme_has_its_install_line() {
    for package in PACKAGES.into_iter().chain(["."]) {
        let manifest = read(&root().join(package).join("Cargo.toml"));
        let name = package_field(&manifest, "name");
        let readme = read(&root().join(package).join("README.md"));
        let installed = blocks(&readme).iter().any(|(info, lines)| {
            let text = lines.join("\n");
            match info.as_str() {
                "toml" => {
                    (text.contains("[dependencies]") || text.contains("[dev-dependencies]"))
                        && text
                            .lines()
                            .any(|line| line.starts_with(&format!("{name} = ")))
                }
                "sh" => {
                    text.contains(&format!("cargo add {name}"))
                        || text.contains(&format!("cargo install {name}"))
                }
                _ => false,
            }
        });
        assert!(installed, "{package}/README.md: no install line for {name}");
    }
}

#[test]
fn every_feature_is_named_in_the_readme() {
    for package in PACKAGES.into_iter().chain(["."]) {
        let manifest = read(&root().join(package).join("Cargo.toml"));
        let readme = read(&root().join(package).join("README.md"));
        for feature in features(&manifest) {
            assert!(
                readme.contains(&format!("`{feature}`")),
                "{package}/README.md does not say what its feature `{feature}` adds"
            );
        }
    }
}
