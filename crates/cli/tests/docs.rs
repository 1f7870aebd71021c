//! The repository's Markdown renders as written: every code fence is closed, and every table has its
//! delimiter row and as many cells in each row as in its header. A paragraph left inside a table once
//! turned the table's last rows into raw pipes in the README (issue 31, item 4).

use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Markdown files a reader meets: the repository's own, not its dependencies' or build output.
fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if path.is_dir() {
            if !name.starts_with('.')
                && !["target", "node_modules", "fuzz"].contains(&name.as_str())
            {
                markdown_files(&path, out);
            }
        } else if name.ends_with(".md") {
            out.push(path);
        }
    }
}

/// The cells of a table row: split at `|` outside inline code, a `\|` being a literal pipe.
fn cells(row: &str) -> Vec<String> {
    let row = row.trim();
    let row = row.strip_prefix('|').unwrap_or(row);
    let row = row.strip_suffix('|').unwrap_or(row);
    let mut out = vec![String::new()];
    let mut in_code = false;
    let mut chars = row.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                out.last_mut().unwrap().push('|');
                chars.next();
            }
            '`' => {
                in_code = !in_code;
                out.last_mut().unwrap().push(c);
            }
            '|' if !in_code => out.push(String::new()),
            _ => out.last_mut().unwrap().push(c),
        }
    }
    out
}

fn is_delimiter(row: &str) -> bool {
    cells(row).iter().all(|c| {
        let c = c.trim();
        let c = c.strip_prefix(':').unwrap_or(c);
        let c = c.strip_suffix(':').unwrap_or(c);
        !c.is_empty() && c.chars().all(|ch| ch == '-')
    })
}

/// What is wrong with one file's Markdown, a line each (line numbers from 1).
fn problems(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut fence: Option<(usize, String)> = None;
    let mut table: Vec<(usize, &str)> = Vec::new();
    let check_table = |table: &mut Vec<(usize, &str)>, found: &mut Vec<String>| {
        if let Some(&(first, header)) = table.first() {
            match table.get(1) {
                Some(&(_, delim)) if is_delimiter(delim) => {
                    let width = cells(header).len();
                    for &(n, row) in &table[1..] {
                        let got = cells(row).len();
                        if got != width {
                            found.push(format!(
                                "line {n}: {got} cells in a table whose header (line {first}) has {width}"
                            ));
                        }
                    }
                }
                _ => found.push(format!(
                    "line {first}: rows of pipes with no delimiter row under the first: they render as text"
                )),
            }
        }
        table.clear();
    };
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let trimmed = line.trim_start();
        let marker: String = trimmed
            .chars()
            .take_while(|&c| c == '`' || c == '~')
            .collect();
        if marker.len() >= 3 && marker.chars().all(|c| c == marker.chars().next().unwrap()) {
            match &fence {
                None => {
                    check_table(&mut table, &mut found);
                    fence = Some((n, marker));
                    continue;
                }
                Some((_, open))
                    if marker.starts_with(open.as_str()) && trimmed.trim() == marker =>
                {
                    fence = None;
                    continue;
                }
                Some(_) => {}
            }
        }
        if fence.is_some() {
            continue;
        }
        if trimmed.starts_with('|') {
            table.push((n, line));
        } else {
            check_table(&mut table, &mut found);
        }
    }
    check_table(&mut table, &mut found);
    if let Some((n, marker)) = fence {
        found.push(format!("line {n}: the code fence {marker} is never closed"));
    }
    found
}

#[test]
fn the_repositorys_markdown_tables_and_code_fences_render() {
    let mut files = Vec::new();
    markdown_files(&repo_root(), &mut files);
    files.sort();
    assert!(
        files.iter().any(|f| f.ends_with("README.md")) && files.len() > 5,
        "found {files:?}"
    );
    let mut all = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for p in problems(&text) {
            all.push(format!(
                "{}: {p}",
                file.strip_prefix(repo_root()).unwrap_or(file).display()
            ));
        }
    }
    assert!(all.is_empty(), "{}", all.join("\n"));
}

#[test]
fn the_check_finds_a_paragraph_inside_a_table_a_short_row_and_an_open_fence() {
    let good =
        "| a | b |\n|---|:-:|\n| `x|y` | z \\| w |\n\ntext\n\n```toml\n| not | a table\n```\n";
    assert_eq!(problems(good), Vec::<String>::new());
    // The README's footnote once sat between rows: the rows after it were a table with no header.
    let split = "| a | b |\n|---|---|\n| 1 | 2 |\n† a footnote\n| 3 | 4 |\n";
    assert_eq!(
        problems(split),
        ["line 5: rows of pipes with no delimiter row under the first: they render as text"]
    );
    let short = "| a | b |\n|---|---|\n| 1 |\n";
    assert_eq!(
        problems(short),
        ["line 3: 1 cells in a table whose header (line 1) has 2"]
    );
    assert_eq!(
        problems("text\n```sh\necho\n"),
        ["line 2: the code fence ``` is never closed"]
    );
}
