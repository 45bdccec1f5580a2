//! The README reads the same on GitHub, crates.io and docs.rs: no Rust block hides lines from
//! the first two (rustdoc's `# ` lines), and every excerpt (`rust,ignore`) is taken from the
//! complete program in `tests/readme.rs`, where it compiles and runs.

use std::path::Path;

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

/// `code` without whitespace and without the trailing commas rustfmt adds, so that an excerpt
/// written on one line matches the formatted program.
fn normalized(code: &str) -> String {
    let compact: String = code.chars().filter(|c| !c.is_whitespace()).collect();
    compact
        .replace(",)", ")")
        .replace(",}", "}")
        .replace(",]", "]")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

#[test]
fn no_rust_block_hides_lines() {
    let readme = read("README.md");
    let rust = blocks(&readme)
        .into_iter()
        .filter(|(info, _)| info.split(',').next() == Some("rust"))
        .collect::<Vec<_>>();
    assert!(rust.len() >= 8, "the README's Rust blocks: {}", rust.len());
    for (info, lines) in &rust {
        for line in lines {
            assert!(
                !line.starts_with("# ") && line != "#",
                "a hidden line in a ```{info} block of the README: {line}"
            );
        }
    }
}

#[test]
fn every_excerpt_is_part_of_the_complete_program() {
    let readme = read("README.md");
    let program = normalized(&read("tests/readme.rs"));
    let excerpts = blocks(&readme)
        .into_iter()
        .filter(|(info, _)| info == "rust,ignore")
        .collect::<Vec<_>>();
    assert!(!excerpts.is_empty(), "the README has excerpts");
    for (_, lines) in excerpts {
        // Each run of lines between blank lines appears in the program, in order.
        let mut from = 0;
        for chunk in lines.join("\n").split("\n\n") {
            let wanted = normalized(chunk);
            match program[from..].find(&wanted) {
                Some(at) => from += at + wanted.len(),
                None => panic!("not in tests/readme.rs (in this order):\n{chunk}"),
            }
        }
    }
}
