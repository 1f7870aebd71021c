//! Keeps the engine free of wire knowledge: the engine's source must not name JSON-RPC error codes,
//! MCP methods or MCP field names (the server owns the wire and hands the engine what it needs), and
//! the model must not depend on the store.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// JSON-RPC error codes reserved by the spec (server errors and the predefined ones).
const WIRE_CODES: [std::ops::RangeInclusive<i64>; 2] = [-32099..=-32000, -32700..=-32600];

/// MCP method prefixes; a string literal holding one names a method.
const METHOD_PREFIXES: [&str; 8] = [
    "tasks/",
    "tools/",
    "notifications/",
    "elicitation/",
    "sampling/",
    "resources/",
    "prompts/",
    "roots/",
];

/// MCP field names (and the server's name for the unauthenticated principal); a string literal
/// that is exactly one of them reads or writes the wire.
const WIRE_FIELDS: [&str; 13] = [
    "isError",
    "content",
    "text",
    "taskId",
    "statusMessage",
    "progressToken",
    "_meta",
    "jsonrpc",
    "structuredContent",
    "clientCapabilities",
    "resultType",
    "inputRequests",
    "anonymous",
];

/// A piece of source code outside comments: either code or the contents of one string literal.
#[derive(Debug, PartialEq)]
enum Piece {
    Code(String),
    Literal(String),
}

/// Splits one file into code and string-literal pieces, each tagged with the line it starts on.
/// Comments (`//…`, `/*…*/`, doc comments) are dropped. Just enough of a Rust lexer for this check:
/// plain, byte and raw strings, escapes, char literals and lifetimes.
fn pieces(source: &str) -> Vec<(usize, Piece)> {
    let chars: Vec<char> = source.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut code = String::new();
    let mut code_line = 1;
    let mut i = 0;
    let flush = |code: &mut String, at: usize, out: &mut Vec<(usize, Piece)>| {
        if !code.trim().is_empty() {
            out.push((at, Piece::Code(std::mem::take(code))));
        }
        code.clear();
    };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '\n' {
            // Pieces of code never span lines, so every finding names the line it is on.
            flush(&mut code, code_line, &mut out);
            line += 1;
            code_line = line;
            i += 1;
        } else if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if chars[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
            flush(&mut code, code_line, &mut out);
            code_line = line;
        } else if let Some(hashes) = raw_string_start(&chars, i) {
            flush(&mut code, code_line, &mut out);
            let start_line = line;
            // Skip `r`, `br`, the hashes and the opening quote.
            i += chars[i..].iter().position(|&c| c == '"').unwrap_or(0) + 1;
            let mut text = String::new();
            while i < chars.len() {
                if chars[i] == '"' && (1..=hashes).all(|k| chars.get(i + k) == Some(&'#')) {
                    i += 1 + hashes;
                    break;
                }
                if chars[i] == '\n' {
                    line += 1;
                }
                text.push(chars[i]);
                i += 1;
            }
            out.push((start_line, Piece::Literal(text)));
            code_line = line;
        } else if c == '"' {
            flush(&mut code, code_line, &mut out);
            let start_line = line;
            i += 1;
            let mut text = String::new();
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    // Keep the escaped character as written: `\"` is a quote inside the literal.
                    if let Some(&e) = chars.get(i + 1) {
                        text.push(e);
                        if e == '\n' {
                            line += 1;
                        }
                    }
                    i += 2;
                    continue;
                }
                if chars[i] == '\n' {
                    line += 1;
                }
                text.push(chars[i]);
                i += 1;
            }
            i += 1;
            out.push((start_line, Piece::Literal(text)));
            code_line = line;
        } else if c == '\'' {
            // A char literal ('x', '\n', '"') is skipped whole; a lifetime ('a) is code.
            if next == Some('\\') {
                let close = chars[i + 2..].iter().position(|&c| c == '\'');
                i += close.map_or(chars.len(), |p| p + 3);
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                code.push(c);
                i += 1;
            }
        } else {
            code.push(c);
            i += 1;
        }
    }
    flush(&mut code, code_line, &mut out);
    out
}

/// The number of `#` of a raw string (`r"`, `r#"`, `br##"`, …) starting at `i`, if one does.
fn raw_string_start(chars: &[char], i: usize) -> Option<usize> {
    let prev_is_ident = i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
    if prev_is_ident {
        return None;
    }
    let mut j = i;
    if chars.get(j) == Some(&'b') {
        j += 1;
    }
    if chars.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let hashes = chars[j..].iter().take_while(|&&c| c == '#').count();
    (chars.get(j + hashes) == Some(&'"')).then_some(hashes)
}

