//! What the README says that compiling its examples cannot check: every
//! workspace crate its Rust examples `use` is named in one of its
//! `[dependencies]` blocks, so a reader who copies an example and its
//! dependencies gets a program that builds; and no example hides lines
//! from the reader (rustdoc's `# `), so what compiles is what is shown.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

/// The fenced code blocks of `markdown` whose info string starts with `lang`.
fn blocks<'a>(markdown: &'a str, lang: &str) -> Vec<Vec<&'a str>> {
    let mut found = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in markdown.lines() {
        match (&mut current, line.strip_prefix("```")) {
            (None, Some(info)) if info.starts_with(lang) => current = Some(Vec::new()),
            (Some(_), Some(_)) => found.extend(current.take()),
            (Some(lines), None) => lines.push(line),
            _ => {}
        }
    }
    found
}

#[test]
fn every_crate_the_readme_examples_use_is_in_its_dependency_blocks() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("the workspace README");
    let declared: BTreeSet<String> = blocks(&readme, "toml")
        .into_iter()
        .flatten()
        .filter_map(|line| line.split_once('=').map(|(name, _)| name.trim().to_owned()))
        .collect();
    let used: BTreeSet<String> = blocks(&readme, "rust")
        .into_iter()
        .flatten()
        .filter_map(|line| line.trim().strip_prefix("use "))
        .filter_map(|path| path.split("::").next())
        .filter(|name| name.starts_with("lock_"))
        .map(|name| name.replace('_', "-"))
        .collect();
    assert!(!used.is_empty(), "the README's examples use the crates");
    let missing: Vec<&String> = used.difference(&declared).collect();
    assert!(
        missing.is_empty(),
        "README examples use {missing:?}, which no [dependencies] block in it names"
    );
}

#[test]
fn the_readme_shows_its_examples_whole() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("the workspace README");
    for block in blocks(&readme, "rust") {
        for line in block {
            let trimmed = line.trim_start();
            assert!(
                trimmed != "#" && !trimmed.starts_with("# "),
                "a README example hides a line from its reader: {line:?}"
            );
        }
    }
}
