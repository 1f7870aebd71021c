//! Keeps the server's layers pointing down (ARCHITECTURE.md): transports → `inbound` → `wire` →
//! `core` → the engine. A module may name the layers below it, never one above: `core` names no
//! wire, inbound or transport module; `wire` no inbound or transport module; `inbound` no transport.
//! Comments are not code, so a doc link upward is fine.

use std::path::{Path, PathBuf};

/// The layers, top first: (the directory or file of the layer, how code names it).
const LAYERS: [(&str, &str); 4] = [
    ("transport", "crate::transport"),
    ("inbound.rs", "crate::inbound"),
    ("wire", "crate::wire"),
    ("core", "crate::core"),
];

/// What else names a layer from outside it: the transports' public re-exports.
const ALIASES: [(&str, &str); 3] = [
    ("crate::http", "crate::transport"),
    ("crate::stdio", "crate::transport"),
    ("crate::connections", "crate::transport"),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a line: without its comment (from `//` on) and without the contents of its string
/// literals.
fn code_of(line: &str) -> String {
    let bytes = line.as_bytes();
    let mut code = String::new();
    let mut in_string = false;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            match b {
                b'\\' => i += 1,
                b'"' => {
                    in_string = false;
                    code.push('"');
                }
                _ => {}
            }
        } else if b == b'"' {
            in_string = true;
            code.push('"');
        } else if b == b'/' && bytes.get(i + 1) == Some(&b'/') {
            break;
        } else {
            code.push(b as char);
        }
        i += 1;
    }
    code
}

/// Each line of `source` (outside comments) that names one of `above`, with its number.
fn upward_names(source: &str, above: &[&str]) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut in_block_comment = false;
    for (n, line) in source.lines().enumerate() {
        let mut line = line;
        if in_block_comment {
            match line.find("*/") {
                Some(end) => {
                    in_block_comment = false;
                    line = &line[end + 2..];
                }
                None => continue,
            }
        }
        if let Some(start) = line.find("/*") {
            in_block_comment = !line[start..].contains("*/");
            line = &line[..start];
        }
        let code = code_of(line);
        let code = code.as_str();
        let mut names: Vec<&str> = above.to_vec();
        for (alias, layer) in ALIASES {
            if above.contains(&layer) {
                names.push(alias);
            }
        }
        for name in names {
            // `crate::wire` but not `crate::wireless`: the name ends at a path separator or a
            // non-identifier character.
            let mut from = 0;
            while let Some(at) = code[from..].find(name) {
                let end = from + at + name.len();
                let next = code[end..].chars().next();
                if next.is_none_or(|c| !(c.is_alphanumeric() || c == '_')) {
                    found.push((n + 1, code.trim().to_string()));
                    break;
                }
                from = end;
            }
        }
    }
    found
}

/// Every place in `src` where a layer names one above it.
fn violations(src: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for (i, (place, _)) in LAYERS.iter().enumerate() {
        let above: Vec<&str> = LAYERS[..i].iter().map(|(_, name)| *name).collect();
        if above.is_empty() {
            continue;
        }
        let path = src.join(place);
        let mut files = Vec::new();
        if path.is_dir() {
            rust_files(&path, &mut files);
        } else {
            files.push(path);
        }
        for file in files {
            let source = std::fs::read_to_string(&file).unwrap();
            for (line, code) in upward_names(&source, &above) {
                out.push(format!(
                    "{}:{line}: `{code}` names a layer above {place}",
                    file.strip_prefix(src).unwrap_or(&file).display()
                ));
            }
        }
    }
    out
}

#[test]
fn layers_name_only_the_layers_below_them() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = violations(&src);
    assert!(
        found.is_empty(),
        "arrows point down (ARCHITECTURE.md):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_sees_an_upward_name_and_ignores_comments_and_strings() {
    let above = ["crate::wire", "crate::transport"];
    let source = r#"
use crate::wire::notifications_for;
// crate::wire in a comment
/// [`Era`](crate::wire::Era) in a doc link
let url = "http://x"; let m = crate::transport::streams::Streams::default();
let s = "crate::wire in a string"; // and crate::wire after it
/* crate::wire
   crate::wire */
let w = crate::wireless::X;
let h = crate::http::serve;
"#;
    let found = upward_names(source, &above);
    let lines: Vec<usize> = found.iter().map(|(n, _)| *n).collect();
    assert_eq!(lines, [2, 5, 10], "{found:?}");
}