/// Negative integer literals in a piece of code (`-32603`, `-32_603`). rustfmt writes a unary minus
/// against its operand, so `a - 32603` (with spaces, or after an operand) is a subtraction.
fn negative_literals(code: &str) -> Vec<i64> {
    let chars: Vec<char> = code.chars().collect();
    let mut found = Vec::new();
    for (i, &c) in chars.iter().enumerate() {
        if c != '-' {
            continue;
        }
        let after_operand = i > 0 && {
            let p = chars[i - 1];
            p.is_alphanumeric() || matches!(p, '_' | ')' | ']')
        };
        if after_operand || !chars.get(i + 1).is_some_and(|c| c.is_ascii_digit()) {
            continue;
        }
        let digits: String = chars[i + 1..]
            .iter()
            .take_while(|c| c.is_ascii_digit() || **c == '_')
            .filter(|c| **c != '_')
            .collect();
        if let Ok(n) = digits.parse::<i64>() {
            found.push(-n);
        }
    }
    found
}

/// Every wire name in `source`, as `line: what`.
fn wire_names(source: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (line, piece) in pieces(source) {
        match piece {
            Piece::Code(code) => {
                for n in negative_literals(&code) {
                    if WIRE_CODES.iter().any(|r| r.contains(&n)) {
                        found.push((line, format!("JSON-RPC error code {n}")));
                    }
                }
            }
            Piece::Literal(text) => {
                if let Some(p) = METHOD_PREFIXES.iter().find(|p| text.contains(*p)) {
                    found.push((line, format!("MCP method {text:?} (has {p:?})")));
                }
                if WIRE_FIELDS.contains(&text.as_str()) {
                    found.push((line, format!("MCP field name {text:?}")));
                }
            }
        }
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn the_engine_source_names_nothing_of_the_wire() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    files.sort();
    assert!(
        files.iter().any(|f| f.ends_with("src/lib.rs")),
        "the scan must see the crate's sources: {files:?}"
    );
    let mut report = String::new();
    for file in &files {
        let source = std::fs::read_to_string(file).unwrap();
        let shown = file.strip_prefix(root).unwrap_or(file).display();
        for (line, what) in wire_names(&source) {
            let _ = writeln!(report, "{shown}:{line}: {what}");
        }
    }
    assert!(
        report.is_empty(),
        "wire names in the engine (the server supplies these):\n{report}"
    );
}

#[test]
fn the_model_does_not_depend_on_the_store() {
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/model.rs");
    let source = std::fs::read_to_string(&model).unwrap();
    let hits: Vec<String> = source
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains("crate::store"))
        .map(|(n, l)| format!("src/model.rs:{}: {}", n + 1, l.trim()))
        .collect();
    assert!(
        hits.is_empty(),
        "the model must not use the store:\n{}",
        hits.join("\n")
    );
}

// The checks themselves, on samples, so a broken scanner cannot pass silently.

#[test]
fn the_scan_finds_each_kind_of_wire_name() {
    let sample = r##"
fn f() {
    let code = -32603;
    let also = -32_001;
    let x = "tools/call";
    let y = v.get("content");
    let z = json!({"_meta": 1});
    let w = r#"{"a": "notifications/progress"}"#;
}
"##;
    let lines: Vec<usize> = wire_names(sample).into_iter().map(|(l, _)| l).collect();
    assert_eq!(lines, [3, 4, 5, 6, 7, 8]);
}

#[test]
fn the_scan_ignores_comments_and_innocent_code() {
    let sample = r#"
// code -32603 and "tools/call" in a comment
/// a doc comment naming "content" and `-32700`
fn f<'a>(s: &'a str) -> i64 {
    let q = '"';
    let e = "say \"content\" here";
    let n = -1 - 32000; /* "isError" */
    let m = a-32603;
    let t = "texts";
    -31999 + -32701 + -32100
}
"#;
    assert_eq!(wire_names(sample), Vec::<(usize, String)>::new());
}

#[test]
fn the_scan_reports_the_line_of_a_finding_after_a_multiline_literal() {
    let sample = "let a = \"one\ntwo\";\nlet b = \"jsonrpc\";\n";
    assert_eq!(
        wire_names(sample),
        [(3, "MCP field name \"jsonrpc\"".to_string())]
    );
}

