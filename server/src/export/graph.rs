//! A round's links folded into Common Crawl's host-graph layout, which the
//! cc-webgraph and WebGraph tools load: a vertices file of
//! `id<TAB>reversed host name` (`com.example.www`), sorted by reversed name
//! with ids `0..n` in that order, and an edges file of `from_id<TAB>to_id`,
//! sorted numerically and deduplicated.
//!
//! Hosts are named as cc-pyspark's `get_surt_host` names them
//! ([`surt_host`]): lower case, a trailing dot and a leading `www.` (of a
//! name of three labels or more) dropped, reversed; IP addresses, one-label
//! names and names that are not valid host names are no vertex, and a link
//! from or to one is no edge. As in its `hostlinks_to_graph.py`, every host
//! that is a link's source or target is a vertex, and self-loops are dropped
//! after the ids are given (a host that only links to itself is still a
//! vertex).
//!
//! Invariant: memory is bounded by [`MAX_GRAPH_HOSTS`] distinct hosts and
//! [`MAX_GRAPH_EDGES`] distinct host pairs (each pair two `u32`); a round
//! past either bound is refused with [`GraphError`], never truncated.

use std::collections::{HashMap, HashSet};
use std::io::{self, Write};

use beebot_shared::export::target_host;

/// The files of a host graph and their lines, in the order they are
/// written (edges last: a directory with edges has both).
pub const FILES: [(&str, &str); 2] = [
    (
        "vertices.txt.gz",
        "`id<TAB>host`: every host a link is from or to, named as Common Crawl names it (lower case, reversed, a leading `www.` dropped: `com.example`; an IP address or a one-label name is no host), sorted by name, ids `0..n` in that order",
    ),
    (
        "edges.txt.gz",
        "`from_id<TAB>to_id`: each pair of hosts where a page of the first links the second, once, sorted by ids; a link within a host is none",
    ),
];

/// Distinct hosts a host graph holds (about 100 bytes each: name and map
/// entry, so some 200 MB at the bound).
pub const MAX_GRAPH_HOSTS: usize = 2_000_000;
/// Distinct host pairs a host graph holds (about 20 bytes each in the set,
/// some 400 MB at the bound).
pub const MAX_GRAPH_EDGES: usize = 20_000_000;
/// Columns of an export's TSV row.
const TSV_COLUMNS: usize = beebot_shared::export::COLUMNS.len();

/// Why a host graph could not be built.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum GraphError {
    #[error("the round links more than {MAX_GRAPH_HOSTS} distinct hosts, the host graph's bound")]
    TooManyHosts,
    #[error(
        "the round has more than {MAX_GRAPH_EDGES} distinct host links, the host graph's bound"
    )]
    TooManyEdges,
    #[error("export row {line} has {got} columns, not {TSV_COLUMNS}")]
    BadRow { line: u64, got: usize },
}

/// `www.example.com` as `com.example.www`.
pub fn reverse_host(host: &str) -> String {
    host.rsplit('.').collect::<Vec<_>>().join(".")
}

/// Longest host name a vertex may have (DNS's bound).
const MAX_HOST_LEN: usize = 253;
/// Longest label of a vertex's host name.
const MAX_LABEL_LEN: usize = 63;

/// A host as Common Crawl's host graph names it (cc-pyspark's
/// `get_surt_host`): `WWW.Example.com.` is `com.example`; `None` for an IP
/// address, a one-label name or a name that is not a valid host name
/// (labels of letters, digits, `-` and `_`, not starting or ending with `-`
/// or `_`; international names arrive in punycode from the URL parser).
pub fn surt_host(host: &str) -> Option<String> {
    let host = host.trim().to_ascii_lowercase();
    if host.is_empty() || host.len() > MAX_HOST_LEN || host.starts_with('[') {
        return None;
    }
    let mut labels: Vec<&str> = host.split('.').collect();
    if labels.last() == Some(&"") {
        labels.pop();
    }
    if labels.len() <= 1 {
        return None;
    }
    if labels[0] == "www"
        && labels[1..]
            .iter()
            .all(|l| l.bytes().all(|b| b.is_ascii_digit()))
    {
        return None;
    }
    if labels
        .iter()
        .all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit()))
    {
        return None;
    }
    if labels.len() > 2 && labels[0] == "www" {
        labels.remove(0);
    }
    let valid = |l: &&str| {
        let b = l.as_bytes();
        !b.is_empty()
            && b.len() <= MAX_LABEL_LEN
            && b.iter()
                .all(|&c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
    };
    if !labels.iter().all(valid) {
        return None;
    }
    labels.reverse();
    Some(labels.join("."))
}

/// Hosts and host links gathered so far.
#[derive(Default)]
pub struct HostGraph {
    ids: HashMap<String, u32>,
    edges: HashSet<(u32, u32)>,
    rows: u64,
}

impl HostGraph {
    pub fn new() -> HostGraph {
        HostGraph::default()
    }

    /// The id of a vertex by its name (already in [`surt_host`]'s form).
    fn id(&mut self, name: String) -> Result<u32, GraphError> {
        if let Some(&id) = self.ids.get(&name) {
            return Ok(id);
        }
        if self.ids.len() >= MAX_GRAPH_HOSTS {
            return Err(GraphError::TooManyHosts);
        }
        let id = u32::try_from(self.ids.len()).map_err(|_| GraphError::TooManyHosts)?;
        self.ids.insert(name, id);
        Ok(id)
    }

