//! The export formats of outbound links (TSV and JSON Lines), shared by
//! `beebot-server export` and `beebot crawl` so both print the same columns.

use std::io::{self, Write};

use serde::Serialize;

use crate::linkfile::LinkRecord;

/// Every column of an export row and what it holds, in the row's order
/// (the reference page of the exports is made from it).
pub const COLUMN_DOCS: [(&str, &str); 7] = [
    (
        "site",
        "the site scanned, as the target set names it (`beebot crawl`: the host of its URL)",
    ),
    (
        "source_url",
        "the page the link is on",
    ),
    (
        "target_url",
        "where the link leads, absolute, without its fragment: a URL outside the scan's scope (one row per distinct source and target)",
    ),
    (
        "target_host",
        "the host of `target_url`",
    ),
    (
        "tag",
        "where on the page the link is: `a` (`<a href>`), `area` (`<area href>`), `meta-refresh` (`<meta http-equiv=refresh>`) or `redirect` (an HTTP redirect out of the scope)",
    ),
    (
        "nofollow",
        "whether the element's `rel` has `nofollow`",
    ),
    (
        "anchor_text",
        "the link's text (an `area`'s `alt`; empty for a refresh or a redirect), whitespace collapsed, at most 128 characters",
    ),
];

/// TSV header row, also the JSONL field names ([`COLUMN_DOCS`]' names).
pub const COLUMNS: [&str; 7] = {
    let mut names = [""; 7];
    let mut i = 0;
    while i < names.len() {
        names[i] = COLUMN_DOCS[i].0;
        i += 1;
    }
    names
};

/// Output format of an export.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Format {
    #[default]
    Tsv,
    Jsonl,
}

/// A format name that is neither `tsv` nor `jsonl`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown format `{0}` (use tsv or jsonl)")]
pub struct UnknownFormat(pub String);

impl std::str::FromStr for Format {
    type Err = UnknownFormat;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "tsv" => Ok(Format::Tsv),
            "jsonl" => Ok(Format::Jsonl),
            other => Err(UnknownFormat(other.to_string())),
        }
    }
}

#[derive(Serialize)]
struct Row<'a> {
    site: &'a str,
    source_url: &'a str,
    target_url: &'a str,
    target_host: &'a str,
    tag: &'a str,
    nofollow: bool,
    anchor_text: &'a str,
}

/// The host of a URL string, or empty when it has none.
pub fn target_host(url: &str) -> String {
    url::Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .unwrap_or_default()
}

/// Writes rows of one export.
pub struct ExportWriter<W: Write> {
    out: W,
    format: Format,
}

/// TSV cannot hold tabs or line breaks inside a field.
fn tsv_field(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains(['\t', '\n', '\r']) {
        s.replace(['\t', '\n', '\r'], " ").into()
    } else {
        s.into()
    }
}

impl<W: Write> ExportWriter<W> {
    /// Start an export; TSV writes its header row now.
    pub fn new(mut out: W, format: Format) -> io::Result<Self> {
        if format == Format::Tsv {
            writeln!(out, "{}", COLUMNS.join("\t"))?;
        }
        Ok(ExportWriter { out, format })
    }

    /// Write one record of `site`.
    pub fn write(&mut self, site: &str, rec: &LinkRecord) -> io::Result<()> {
        let host = target_host(&rec.target_url);
        match self.format {
            Format::Tsv => writeln!(
                self.out,
                "{}\t{}\t{}\t{}\t{}\t{}\t{}",
                tsv_field(site),
                tsv_field(&rec.source_url),
                tsv_field(&rec.target_url),
                host,
                rec.tag.as_str(),
                rec.nofollow,
                tsv_field(&rec.anchor_text)
            ),
            Format::Jsonl => {
                let row = Row {
                    site,
                    source_url: &rec.source_url,
                    target_url: &rec.target_url,
                    target_host: &host,
                    tag: rec.tag.as_str(),
                    nofollow: rec.nofollow,
                    anchor_text: &rec.anchor_text,
                };
                serde_json::to_writer(&mut self.out, &row).map_err(io::Error::other)?;
                self.out.write_all(b"\n")
            }
        }
    }

    /// Flush and hand back the writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extract::LinkTag;

    fn rec() -> LinkRecord {
        LinkRecord {
            source_url: "http://a.test/".into(),
            target_url: "http://b.test/x".into(),
            tag: LinkTag::A,
            nofollow: true,
            anchor_text: "a\tb".into(),
        }
    }

    #[test]
    fn tsv_has_header_and_columns() {
        let mut w = ExportWriter::new(Vec::new(), Format::Tsv).unwrap();
        w.write("a.test", &rec()).unwrap();
        let s = String::from_utf8(w.finish().unwrap()).unwrap();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], COLUMNS.join("\t"));
        assert_eq!(
            lines[1],
            "a.test\thttp://a.test/\thttp://b.test/x\tb.test\ta\ttrue\ta b"
        );
    }

    #[test]
    fn the_column_docs_name_every_tag_and_the_anchor_texts_bound() {
        let tag = COLUMN_DOCS[COLUMNS.iter().position(|c| *c == "tag").unwrap()].1;
        for t in LinkTag::ALL {
            assert!(tag.contains(&format!("`{}`", t.as_str())), "{t:?}");
        }
        let anchor = COLUMN_DOCS[6].1;
        let bound = crate::limits::MAX_ANCHOR_CHARS.to_string();
        assert!(anchor.contains(&format!("at most {bound} characters")));
    }

    #[test]
    fn jsonl_rows_parse() {
        let mut w = ExportWriter::new(Vec::new(), Format::Jsonl).unwrap();
        w.write("a.test", &rec()).unwrap();
        let s = String::from_utf8(w.finish().unwrap()).unwrap();
        let v: serde_json::Value = serde_json::from_str(s.trim()).unwrap();
        assert_eq!(v["target_host"], "b.test");
        assert_eq!(v["nofollow"], true);
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        let mut columns = COLUMNS.to_vec();
        keys.sort_unstable();
        columns.sort_unstable();
        assert_eq!(keys, columns);
    }
}