/// The store contract's sub-traits (src/store/contract.rs), each with its part of the test kit.
const STORE_CONCERNS: [(&str, &str); 8] = [
    ("TaskRows", "tasks"),
    ("InputStore", "inputs"),
    ("JournalStore", "journal"),
    ("SignalStore", "signals"),
    ("LeaseStore", "leases"),
    ("SessionStore", "sessions"),
    ("OutboxStore", "outbox"),
    ("EventStore", "events"),
];

/// Defaults the contract may have: each does the method's work another way (`get_many` by one
/// `get` per id), none succeeds without it.
const ALLOWED_DEFAULTS: [(&str, &str); 1] = [("TaskRows", "get_many")];

/// The trait methods in `source` that have a default body, as `(line, trait, method)`.
fn default_bodies(source: &str) -> Vec<(usize, String, String)> {
    let mut found = Vec::new();
    let mut in_trait: Option<String> = None;
    let mut depth = 0usize;
    let mut method: Option<(usize, String)> = None;
    for (line, piece) in pieces(source) {
        let Piece::Code(code) = piece else { continue };
        let code = code.trim();
        if depth == 0 {
            if let Some(rest) = code.strip_prefix("pub trait ") {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                in_trait = Some(name);
            }
        }
        if let Some(trait_name) = &in_trait {
            if depth == 1 {
                if let Some(at) = code.find("fn ") {
                    let name: String = code[at + 3..]
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    method = Some((line, name));
                }
            }
            if depth == 1 && method.is_some() {
                if code.contains('{') {
                    if let Some((at, name)) = method.take() {
                        found.push((at, trait_name.clone(), name));
                    }
                } else if code.ends_with(';') {
                    method = None;
                }
            }
        }
        for c in code.chars() {
            match c {
                '{' => depth += 1,
                '}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        if depth == 0 && code.ends_with('}') {
            in_trait = None;
        }
    }
    found
}

#[test]
fn the_store_contract_has_no_default_that_succeeds_without_the_work() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let source = std::fs::read_to_string(root.join("src/store/contract.rs")).unwrap();
    for (name, _) in STORE_CONCERNS {
        assert!(
            source.contains(&format!("pub trait {name}: ")),
            "contract.rs must hold the sub-trait {name}"
        );
    }
    let defaults = default_bodies(&source);
    assert!(
        defaults
            .iter()
            .any(|(_, t, m)| t == "TaskRows" && m == "get_many"),
        "the scan must see the one default there is: {defaults:?}"
    );
    let unexpected: Vec<String> = defaults
        .iter()
        .filter(|(_, t, m)| !ALLOWED_DEFAULTS.contains(&(t.as_str(), m.as_str())))
        .map(|(line, t, m)| format!("src/store/contract.rs:{line}: {t}::{m}"))
        .collect();
    assert!(
        unexpected.is_empty(),
        "a store method with a default body lets a backend forget it and nothing says so; make it \
         required (or optional as an Option<&dyn …>):\n{}",
        unexpected.join("\n")
    );
}

#[test]
fn each_part_of_the_store_test_kit_needs_only_its_own_concerns() {
    let kit = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store/testkit");
    let run_all = std::fs::read_to_string(kit.join("mod.rs")).unwrap();
    for (concern, part) in STORE_CONCERNS {
        assert!(
            run_all.contains(&format!("    {part}::run(&make).await;")),
            "run_all must run the test kit's part for {concern} ({part}::run)"
        );
        let file = kit.join(format!("{part}.rs"));
        let source = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("the test kit's part for {concern}: {e}"));
        let code: String = pieces(&source)
            .into_iter()
            .filter_map(|(_, p)| match p {
                Piece::Code(c) => Some(c),
                Piece::Literal(_) => None,
            })
            .collect::<Vec<_>>()
            .join("\n");
        assert!(
            code.contains(concern),
            "testkit/{part}.rs must test {concern}"
        );
        assert!(
            !code.contains("TaskStore"),
            "testkit/{part}.rs names the whole TaskStore: bound it by the sub-traits it tests"
        );
    }
}

#[test]
fn the_default_body_scan_sees_bodies_and_not_declarations() {
    let sample = r#"
/// doc with { a brace
pub trait A: Send {
    /// One.
    async fn one(&self) -> Result<(), E>;
    async fn two(
        &self,
        x: u64,
    ) -> Result<(), E> {
        Ok(())
    }
    fn three(&self) -> bool { true }
}
pub trait B {
    fn four(&self) -> &str;
}
"#;
    let found: Vec<(usize, String)> = default_bodies(sample)
        .into_iter()
        .map(|(l, t, m)| (l, format!("{t}::{m}")))
        .collect();
    assert_eq!(
        found,
        [(6, "A::two".to_string()), (12, "A::three".to_string())]
    );
}