    /// A link from a page on `from` to `to` (hosts as in URLs); a link
    /// from or to a host that is no vertex ([`surt_host`]) is left out.
    pub fn add_link(&mut self, from: &str, to: &str) -> Result<(), GraphError> {
        let (Some(from), Some(to)) = (surt_host(from), surt_host(to)) else {
            return Ok(());
        };
        let (s, t) = (self.id(from)?, self.id(to)?);
        if s != t && !self.edges.contains(&(s, t)) {
            if self.edges.len() >= MAX_GRAPH_EDGES {
                return Err(GraphError::TooManyEdges);
            }
            self.edges.insert((s, t));
        }
        Ok(())
    }

    /// One data row of the export's TSV (not its header).
    pub fn add_tsv_row(&mut self, line: &str) -> Result<(), GraphError> {
        self.rows += 1;
        let fields: Vec<&str> = line.split('\t').collect();
        if fields.len() != TSV_COLUMNS {
            return Err(GraphError::BadRow {
                line: self.rows + 1,
                got: fields.len(),
            });
        }
        self.add_link(&target_host(fields[1]), fields[3])
    }

    /// Write the vertices and the edges; returns how many of each.
    pub fn write(
        self,
        vertices: &mut impl Write,
        edges: &mut impl Write,
    ) -> io::Result<(usize, usize)> {
        let mut names: Vec<(String, u32)> = self.ids.into_iter().collect();
        names.sort_unstable();
        // new_id[old id] = position in name order.
        let mut new_id = vec![0u32; names.len()];
        for (pos, (name, old)) in names.iter().enumerate() {
            new_id[*old as usize] = pos as u32;
            writeln!(vertices, "{pos}\t{name}")?;
        }
        let n_vertices = names.len();
        drop(names);
        let mut pairs: Vec<(u32, u32)> = self
            .edges
            .into_iter()
            .map(|(s, t)| (new_id[s as usize], new_id[t as usize]))
            .collect();
        pairs.sort_unstable();
        for (s, t) in &pairs {
            writeln!(edges, "{s}\t{t}")?;
        }
        vertices.flush()?;
        edges.flush()?;
        Ok((n_vertices, pairs.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(g: HostGraph) -> (String, String) {
        let (mut v, mut e) = (Vec::new(), Vec::new());
        g.write(&mut v, &mut e).expect("write");
        let text = |b: Vec<u8>| String::from_utf8(b).expect("utf-8");
        (text(v), text(e))
    }

    #[test]
    fn hosts_are_named_as_common_crawl_names_them() {
        assert_eq!(surt_host("www.example.com").as_deref(), Some("com.example"));
        assert_eq!(
            surt_host("www.com").as_deref(),
            Some("com.www"),
            "two labels keep www"
        );
        assert_eq!(
            surt_host("Sub.Example.COM.").as_deref(),
            Some("com.example.sub")
        );
        assert_eq!(
            surt_host("xn--bcher-kva.example").as_deref(),
            Some("example.xn--bcher-kva")
        );
        assert_eq!(surt_host("a_b.example").as_deref(), Some("example.a_b"));
        for no in [
            "",
            "localhost",
            "1.2.3.4",
            "www.1.2.3.4",
            "a..b",
            "a b.test",
            "x-.test",
        ] {
            assert_eq!(surt_host(no), None, "{no}");
        }
        assert_eq!(surt_host(&format!("{}.test", "a".repeat(64))), None);
    }

    #[test]
    fn hosts_are_reversed_sorted_and_numbered_in_that_order() {
        assert_eq!(reverse_host("www.example.com"), "com.example.www");
        assert_eq!(reverse_host("localhost"), "localhost");
        let mut g = HostGraph::new();
        g.add_link("www.b.test", "a.test").expect("link");
        g.add_link("b.test", "a.test")
            .expect("the same link: www. dropped");
        g.add_link("a.test", "WWW.B.test.").expect("link");
        g.add_link("a.test", "c.example").expect("link");
        // A self-loop keeps its host as a vertex and is no edge.
        g.add_link("self.test", "self.test").expect("loop");
        // No vertex: no host, one label, an IP address, an invalid name.
        for no in [
            "",
            "localhost",
            "10.0.0.1",
            "www.10.0.0.1",
            "[::1]",
            "-x.test",
        ] {
            g.add_link("a.test", no).expect("no vertex");
        }
        let (v, e) = written(g);
        assert_eq!(
            v, "0\texample.c\n1\ttest.a\n2\ttest.b\n3\ttest.self\n",
            "{v}"
        );
        assert_eq!(e, "1\t0\n1\t2\n2\t1\n", "{e}");
    }

    #[test]
    fn tsv_rows_link_the_source_page_host_to_the_target_host() {
        let mut g = HostGraph::new();
        g.add_tsv_row("s.test\thttp://www.s.test/p\thttp://t.test/\tt.test\ta\tfalse\tx")
            .expect("row");
        assert_eq!(
            g.add_tsv_row("too\tfew"),
            Err(GraphError::BadRow { line: 3, got: 2 })
        );
        let (v, e) = written(g);
        assert_eq!(v, "0\ttest.s\n1\ttest.t\n");
        assert_eq!(e, "0\t1\n");
    }

    #[test]
    fn past_the_host_bound_is_an_error() {
        let mut g = HostGraph::new();
        for i in 0..MAX_GRAPH_HOSTS as u32 {
            g.ids.insert(i.to_string(), i);
        }
        assert_eq!(
            g.add_link("new.test", "a.test"),
            Err(GraphError::TooManyHosts)
        );
        g.ids.insert("test.a".to_string(), 0);
        g.ids.insert("test.b".to_string(), 1);
        assert_eq!(
            g.add_link("a.test", "b.test"),
            Ok(()),
            "known hosts still link"
        );
    }
}
