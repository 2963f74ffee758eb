//! The docs check for commands: every `rondo …` command line the README and
//! `docs/*.md` show (in `sh` code blocks, and as inline code such as the
//! README's command table), also written `cargo run --release -- …`, names
//! a subcommand the binary has, and every `--flag` it shows is one that
//! subcommand's `--help` lists. The commands are not run (many need a
//! server, a data directory or minutes); what is checked is that a user who
//! copies one gets past the argument parser.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A command as the docs show it: where, and its words after `rondo`.
#[derive(Debug)]
struct Shown {
    at: String,
    words: Vec<String>,
}

/// The words after `rondo ` or `cargo run --release -- ` at the start of
/// `text` (after an optional `$ `), up to a comment or the end.
fn command_words(text: &str) -> Option<Vec<String>> {
    let text = text.trim().trim_start_matches("$ ");
    let rest = text
        .strip_prefix("rondo ")
        .or_else(|| text.strip_prefix("cargo run --release -- "))
        .or_else(|| text.strip_prefix("./target/release/rondo "))?;
    let rest = rest.split(" #").next().unwrap_or(rest);
    // A Markdown table writes `a|b` as `a\|b`.
    let words: Vec<String> = rest
        .split_whitespace()
        .map(|w| w.replace("\\|", "|"))
        .collect();
    // A command starts with a subcommand (`rondo dashboard: …` is a page
    // title, not a command).
    words
        .first()
        .is_some_and(|w| w.split('|').all(is_command_word))
        .then_some(words)
}

fn shown_commands(file: &Path) -> Vec<Shown> {
    let text = std::fs::read_to_string(file).unwrap();
    let name = file.file_name().unwrap().to_string_lossy().into_owned();
    let mut out = Vec::new();
    let mut in_sh = false;
    for (n, line) in text.lines().enumerate() {
        let at = format!("{name}:{}", n + 1);
        if line.trim_start().starts_with("```") {
            in_sh = !in_sh
                && matches!(
                    line.trim().trim_start_matches('`'),
                    "sh" | "console" | "bash"
                );
            continue;
        }
        if in_sh {
            if let Some(words) = command_words(line) {
                out.push(Shown { at, words });
            }
            continue;
        }
        // Inline code spans.
        for (i, span) in line.split('`').enumerate() {
            if i % 2 == 1
                && let Some(words) = command_words(span)
            {
                out.push(Shown {
                    at: at.clone(),
                    words,
                });
            }
        }
    }
    out
}

/// `rondo bench admission|simulate [--json]` is two commands: each
/// alternative of a `a|b` subcommand word in turn.
fn alternatives(shown: Shown) -> Vec<Shown> {
    let at = shown
        .words
        .iter()
        .position(|w| w.contains('|') && w.split('|').all(is_command_word));
    let Some(i) = at.filter(|&i| shown.words[..i].iter().all(|w| is_command_word(w))) else {
        return vec![shown];
    };
    shown.words[i]
        .split('|')
        .map(|alt| {
            let mut words = shown.words.clone();
            words[i] = alt.to_string();
            Shown {
                at: shown.at.clone(),
                words,
            }
        })
        .collect()
}

/// A word that can be a subcommand's name.
fn is_command_word(word: &str) -> bool {
    !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_lowercase() || c == '-' || c.is_ascii_digit())
        && !word.starts_with('-')
}

/// The flags a shown command uses: `--name` words, from `[--name VALUE]`,
/// `--name=VALUE` and `a|b` alternatives alike.
fn flags(words: &[String]) -> BTreeSet<String> {
    words
        .iter()
        .flat_map(|w| w.split('|'))
        .map(|w| w.trim_matches(|c| c == '[' || c == ']' || c == '(' || c == ')' || c == ','))
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(|w| w.split('=').next().unwrap().to_string())
        .collect()
}

/// Whether `help` lists `flag` as a whole word (`--stride-byte` is not
/// `--stride-bytes`).
fn has_flag(help: &str, flag: &str) -> bool {
    help.match_indices(flag).any(|(i, _)| {
        help[i + flag.len()..]
            .chars()
            .next()
            .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
    })
}

#[test]
fn every_command_the_docs_show_parses() {
    let rondo = env!("CARGO_BIN_EXE_rondo");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    files.push(root.join("README.md"));
    files.sort();
    let mut help_of: BTreeMap<Vec<String>, Option<String>> = BTreeMap::new();
    let mut help = |path: &[String]| -> Option<String> {
        help_of
            .entry(path.to_vec())
            .or_insert_with(|| {
                let out = Command::new(rondo)
                    .args(path)
                    .arg("--help")
                    .output()
                    .unwrap();
                out.status
                    .success()
                    .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
            })
            .clone()
    };
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in &files {
        for shown in shown_commands(file).into_iter().flat_map(alternatives) {
            // The longest run of leading command words that `--help` knows.
            let lead: Vec<String> = shown
                .words
                .iter()
                .take_while(|w| is_command_word(w))
                .cloned()
                .collect();
            let found = (1..=lead.len())
                .rev()
                .find_map(|n| help(&lead[..n]).map(|h| (n, h)));
            let Some((n, text)) = found else {
                problems.push(format!(
                    "{}: `rondo {}`: no such command",
                    shown.at,
                    shown.words.join(" ")
                ));
                continue;
            };
            for flag in flags(&shown.words) {
                if flag != "--help" && !has_flag(&text, &flag) {
                    problems.push(format!(
                        "{}: `rondo {}`: {flag} is not a flag of `rondo {}`",
                        shown.at,
                        shown.words.join(" "),
                        lead[..n].join(" ")
                    ));
                }
            }
            checked += 1;
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
    assert!(
        checked > 30,
        "only {checked} commands found: the scan is broken"
    );
    eprintln!("{checked} commands shown in the docs parse");
}

/// The README's `cargo run --release -- serve` (and every `cargo run
/// --release -- …` the docs show) needs exactly one binary among the
/// workspace's default members, or cargo asks which to run: checked on the
/// workspace's own metadata.
#[test]
fn cargo_run_at_the_root_finds_the_rondo_binary() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .current_dir(&root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let defaults: BTreeSet<&str> = meta["workspace_default_members"]
        .as_array()
        .expect("workspace_default_members")
        .iter()
        .filter_map(|id| id.as_str())
        .collect();
    let binaries: Vec<&str> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| defaults.contains(p["id"].as_str().unwrap()))
        .flat_map(|p| p["targets"].as_array().unwrap())
        .filter(|t| t["kind"].as_array().unwrap().iter().any(|k| k == "bin"))
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(binaries, ["rondo"]);
}
