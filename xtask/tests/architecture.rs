//! ARCHITECTURE.md against the source tree: its code map names every Rust source file and
//! nothing that does not exist, and its checked invariants (where `unsafe` may appear, who
//! calls the device seam, where an environment variable is read, which modules import in a
//! circle) hold.
//!
//! The paths come from ARCHITECTURE.md, not from this file: when a module moves or an
//! invariant's list changes, the line in ARCHITECTURE.md changes and this test stays. A path
//! ending in `/` is a directory (every file under it); `dir/{a,b}.rs` is `dir/a.rs` and
//! `dir/b.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The repository root (xtask's parent).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives inside the repository")
        .to_path_buf()
}

fn architecture() -> String {
    let path = root().join("ARCHITECTURE.md");
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Every `.rs` file of the repository, as a path relative to the root with `/` separators.
/// Build outputs (`target`, `target-*`) and hidden directories are skipped.
fn sources() -> Vec<String> {
    fn walk(dir: &Path, rel: &str, out: &mut Vec<String>) {
        let entries =
            fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
        for entry in entries {
            let entry = entry.expect("a directory entry");
            let name = entry.file_name().to_string_lossy().into_owned();
            let rel_path = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            let kind = entry.file_type().expect("a file type");
            if kind.is_dir() {
                if name.starts_with('.') || name == "target" || name.starts_with("target-") {
                    continue;
                }
                walk(&entry.path(), &rel_path, out);
            } else if kind.is_file() && name.ends_with(".rs") {
                out.push(rel_path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&root(), "", &mut out);
    out.sort();
    out
}

/// Whether `file` is `entry` or lies under it (an entry ending in `/` is a directory).
fn covers(entry: &str, file: &str) -> bool {
    if entry.ends_with('/') {
        file.starts_with(entry)
    } else {
        file == entry
    }
}

/// The backticked spans of `text`.
fn backticked(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// A backticked span names a path when it holds a `/` or ends in `.rs`.
fn is_path(span: &str) -> bool {
    span.contains('/') || span.ends_with(".rs")
}

/// The paths a span names: one, or one per alternative of its one `{a,b,..}` group.
fn expand(span: &str) -> Vec<String> {
    let Some((head, rest)) = span.split_once('{') else {
        return vec![span.to_string()];
    };
    let (alternatives, tail) = rest
        .split_once('}')
        .unwrap_or_else(|| panic!("ARCHITECTURE.md: `{span}` opens a `{{` it does not close"));
    alternatives
        .split(',')
        .map(|a| format!("{head}{}{tail}", a.trim()))
        .collect()
}

/// The lines of the section that starts at the heading `## {title}`, up to the next `## `.
fn section<'a>(doc: &'a str, title: &str) -> Vec<&'a str> {
    let heading = format!("## {title}");
    let mut lines = doc.lines().skip_while(|l| l.trim_end() != heading);
    assert!(
        lines.next().is_some(),
        "ARCHITECTURE.md has no `{heading}` section"
    );
    lines.take_while(|l| !l.starts_with("## ")).collect()
}

/// The code map's paths, relative to the repository root: each `###` heading may name a
/// root (its first backticked span ending in `/`); each bullet's paths are the backticked
/// spans before its first `:` outside backticks.
fn code_map(doc: &str) -> Vec<String> {
    let mut prefix = String::new();
    let mut paths = Vec::new();
    for line in section(doc, "Code map") {
        if let Some(heading) = line.strip_prefix("### ") {
            prefix = backticked(heading)
                .into_iter()
                .find(|s| s.ends_with('/'))
                .unwrap_or("")
                .to_string();
        } else if let Some(item) = line.strip_prefix("- ") {
            let mut in_tick = false;
            let mut end = item.len();
            for (i, c) in item.char_indices() {
                match c {
                    '`' => in_tick = !in_tick,
                    ':' if !in_tick => {
                        end = i;
                        break;
                    }
                    _ => {}
                }
            }
            for span in backticked(&item[..end]) {
                paths.extend(expand(&format!("{prefix}{span}")));
            }
        }
    }
    assert!(
        !paths.is_empty(),
        "ARCHITECTURE.md's code map names no path"
    );
    paths
}

/// One checked invariant: the bullet of the "Invariants" section that starts with `start`
/// (continuation lines included), split at the word "outside" into the paths it applies to
/// (none: the whole repository) and the paths it allows. The allowed list ends at the first
/// sentence's end.
struct Rule {
    scope: Vec<String>,
    allowed: Vec<String>,
}

fn rule(doc: &str, start: &str) -> Rule {
    let lines = section(doc, "Invariants");
    let first = lines
        .iter()
        .position(|l| l.starts_with(start))
        .unwrap_or_else(|| panic!("ARCHITECTURE.md's invariants lost the line `{start}...`"));
    let mut text = lines[first].to_string();
    for l in &lines[first + 1..] {
        if l.starts_with("- ") || l.trim().is_empty() {
            break;
        }
        text.push(' ');
        text.push_str(l.trim());
    }
    let (before, after) = text
        .split_once(" outside ")
        .unwrap_or_else(|| panic!("the line `{start}...` says no \"outside\""));
    // The first sentence's end outside backticks.
    let mut in_tick = false;
    let mut end = after.len();
    let bytes = after.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'`' => in_tick = !in_tick,
            b'.' if !in_tick && bytes.get(i + 1).is_none_or(|n| n.is_ascii_whitespace()) => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    let paths = |s: &str| -> Vec<String> {
        backticked(s)
            .into_iter()
            .filter(|s| is_path(s))
            .flat_map(expand)
            .collect()
    };
    let allowed = paths(&after[..end]);
    assert!(!allowed.is_empty(), "the line `{start}...` allows no path");
    Rule {
        scope: paths(before),
        allowed,
    }
}

/// Rust source with comments, string literals and character literals blanked out (each
/// replaced by one space), so that words in them are not taken for code.
fn code_only(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < c.len() {
        let prev_ident = i > 0 && ident(c[i - 1]);
        if c[i] == '/' && c.get(i + 1) == Some(&'/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
            out.push(' ');
        } else if c[i] == '/' && c.get(i + 1) == Some(&'*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if !prev_ident && (c[i] == 'r' || (c[i] == 'b' && c.get(i + 1) == Some(&'r'))) && {
            let mut j = if c[i] == 'b' { i + 2 } else { i + 1 };
            while c.get(j) == Some(&'#') {
                j += 1;
            }
            c.get(j) == Some(&'"')
        } {
            // A raw string: r"..", r#".."#, br"..".
            let mut j = if c[i] == 'b' { i + 2 } else { i + 1 };
            let mut hashes = 0;
            while c[j] == '#' {
                hashes += 1;
                j += 1;
            }
            j += 1;
            loop {
                if j >= c.len() {
                    break;
                }
                if c[j] == '"' && (0..hashes).all(|k| c.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            i = j;
            out.push(' ');
        } else if c[i] == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push(' ');
        } else if c[i] == '\'' && c.get(i + 1) == Some(&'\\') {
            // An escaped character literal: '\n', '\'', '\u{..}'.
            i += 2;
            while i < c.len() && c[i] != '\'' {
                i += 1;
            }
            i += 1;
            out.push(' ');
        } else if c[i] == '\'' && c.get(i + 2) == Some(&'\'') {
            i += 3;
            out.push(' ');
        } else {
            // Code, or a lifetime's quote.
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// Whether `code` holds `word` as a whole identifier, preceded by `before` (if any) and
/// followed, after any whitespace, by `after` (if any).
fn has_word(code: &str, word: &str, before: &[&str], after: Option<char>) -> bool {
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    code.match_indices(word).any(|(at, _)| {
        let head = &code[..at];
        let tail = &code[at + word.len()..];
        if head.chars().next_back().is_some_and(ident) || tail.chars().next().is_some_and(ident) {
            return false;
        }
        let head = head.trim_end();
        let before_ok = before.is_empty() || before.iter().any(|b| head.ends_with(b));
        let after_ok = after.is_none_or(|a| tail.trim_start().starts_with(a));
        before_ok && after_ok
    })
}

/// Checks one rule: every source file in its scope that `holds` is allowed, and every allowed
/// path holds it somewhere (so the list does not outgrow the code).
fn check(name: &str, rule: &Rule, holds: impl Fn(&str) -> bool) {
    let root = root();
    let mut hits = BTreeSet::new();
    for file in sources() {
        if !rule.scope.is_empty() && !rule.scope.iter().any(|s| covers(s, &file)) {
            continue;
        }
        let src = fs::read_to_string(root.join(&file)).expect("a readable source file");
        if holds(&code_only(&src)) {
            hits.insert(file);
        }
    }
    let stray: Vec<_> = hits
        .iter()
        .filter(|f| !rule.allowed.iter().any(|a| covers(a, f)))
        .collect();
    assert!(
        stray.is_empty(),
        "{name} in files ARCHITECTURE.md does not allow: {stray:?}\n\
         (move it to an allowed module, or add the file to the invariant's line)"
    );
    let idle: Vec<_> = rule
        .allowed
        .iter()
        .filter(|a| !hits.iter().any(|f| covers(a, f)))
        .collect();
    assert!(
        idle.is_empty(),
        "ARCHITECTURE.md allows {name} in paths that hold none: {idle:?} (remove them from the line)"
    );
}

#[test]
fn the_code_map_names_every_source_file_and_only_paths_that_exist() {
    let doc = architecture();
    let map = code_map(&doc);
    let missing: Vec<_> = map.iter().filter(|p| !root().join(p).exists()).collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md's code map names paths that do not exist: {missing:?}"
    );
    let unnamed: Vec<_> = sources()
        .into_iter()
        .filter(|f| !map.iter().any(|p| covers(p, f)))
        .collect();
    assert!(
        unnamed.is_empty(),
        "source files no line of ARCHITECTURE.md's code map names: {unnamed:?}"
    );
}

#[test]
fn unsafe_appears_only_where_architecture_md_allows_it() {
    let rule = rule(&architecture(), "- No `unsafe` outside");
    check("`unsafe`", &rule, |code| {
        has_word(code, "unsafe", &[], None)
    });
}

#[test]
fn only_the_modules_architecture_md_names_call_the_device_seam() {
    const SEAM: [&str; 7] = [
        "allocate_memory",
        "free_memory",
        "map_memory",
        "unmap_memory",
        "flush_ranges",
        "invalidate_ranges",
        "heap_budgets",
    ];
    let rule = rule(&architecture(), "- No call of the device seam");
    assert!(
        !rule.scope.is_empty(),
        "the device seam's line names no scope"
    );
    check("a call of the device seam", &rule, |code| {
        SEAM.iter()
            .any(|f| has_word(code, f, &[".", "::"], Some('(')))
    });
}

#[test]
fn environment_variables_are_read_only_where_architecture_md_allows() {
    let rule = rule(&architecture(), "- No environment variable read");
    assert!(
        !rule.scope.is_empty(),
        "the environment's line names no scope"
    );
    check("an environment variable read", &rule, |code| {
        ["var", "var_os", "vars", "vars_os"]
            .iter()
            .any(|f| has_word(code, f, &["env::"], Some('(')))
    });
}

#[test]
fn only_the_device_builder_creates_devices() {
    let rule = rule(&architecture(), "- No logical device created");
    check("`vkCreateDevice`", &rule, |code| {
        has_word(code, "create_device", &["."], Some('('))
    });
}

/// The module paths a Rust source names from `crate`, `super` or `self`, with `{..}`
/// groups expanded (`use super::{a::B, c};` names `super::a::B` and `super::c`).
fn module_paths(code: &str) -> Vec<Vec<String>> {
    fn ident(c: &[char], at: &mut usize) -> Option<String> {
        let start = *at;
        while *at < c.len() && (c[*at].is_alphanumeric() || c[*at] == '_') {
            *at += 1;
        }
        (*at > start).then(|| c[start..*at].iter().collect())
    }
    fn skip_space(c: &[char], at: &mut usize) {
        while *at < c.len() && c[*at].is_whitespace() {
            *at += 1;
        }
    }
    /// Steps over `::` (and the spaces around it), if it is next.
    fn sep(c: &[char], at: &mut usize) -> bool {
        let mut k = *at;
        skip_space(c, &mut k);
        if c.get(k) == Some(&':') && c.get(k + 1) == Some(&':') {
            *at = k + 2;
            skip_space(c, at);
            true
        } else {
            false
        }
    }
    /// The path at `at`, after `prefix`, into `out`; a group, each of its items.
    fn path(c: &[char], at: &mut usize, mut p: Vec<String>, out: &mut Vec<Vec<String>>) {
        loop {
            if c.get(*at) == Some(&'{') {
                *at += 1;
                loop {
                    skip_space(c, at);
                    match c.get(*at) {
                        None => return,
                        Some('}') => {
                            *at += 1;
                            return;
                        }
                        Some(',') => *at += 1,
                        Some(_) => {
                            let before = *at;
                            path(c, at, p.clone(), out);
                            // Past `as name`, up to the item's end.
                            while *at < c.len() && !matches!(c[*at], ',' | '}') {
                                *at += 1;
                            }
                            if *at == before {
                                *at += 1;
                            }
                        }
                    }
                }
            }
            match ident(c, at) {
                // `a::{self, ..}` names `a`.
                Some(name) if name == "self" && p.len() > 1 => {}
                Some(name) => p.push(name),
                None => break,
            }
            if !sep(c, at) {
                break;
            }
        }
        out.push(p);
    }
    let c: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut at = 0;
    while at < c.len() {
        let starts =
            at == 0 || !(c[at - 1].is_alphanumeric() || c[at - 1] == '_' || c[at - 1] == ':');
        let mut k = at;
        match ident(&c, &mut k) {
            Some(first) if starts && matches!(first.as_str(), "crate" | "super" | "self") => {
                at = k;
                if sep(&c, &mut at) {
                    path(&c, &mut at, vec![first], &mut out);
                }
            }
            Some(_) => at = k,
            None => at += 1,
        }
    }
    out
}

/// The modules of the crate whose source directory is `dir` (`["streaming", "tiles"]` for
/// `streaming/tiles/mod.rs` or `streaming/tiles.rs`; the root, `lib.rs` or `main.rs`, is
/// `[]`), each with the modules its code names.
fn module_graph(dir: &str) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let files: Vec<String> = sources()
        .into_iter()
        .filter(|f| f.starts_with(dir))
        .collect();
    let module_of = |file: &str| -> Vec<String> {
        let mut parts: Vec<String> = file[dir.len()..]
            .trim_end_matches(".rs")
            .split('/')
            .map(str::to_string)
            .collect();
        if parts.last().is_some_and(|l| l == "mod") || parts == ["lib"] || parts == ["main"] {
            parts.pop();
        }
        parts
    };
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_of(f)).collect();
    let mut graph: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for file in &files {
        let module = module_of(file);
        let src = fs::read_to_string(root().join(file)).expect("a readable source file");
        let mut named = BTreeSet::new();
        for path in module_paths(&code_only(&src)) {
            // From the crate root, or from this module (`self`) or a parent (`super`).
            let (mut full, mut rest) = match path[0].as_str() {
                "crate" => (Vec::new(), &path[1..]),
                "self" => (module.clone(), &path[1..]),
                _ => (module.clone(), &path[..]),
            };
            while rest.first().is_some_and(|s| s == "super") {
                full.pop();
                rest = &rest[1..];
            }
            full.extend(rest.iter().cloned());
            // The longest prefix that is a module.
            while !full.is_empty() && !modules.contains(&full) {
                full.pop();
            }
            if full != module {
                named.insert(full);
            }
        }
        graph.entry(module).or_default().extend(named);
    }
    graph
}

/// The edges between siblings, by parent: a module naming another counts as its ancestor
/// just below the two's common parent naming the other's (a module naming one of its own
/// ancestors or descendants is no edge).
fn sibling_graphs(
    graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
) -> BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> {
    let mut out: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (from, named) in graph {
        for to in named {
            let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
            if common == from.len() || common == to.len() {
                continue;
            }
            out.entry(from[..common].to_vec())
                .or_default()
                .entry(from[common].clone())
                .or_default()
                .insert(to[common].clone());
        }
    }
    out
}

/// A circle of `graph`'s edges (its modules in order, the first repeated at the end), if any.
fn a_circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut circle = path[at..].to_vec();
            circle.push(node.to_string());
            return Some(circle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(circle) = visit(next, graph, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

#[test]
fn the_modules_architecture_md_names_import_in_no_circle() {
    let doc = architecture();
    let lines = section(&doc, "Invariants");
    let line = lines
        .iter()
        .find(|l| l.starts_with("- No import circle"))
        .expect("ARCHITECTURE.md's invariants lost the line `- No import circle...`");
    let dirs: Vec<&str> = backticked(line)
        .into_iter()
        .filter(|s| s.ends_with('/'))
        .collect();
    assert!(
        !dirs.is_empty(),
        "the import-circle line names no directory"
    );
    for dir in dirs {
        let graph = module_graph(dir);
        assert!(graph.len() > 1, "{dir} holds no modules");
        for (parent, siblings) in sibling_graphs(&graph) {
            if let Some(circle) = a_circle(&siblings) {
                let within = ["crate".to_string()]
                    .into_iter()
                    .chain(parent)
                    .collect::<Vec<_>>()
                    .join("::");
                panic!(
                    "the modules of {dir} import in a circle: {} in `{within}` (move the shared \
                     type to the module that owns it, or to a small module of its own)",
                    circle.join(" -> ")
                );
            }
        }
    }
}

#[test]
fn the_circle_finder_finds_circles() {
    let graph = |edges: &[(&str, &str)]| {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for &(a, b) in edges {
            g.entry(a.into()).or_default().insert(b.into());
            g.entry(b.into()).or_default();
        }
        g
    };
    let circle = a_circle(&graph(&[
        ("app", "frame"),
        ("frame", "overlay"),
        ("overlay", "report"),
        ("report", "frame"),
    ]));
    assert_eq!(
        circle,
        Some(vec![
            "frame".into(),
            "overlay".into(),
            "report".into(),
            "frame".into()
        ])
    );
    assert_eq!(
        a_circle(&graph(&[
            ("app", "frame"),
            ("app", "report"),
            ("report", "frame")
        ])),
        None
    );
    assert_eq!(
        expand("src/{a, b}.rs"),
        vec!["src/a.rs".to_string(), "src/b.rs".to_string()]
    );
    assert_eq!(expand("src/"), vec!["src/".to_string()]);
    let paths =
        module_paths("use crate::{frame::{Renderer, X as Y}, gpu}; super::super::a::B; self::c");
    let expected: Vec<Vec<&str>> = vec![
        vec!["crate", "frame", "Renderer"],
        vec!["crate", "frame", "X"],
        vec!["crate", "gpu"],
        vec!["super", "super", "a", "B"],
        vec!["self", "c"],
    ];
    assert_eq!(paths, expected);
    let owned = |p: &[&str]| -> Vec<String> { p.iter().map(|s| s.to_string()).collect() };
    let mut graph: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (m, named) in [
        (&["s", "residency"][..], &[&["s", "tiled"][..], &["s"]][..]),
        (&["s", "tiled"], &[&["s", "residency"][..], &["gpu"]]),
        (&["s"], &[&["s", "tiled"][..]]),
    ] {
        graph.insert(owned(m), named.iter().map(|n| owned(n)).collect());
    }
    let siblings = sibling_graphs(&graph);
    assert_eq!(
        a_circle(&siblings[&owned(&["s"])]),
        Some(vec!["residency".into(), "tiled".into(), "residency".into()])
    );
    assert_eq!(siblings[&Vec::new()]["s"], ["gpu".to_string()].into());
}

#[test]
fn the_source_filter_sees_code_only() {
    let src = "// unsafe\n/* unsafe /* nested */ unsafe */ let s = \"unsafe\"; \
               let r = r#\"unsafe \"q\" \"#; let c = '\"'; fn f<'a>(x: &'a u8) {} unsafe_code";
    let code = code_only(src);
    assert!(!has_word(&code, "unsafe", &[], None), "{code}");
    assert!(code.contains("fn f<'a>(x: &'a u8)"), "{code}");
    assert!(has_word("unsafe { x }", "unsafe", &[], None));
    assert!(has_word(
        "d.map_memory (m)",
        "map_memory",
        &[".", "::"],
        Some('(')
    ));
    assert!(!has_word(
        "fn map_memory(m)",
        "map_memory",
        &[".", "::"],
        Some('(')
    ));
    assert!(has_word(
        "std::env::var_os(\"X\")",
        "var_os",
        &["env::"],
        Some('(')
    ));
}

/// Fails unless every `.rs` file of `dir` (its root `root`, `main.rs` or
/// `mod.rs`, aside) and every subdirectory with a `mod.rs` or `main.rs` is a
/// `mod` item of `root` on a line of its own, not commented out and not
/// behind a `cfg` (which could compile it out); then the same inside each
/// such subdirectory.
fn check_test_modules(dir: &Path, root: &str) {
    let text = std::fs::read_to_string(dir.join(root))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.join(root).display()));
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let Some(name) = path.file_stem().and_then(|s| s.to_str()).map(str::to_owned) else {
            continue;
        };
        let sub_root = ["mod.rs", "main.rs"]
            .into_iter()
            .find(|r| path.is_dir() && path.join(r).is_file());
        let is_module = if path.is_dir() {
            sub_root.is_some()
        } else {
            path.extension().is_some_and(|e| e == "rs") && path.file_name().unwrap() != root
        };
        if !is_module {
            continue;
        }
        let item = format!("mod {name};");
        let named = lines
            .iter()
            .enumerate()
            .any(|(i, line)| *line == item && (i == 0 || !lines[i - 1].starts_with("#[cfg")));
        assert!(
            named,
            "{}: not a module of {}, so it never runs: add `mod {name};` there",
            path.display(),
            dir.join(root).display()
        );
        if let Some(sub_root) = sub_root {
            check_test_modules(&path, sub_root);
        }
    }
}

/// A crate that gathers its integration tests in one binary
/// (`autotests = false`, `tests/main.rs`) compiles only the files
/// `tests/main.rs` names: a test file it does not name would never run.
#[test]
fn every_integration_test_file_is_a_module_of_its_crates_test_binary() {
    let root = root();
    let mut crates = 0;
    for krate in [
        "allocator",
        "demo-renderer",
        "tests",
        "bench",
        "heapmap",
        "fuzz/harness",
    ] {
        let manifest = std::fs::read_to_string(root.join(krate).join("Cargo.toml")).unwrap();
        if !manifest.contains("autotests = false") {
            continue;
        }
        crates += 1;
        check_test_modules(&root.join(krate).join("tests"), "main.rs");
    }
    assert!(crates >= 3, "the crates that gather their tests: {crates}");
}
