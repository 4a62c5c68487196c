//! The modules of every crate form layers: among the modules of one parent
//! (each standing for itself and everything below it), none uses one that
//! uses it back, directly or round a longer circle. A module may use its
//! ancestors' own items (`super::`) and a parent its children; test modules
//! (`#[cfg(test)]`) are not counted.
//!
//! A use is any path in the code (`use` trees, and paths in expressions and
//! types) that names a module of the crate or an item in one, followed
//! through the parents' `pub use` of a child's item to where it is defined.
//! Comments and string literals are not read. The check reads the sources,
//! so it needs no build of its own.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crate roots checked, from the workspace's top.
const CRATE_ROOTS: &[&str] = &[
    "shared/src/lib.rs",
    "server/src/lib.rs",
    "server/src/main.rs",
    "client/src/lib.rs",
    "client/src/main.rs",
    "win32/src/lib.rs",
    "tests/kit/src/lib.rs",
    "tests/src/lib.rs",
    "tools/src/lib.rs",
    "tools/src/bin/beebot-loadgen/main.rs",
    "tests/it/main.rs",
];

/// What follows `#[cfg(test)]` when it marks a whole item (blanked to its
/// closing brace or semicolon); anything else (a field, a variant, a
/// statement) is blanked to its comma or semicolon.
const ITEM_WORDS: &[&str] = &[
    "mod", "fn", "impl", "use", "struct", "enum", "const", "static", "type", "trait", "async",
    "unsafe", "extern",
];

/// Comments, string and character literals blanked out, so that only code
/// is read (lengths kept, so positions agree with the source).
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to.min(b.len())] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let ident = |i: usize| i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            let end = b[i..]
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |p| i + p);
            blank(&mut out, i, end);
            i = end;
        } else if b[i..].starts_with(b"/*") {
            let (mut depth, mut j) = (1, i + 2);
            while j < b.len() && depth > 0 {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if b[i] == b'r' && !ident(i) && matches!(b.get(i + 1), Some(b'"' | b'#')) {
            let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
            if b.get(i + 1 + hashes) != Some(&b'"') {
                i += 1;
                continue;
            }
            let mut close = vec![b'"'];
            close.extend(std::iter::repeat_n(b'#', hashes));
            let start = i + 2 + hashes;
            let end = b[start..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(b.len(), |p| start + p + close.len());
            blank(&mut out, i, end);
            i = end;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut out, i, j + 1);
            i = j + 1;
        } else if b[i] == b'\'' {
            // A character literal ('x', '\n', '\u{1F600}'), not a lifetime.
            let len = if b.get(i + 1) == Some(&b'\\') {
                b[i + 3..].iter().position(|&c| c == b'\'').map(|p| p + 4)
            } else {
                let c = src[i + 1..].chars().next().map_or(1, char::len_utf8);
                (b.get(i + 1 + c) == Some(&b'\'')).then_some(c + 2)
            };
            match len {
                Some(len) => {
                    blank(&mut out, i, i + len);
                    i += len;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    String::from_utf8(out).expect("blanking keeps UTF-8 (only ASCII is written over whole chars)")
}

/// The position of the brace that closes the one at `open`.
fn closing_brace(code: &[u8], open: usize) -> usize {
    let mut depth = 0usize;
    for (i, &c) in code.iter().enumerate().skip(open) {
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// One module: its path from the crate root, its code (test modules
/// blanked out), its children and the items it re-exports from them.
struct Module {
    path: Vec<String>,
    code: String,
    parent: Option<usize>,
    children: BTreeMap<String, usize>,
    /// `pub use child::Item` (or `as Name`): the name, and the child.
    reexports: BTreeMap<String, String>,
    /// Paths named in attributes' strings (`#[serde(with = "crate::x")]`).
    attr_paths: Vec<Vec<String>>,
}

/// Where the test item marked at `at` (its `#[cfg(test)]`) ends.
fn test_item_end(code: &str, at: usize) -> usize {
    let b = code.as_bytes();
    let mut i = at + "#[cfg(test)]".len();
    // Further attributes, then the visibility.
    loop {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if b[i..].starts_with(b"#[") {
            i += b[i..]
                .iter()
                .position(|&c| c == b']')
                .map_or(b.len() - i, |p| p + 1);
        } else if b[i..].starts_with(b"pub(") {
            i += b[i..]
                .iter()
                .position(|&c| c == b')')
                .map_or(b.len() - i, |p| p + 1);
        } else if b[i..].starts_with(b"pub ") {
            i += 4;
        } else {
            break;
        }
    }
    let word: String = code[i..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    let stops: &[char] = if ITEM_WORDS.contains(&word.as_str()) {
        &['{', ';']
    } else {
        &[',', ';']
    };
    match code[i..].find(stops).map(|p| i + p) {
        Some(open) if b[open] == b'{' => closing_brace(b, open).min(b.len() - 1),
        Some(stop) => stop,
        None => b.len() - 1,
    }
}

/// `code` with `from..=to` blanked byte for byte (newlines kept, so
/// positions still agree with the source).
fn blank_range(code: &mut String, from: usize, to: usize) {
    let blank: Vec<u8> = code.as_bytes()[from..=to]
        .iter()
        .map(|&c| if c == b'\n' { c } else { b' ' })
        .collect();
    let blank = String::from_utf8(blank).expect("spaces and newlines");
    code.replace_range(from..=to, &blank);
}

/// Module paths in the strings of `src`'s attributes (`= "a::b"`) outside
/// the ranges of `tests`.
fn attribute_paths(src: &str, tests: &[(usize, usize)]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(p) = src[at..].find("= \"") {
        let start = at + p + 3;
        at = start;
        let Some(len) = src[start..].find('"') else {
            break;
        };
        let text = &src[start..start + len];
        let is_path = text.contains("::")
            && text
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
        let in_test = tests.iter().any(|&(f, t)| (f..=t).contains(&start));
        let in_attribute = src[..start]
            .rfind("#[")
            .is_some_and(|a| !src[a..start].contains(']'));
        if is_path && in_attribute && !in_test {
            out.push(segments(text));
        }
    }
    out
}

/// Words of `s` split on `::`, trimmed.
fn segments(s: &str) -> Vec<String> {
    s.split("::")
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(str::to_string)
        .collect()
}

/// A `use` tree (`a::{b, c::{d as e}}`) as its paths, each with its alias.
fn use_paths(tree: &str) -> Vec<(Vec<String>, Option<String>)> {
    fn walk(prefix: &[String], t: &str, out: &mut Vec<(Vec<String>, Option<String>)>) {
        let t = t.trim();
        if t.is_empty() {
            return;
        }
        let Some(open) = t.find('{') else {
            let mut segs = prefix.to_vec();
            let mut alias = None;
            let mut words = segments(t);
            if let Some(last) = words.last_mut() {
                if let Some((name, a)) = last.split_once(" as ") {
                    alias = Some(a.trim().to_string());
                    *last = name.trim().to_string();
                }
            }
            segs.extend(words);
            out.push((segs, alias));
            return;
        };
        let mut head = prefix.to_vec();
        head.extend(segments(&t[..open]));
        let inner = &t[open + 1..t.rfind('}').unwrap_or(t.len())];
        let (mut depth, mut start) = (0i32, 0);
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    walk(&head, &inner[start..i], out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        walk(&head, &inner[start..], out);
    }
    let mut out = Vec::new();
    walk(&[], tree, &mut out);
    out
}

/// Every `use` of `code`: (start, end, its tree), `pub` ones marked.
fn uses(code: &str) -> Vec<(usize, usize, String, bool)> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(p) = code[at..].find("use ") {
        let i = at + p;
        at = i + 4;
        if i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_') {
            continue;
        }
        let Some(semi) = code[i..].find(';') else {
            break;
        };
        let before = &code[..i];
        let item_start = before.rfind(['\n', ';', '{', '}']).map_or(0, |p| p + 1);
        // Past the item's attributes (`#[doc(inline)] pub use`).
        let head = &before[item_start..];
        let head = head.rfind(']').map_or(head, |p| &head[p + 1..]);
        let public = head.trim_start().starts_with("pub");
        out.push((i, i + semi + 1, code[i + 4..i + semi].to_string(), public));
        at = i + semi + 1;
    }
    out
}

struct Crate {
    modules: Vec<Module>,
}

impl Crate {
    fn load(root_file: &Path) -> Crate {
        let mut c = Crate {
            modules: Vec::new(),
        };
        c.add(root_file, Vec::new(), None);
        c
    }

    /// Read the module in `file` and, depth first, its children.
    fn add(&mut self, file: &Path, path: Vec<String>, parent: Option<usize>) -> usize {
        let src = std::fs::read_to_string(file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        let mut code = code_only(&src);
        // Test items (inline modules, functions, imports, fields) are
        // blanked out.
        let mut tests = Vec::new();
        while let Some(at) = code.find("#[cfg(test)]") {
            let end = test_item_end(&code, at);
            blank_range(&mut code, at, end);
            tests.push((at, end));
        }
        let id = self.modules.len();
        self.modules.push(Module {
            path: path.clone(),
            code: String::new(),
            parent,
            children: BTreeMap::new(),
            reexports: BTreeMap::new(),
            attr_paths: attribute_paths(&src, &tests),
        });
        self.inline_modules(id, &mut code);
        self.modules[id].code = code.clone();
        let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        let dir = file.parent().expect("a source file has a directory");
        let own_dir: PathBuf = if matches!(stem, "lib" | "main" | "mod") {
            dir.to_path_buf()
        } else {
            dir.join(stem)
        };
        for (name, path_attr) in mod_declarations(&src, &code) {
            let child_file = match path_attr {
                Some(p) => dir.join(p),
                None => {
                    let flat = own_dir.join(format!("{name}.rs"));
                    if flat.exists() {
                        flat
                    } else {
                        own_dir.join(&name).join("mod.rs")
                    }
                }
            };
            let mut child_path = path.clone();
            child_path.push(name.clone());
            let child = self.add(&child_file, child_path, Some(id));
            self.modules[id].children.insert(name, child);
        }
        for (_, _, tree, public) in uses(&code) {
            if !public {
                continue;
            }
            for (mut segs, alias) in use_paths(&tree) {
                if segs.first().is_some_and(|s| s == "self") {
                    segs.remove(0);
                }
                let m = &self.modules[id];
                if segs.len() >= 2
                    && m.children.contains_key(&segs[0])
                    && segs[segs.len() - 1] != "*"
                {
                    let name = alias.unwrap_or_else(|| segs[segs.len() - 1].clone());
                    let child = segs[0].clone();
                    self.modules[id].reexports.insert(name, child);
                }
            }
        }
        id
    }

    /// The inline modules (`mod name { ... }`) of module `id`'s `code`, as
    /// children of their own, blanked out of it.
    fn inline_modules(&mut self, id: usize, code: &mut String) {
        let mut at = 0;
        while let Some(p) = code[at..].find("mod ") {
            let i = at + p;
            at = i + 4;
            let b = code.as_bytes();
            if i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_') {
                continue;
            }
            let rest = code[i + 4..].trim_start();
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if name.is_empty() || !rest[name.len()..].trim_start().starts_with('{') {
                continue;
            }
            let open = i + 4 + code[i + 4..].find('{').expect("seen above");
            let close = closing_brace(code.as_bytes(), open).min(code.len() - 1);
            let mut inner = code[open + 1..close].to_string();
            blank_range(code, i, close);
            let mut path = self.modules[id].path.clone();
            path.push(name.clone());
            let child = self.modules.len();
            self.modules.push(Module {
                path,
                code: String::new(),
                parent: Some(id),
                children: BTreeMap::new(),
                reexports: BTreeMap::new(),
                attr_paths: Vec::new(),
            });
            self.inline_modules(child, &mut inner);
            self.modules[child].code = inner;
            self.modules[id].children.insert(name, child);
        }
    }

    /// The module `segs` names from module `from`: the deepest module the
    /// path reaches, through re-exports to where an item is defined.
    fn resolve(&self, from: usize, segs: &[String]) -> Option<usize> {
        let first = segs.first()?;
        let (mut cur, mut rest) = match first.as_str() {
            "crate" => (0, &segs[1..]),
            "self" => (from, &segs[1..]),
            "super" => {
                let mut cur = from;
                let mut rest = segs;
                while rest.first().is_some_and(|s| s == "super") {
                    cur = self.modules[cur].parent?;
                    rest = &rest[1..];
                }
                (cur, rest)
            }
            name if self.modules[from].children.contains_key(name) => (from, segs),
            _ => return None,
        };
        while let Some(word) = rest.first() {
            let m = &self.modules[cur];
            if word == "self" {
            } else if let Some(&child) = m.children.get(word) {
                cur = child;
            } else if let Some(child) = m.reexports.get(word) {
                // Follow the item down to the child that defines it.
                let mut at = m.children[child];
                while let Some(next) = self.modules[at].reexports.get(word) {
                    at = self.modules[at].children[next];
                }
                return Some(at);
            } else {
                break;
            }
            rest = &rest[1..];
        }
        Some(cur)
    }

    /// Every module each module uses.
    fn uses(&self) -> Vec<BTreeSet<usize>> {
        let mut out = vec![BTreeSet::new(); self.modules.len()];
        for (id, m) in self.modules.iter().enumerate() {
            // Names a `use` binds to a module (`use crate::grid::{self, x}`).
            let mut aliases: BTreeMap<String, usize> = BTreeMap::new();
            let mut body = m.code.clone();
            for (start, end, tree, _) in uses(&m.code) {
                body.replace_range(start..end, &" ".repeat(end - start));
                for (mut segs, alias) in use_paths(&tree) {
                    if segs.last().is_some_and(|s| s == "*") {
                        segs.pop();
                    }
                    let Some(target) = self.resolve(id, &segs) else {
                        continue;
                    };
                    out[id].insert(target);
                    let named = match segs.last().map(String::as_str) {
                        Some("self") => segs.len().checked_sub(2).map(|i| segs[i].clone()),
                        Some(last)
                            if self.modules[target].path.last().is_some_and(|p| p == last) =>
                        {
                            Some(last.to_string())
                        }
                        _ => None,
                    };
                    if let Some(name) = alias.or(named) {
                        aliases.insert(name, target);
                    }
                }
            }
            for path in code_paths(&body)
                .into_iter()
                .chain(m.attr_paths.iter().cloned())
            {
                let target = match aliases.get(&path[0]) {
                    Some(&module) => {
                        let mut rel = vec!["self".to_string()];
                        rel.extend(path[1..].iter().cloned());
                        self.resolve(module, &rel)
                    }
                    None => self.resolve(id, &path),
                };
                if let Some(t) = target {
                    out[id].insert(t);
                }
            }
        }
        out
    }

    /// The circles among siblings: for each parent, the groups of its
    /// children that use each other round a circle, each with the uses
    /// that close it.
    fn circles(&self) -> Vec<String> {
        let uses = self.uses();
        let mut found = Vec::new();
        for (pid, parent) in self.modules.iter().enumerate() {
            if parent.children.len() < 2 {
                continue;
            }
            let depth = parent.path.len();
            // The child of `parent` that `m` is or lies under.
            let under = |m: usize| -> Option<String> {
                let p = &self.modules[m].path;
                (p.len() > depth && p[..depth] == parent.path[..] && self.is_below(m, pid))
                    .then(|| p[depth].clone())
            };
            let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
            for (from, targets) in uses.iter().enumerate() {
                let Some(a) = under(from) else { continue };
                for &to in targets {
                    if let Some(b) = under(to).filter(|b| *b != a) {
                        graph.entry(a.clone()).or_default().insert(b);
                    }
                }
            }
            for group in strongly_connected(&graph) {
                let name = if parent.path.is_empty() {
                    "the crate root".to_string()
                } else {
                    parent.path.join("::")
                };
                let edges: Vec<String> = group
                    .iter()
                    .map(|a| {
                        let to: Vec<&str> = graph[a]
                            .iter()
                            .filter(|b| group.contains(b))
                            .map(String::as_str)
                            .collect();
                        format!("{a} uses {}", to.join(", "))
                    })
                    .collect();
                found.push(format!("under {name}: {}", edges.join("; ")));
            }
        }
        found
    }

    fn is_below(&self, mut m: usize, ancestor: usize) -> bool {
        while let Some(p) = self.modules[m].parent {
            if p == ancestor {
                return true;
            }
            m = p;
        }
        false
    }
}

/// `mod name;` declarations that are not test modules, with the file a
/// `#[path]` names.
fn mod_declarations(src: &str, code: &str) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    let b = code.as_bytes();
    let mut at = 0;
    while let Some(p) = code[at..].find("mod ") {
        let i = at + p;
        at = i + 4;
        if i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_') {
            continue;
        }
        let rest = &code[i + 4..];
        let name: String = rest
            .trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let after = rest.trim_start()[name.len()..].trim_start();
        if name.is_empty() || !after.starts_with(';') {
            continue;
        }
        // The attributes right before it, read in the source (a `#[path]`
        // is a string, blanked in the code).
        let line_start = src[..i].rfind('\n').map_or(0, |p| p + 1);
        let mut attrs_from = line_start;
        for line in src[..line_start].lines().rev() {
            let t = line.trim();
            if t.starts_with("#[") {
                attrs_from -= line.len() + 1;
            } else {
                break;
            }
        }
        let attrs = &src[attrs_from..i];
        if attrs.contains("cfg(test)") {
            continue;
        }
        let path = attrs.find("#[path").and_then(|p| {
            let s = &attrs[p..];
            let q1 = s.find('"')?;
            let q2 = s[q1 + 1..].find('"')?;
            Some(s[q1 + 1..q1 + 1 + q2].to_string())
        });
        out.push((name, path));
    }
    out
}

/// Paths of two words or more in code (`a::b`, `crate::x::Y`), each as its
/// words; a path's leading `::` (an outside crate) is left out.
fn code_paths(code: &str) -> Vec<Vec<String>> {
    let b = code.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if !word(b[i]) || (i > 0 && (word(b[i - 1]) || b[i - 1] == b':')) {
            i += 1;
            continue;
        }
        let mut segs = Vec::new();
        let mut j = i;
        loop {
            let s = j;
            while j < b.len() && word(b[j]) {
                j += 1;
            }
            segs.push(code[s..j].to_string());
            if b[j..].starts_with(b"::") && b.get(j + 2).is_some_and(|&c| word(c)) {
                j += 2;
            } else {
                break;
            }
        }
        if segs.len() >= 2 {
            out.push(segs);
        }
        i = j.max(i + 1);
    }
    out
}

/// The groups of more than one node that reach each other (Tarjan).
fn strongly_connected(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        groups: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.on_stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut group = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    group.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if group.len() > 1 {
                    group.sort();
                    self.groups.push(group);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        groups: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.groups
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The circles of every crate, each named with its crate root.
fn circles_of_workspace() -> Vec<String> {
    let mut out = Vec::new();
    for root in CRATE_ROOTS {
        let c = Crate::load(&workspace().join(root));
        out.extend(c.circles().into_iter().map(|c| format!("{root}: {c}")));
    }
    out
}

#[test]
fn no_module_uses_a_sibling_that_uses_it_back() {
    let circles = circles_of_workspace();
    assert!(
        circles.is_empty(),
        "{} circles of modules:\n{}",
        circles.len(),
        circles.join("\n")
    );
}

/// The check finds a circle where there is one, through each way of
/// naming a module, and none where the uses only go one way.
#[test]
fn a_circle_is_found_through_every_way_of_naming_a_module() {
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().expect("dir")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    };
    let check = |files: &[(&str, &str)]| -> Vec<String> {
        for (name, text) in files {
            write(name, text);
        }
        let found = Crate::load(&dir.path().join("lib.rs")).circles();
        for (name, _) in files {
            std::fs::remove_file(dir.path().join(name)).expect("remove");
        }
        found
    };
    let root = "mod a;\nmod b;\nmod c;\n";
    // One way only: a uses b, b uses c.
    let one_way = [
        ("lib.rs", root),
        ("a.rs", "use crate::b::Thing;\n"),
        ("b.rs", "pub struct Thing;\nfn f() { super::c::g() }\n"),
        (
            "c.rs",
            "pub fn g() {}\n// crate::a::x in a comment\nconst S: &str = \"crate::a::y\";\n",
        ),
    ];
    assert_eq!(check(&one_way), Vec::<String>::new());
    // Back round a circle, by each way of naming a module.
    for back in [
        "use crate::a::X;\n",
        "use super::{a::X, b};\n",
        "fn f() -> crate::a::X { todo!() }\n",
        "use crate::a;\nfn f() { a::g() }\n",
        "use crate::a::{self as other};\nfn f() { other::g() }\n",
        "struct S {\n    #[serde(with = \"crate::a\")]\n    x: u8,\n}\n",
        "mod inner {\n    fn f() -> super::super::a::X { todo!() }\n}\n",
        "struct S {\n    #[cfg(test)]\n    x: u8,\n}\nimpl S {\n    fn f() -> crate::a::X { todo!() }\n}\n",
        "#[doc(inline)] pub use crate::a::X;\n",
    ] {
        let files = [
            ("lib.rs", root),
            (
                "a.rs",
                "use crate::b::Thing;\npub struct X;\npub fn g() {}\n",
            ),
            ("b.rs", "pub struct Thing;\nfn f() { super::c::g() }\n"),
            ("c.rs", back),
        ];
        let found = check(&files);
        assert_eq!(found.len(), 1, "{back:?}: {found:?}");
        assert!(found[0].contains("c uses a"), "{found:?}");
    }
    // Through a parent's re-export of a child's item, and below a child.
    let files = [
        ("lib.rs", "mod a;\nmod b;\npub use b::Thing;\n"),
        ("a/mod.rs", "mod deep;\n"),
        ("a/deep.rs", "fn f() -> crate::Thing { todo!() }\n"),
        ("b.rs", "pub struct Thing;\nuse crate::a;\n"),
    ];
    let found = check(&files);
    assert_eq!(found.len(), 1, "{found:?}");
    // A test module's uses are not counted; a child may use its parent.
    let files = [
        ("lib.rs", "mod a;\nmod b;\npub struct Top;\n"),
        ("a.rs", "use crate::b::Y;\nuse super::Top;\n"),
        (
            "b.rs",
            "pub struct Y;\n#[cfg(test)]\nmod tests {\n    use crate::a;\n}\n",
        ),
    ];
    assert_eq!(check(&files), Vec::<String>::new());
}
