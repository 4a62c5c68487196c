//! The reference pages of what the server reads, serves and writes, made
//! from the code into `docs/reference/`: the config file's keys (from
//! the doc comments of its structs and the values the code writes), the
//! metrics (from a real render) and the exports' columns. Each test fails
//! when its committed page differs from the one made now
//! ([`beebot_shared::docpage`]). Test code only; the commands' page is
//! made by `main.rs`' tests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use clap::Args;

use beebot_shared::docpage::{cell, made_from_the_code};
use beebot_shared::export::{ExportWriter, COLUMNS, COLUMN_DOCS};
use beebot_shared::extract::LinkTag;
use beebot_shared::linkfile::LinkRecord;

use crate::config::{
    ServerConfig, ValidationConfig, DEFAULT_METRICS_PORT, PLACEHOLDER_CONTACT, ROUND_KEYS,
};
use crate::export::{graph, parquet};
use crate::grid::GridSnapshot;
use crate::metrics::{JobStateLabel, LabelText, Metrics, Outcome, RequestKind, UnitEvent, Within};
use crate::params::{RoundOverrides, RoundParams};

/// `page` against the committed `docs/reference/NAME`.
fn assert_current(name: &str, page: &str) {
    beebot_shared::docpage::assert_reference_current(env!("CARGO_MANIFEST_DIR"), name, page);
}

/// The fields of `pub struct NAME { ... }` in `source`, each with its
/// doc comment (its `///` lines joined), in their order.
fn field_docs(source: &str, name: &str) -> Vec<(String, String)> {
    let start = format!("pub struct {name} {{");
    let mut lines = source.lines().skip_while(|l| l.trim() != start);
    assert!(lines.next().is_some(), "no `{start}` in the source");
    let (mut fields, mut doc, mut attr_depth) = (Vec::new(), Vec::new(), 0i64);
    for line in lines {
        let t = line.trim();
        if attr_depth > 0 || t.starts_with("#[") {
            attr_depth += t.matches('[').count() as i64 - t.matches(']').count() as i64;
            continue;
        }
        if t == "}" {
            break;
        }
        if let Some(d) = t.strip_prefix("///") {
            doc.push(d.trim().to_string());
        } else if let Some((field, _)) = t.strip_prefix("pub ").and_then(|f| f.split_once(':')) {
            fields.push((field.trim().to_string(), doc.join(" ")));
            doc.clear();
        }
    }
    fields
}

/// `doc` with its links to constants ([`NAME`]) shown as the constants'
/// values, from `values`; a link to anything else fails the test.
fn with_values(doc: &str, key: &str, values: &[(&str, String)]) -> String {
    let (mut out, mut rest) = (String::new(), doc);
    while let Some(i) = rest.find("[`") {
        let Some(len) = rest[i..].find("`]") else {
            break;
        };
        let name = &rest[i + 2..i + len];
        let Some((_, value)) = values.iter().find(|(n, _)| *n == name) else {
            panic!(
                "the doc comment of `{key}` links [`{name}`], which the reference cannot \
                 show: add its value to the page's list, or say it in words"
            );
        };
        out += &rest[..i];
        out += &format!("`{value}`");
        rest = &rest[i + len + 2..];
    }
    out + rest
}

/// `value` as TOML text.
fn toml_text(value: &toml::Value) -> String {
    match value {
        toml::Value::String(s) if s.is_empty() => "\"\"".into(),
        other => other.to_string(),
    }
}

/// A config as TOML, as a table.
fn table_of(cfg: &ServerConfig) -> toml::Table {
    match toml::Value::try_from(cfg) {
        Ok(toml::Value::Table(t)) => t,
        other => panic!("a config is no TOML table: {other:?}"),
    }
}

/// The value a config read without `key` has for it; `None` when a config
/// without it is refused (the key is required).
fn default_of(written: &toml::Table, key: &str) -> Option<toml::Value> {
    let mut without = written.clone();
    without.remove(key);
    let text = toml::to_string(&without).expect("a config as TOML");
    let cfg: ServerConfig = toml::from_str(&text).ok()?;
    table_of(&cfg).remove(key)
}

/// `docs/reference/server-config.md`: every key of `config.toml`.
fn config_page() -> String {
    let cfg = ServerConfig::new("grid.example.org:4433", "0.0.0.0:4433", "127.0.0.1:4480");
    let written = table_of(&cfg);
    let linked = [
        ("PLACEHOLDER_CONTACT", PLACEHOLDER_CONTACT.to_string()),
        ("DEFAULT_METRICS_PORT", DEFAULT_METRICS_PORT.to_string()),
    ];
    let top = field_docs(include_str!("config.rs"), "ServerConfig");
    let keys: BTreeSet<&str> = written.keys().map(String::as_str).collect();
    let fields: BTreeSet<&str> = top.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        keys, fields,
        "the config's keys against ServerConfig's fields"
    );
    let mut page = format!(
        "# `beebot-server` config file\n\n{}\n\n\
         Every key of `DATA_DIR/config.toml`, which `beebot-server init` writes and \
         every start reads ([an example](../../deploy/server.example.toml)). Every key is \
         checked at start: a value out of its range is refused, and so is a key the \
         server does not know (the nearest known one is named). Durations (`*_s`, \
         `*_ms`) are a number in the key's unit or text with a unit (`\"2d\"`, \
         `\"30s\"`). A key with a default may be left out.\n\n\
         | key | default | meaning |\n|---|---|---|\n",
        made_from_the_code()
    );
    let mut tables = Vec::new();
    for (key, doc) in &top {
        if written[key.as_str()].is_table() {
            tables.push(key.as_str());
            continue;
        }
        assert!(
            !doc.trim().is_empty(),
            "ServerConfig.{key} has no doc comment"
        );
        let default =
            default_of(&written, key).map_or("required".into(), |v| format!("`{}`", toml_text(&v)));
        let doc = with_values(doc, key, &linked);
        page += &format!("| `{key}` | {default} | {} |\n", cell(&doc));
    }
    assert_eq!(
        tables,
        ["round", "validation"],
        "a new table needs its section"
    );

    let round = field_docs(include_str!("params.rs"), "RoundOverrides");
    let round_defaults = match toml::Value::try_from(RoundParams::default()) {
        Ok(toml::Value::Table(t)) => t,
        other => panic!("round parameters are no TOML table: {other:?}"),
    };
    let names: BTreeSet<&str> = round.iter().map(|(k, _)| k.as_str()).collect();
    let defaults: BTreeSet<&str> = round_defaults.keys().map(String::as_str).collect();
    assert_eq!(
        names, defaults,
        "RoundOverrides' fields against RoundParams'"
    );
    assert_eq!(
        names,
        ROUND_KEYS.into_iter().collect::<BTreeSet<_>>(),
        "against ROUND_KEYS"
    );
    let start = RoundOverrides::augment_args(clap::Command::new("start"));
    page += "\n## `[round]`\n\nThe parameters a round starts with unless `beebot-server \
             round start` gives its flag: each key's default is the built-in one.\n\n\
             | key | default | flag of `round start` | meaning |\n|---|---|---|---|\n";
    for (key, doc) in &round {
        assert!(
            !doc.trim().is_empty(),
            "RoundOverrides.{key} has no doc comment"
        );
        let flag = start
            .get_arguments()
            .find(|a| a.get_id().as_str() == key)
            .and_then(|a| a.get_long())
            .map_or("none".into(), |l| format!("`--{l}`"));
        page += &format!(
            "| `{key}` | `{}` | {flag} | {} |\n",
            toml_text(&round_defaults[key.as_str()]),
            cell(&with_values(doc, key, &linked))
        );
    }

    let validation = field_docs(include_str!("config.rs"), "ValidationConfig");
    let validation_defaults = match toml::Value::try_from(ValidationConfig::default()) {
        Ok(toml::Value::Table(t)) => t,
        other => panic!("the validation config is no TOML table: {other:?}"),
    };
    page += "\n## `[validation]`\n\nWhen a host is trusted, and how often a trusted \
             host's results are still checked (a round's `validate` says whether they \
             are checked at all).\n\n| key | default | meaning |\n|---|---|---|\n";
    for (key, doc) in &validation {
        assert!(
            !doc.trim().is_empty(),
            "ValidationConfig.{key} has no doc comment"
        );
        page += &format!(
            "| `{key}` | `{}` | {} |\n",
            toml_text(&validation_defaults[key.as_str()]),
            cell(&with_values(doc, key, &linked))
        );
    }
    page
}

/// One metric family of a render.
#[derive(Default)]
struct Family {
    kind: String,
    help: String,
    labels: BTreeSet<String>,
}

/// The values of a label, as its closed list in [`crate::metrics`] has them.
fn label_values(label: &str) -> Vec<&'static str> {
    fn texts<T: LabelText>() -> Vec<&'static str> {
        T::ALL.iter().map(|v| v.text()).collect()
    }
    match label {
        "kind" => texts::<RequestKind>(),
        "outcome" => texts::<Outcome>(),
        "event" => texts::<UnitEvent>(),
        "state" => texts::<JobStateLabel>(),
        "within" => texts::<Within>(),
        other => panic!("label `{other}`: name its closed list of values here"),
    }
}

/// `docs/reference/metrics.md`: every metric of a render in which every
/// family is present (a round's progress, the process's memory).
fn metrics_page() -> String {
    let snapshot = GridSnapshot {
        round_progress: Some(0.5),
        ..GridSnapshot::default()
    };
    let text = Metrics::new(0)
        .render_with_memory(&snapshot, Some(1))
        .expect("a render");
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    let mut current = String::new();
    for line in text.lines() {
        if let Some(meta) = line.strip_prefix("# ") {
            let mut words = meta.splitn(3, ' ');
            let (what, name, rest) = (words.next(), words.next(), words.next());
            let (Some(what), Some(name)) = (what, name) else {
                continue;
            };
            current = name.to_string();
            let family = families.entry(current.clone()).or_default();
            match what {
                "TYPE" => family.kind = rest.unwrap_or("").to_string(),
                "HELP" => family.help = rest.unwrap_or("").to_string(),
                _ => {}
            }
        } else if let Some((_, labels)) = line.split_once('{') {
            let labels = labels.split('}').next().unwrap_or("");
            let family = families.entry(current.clone()).or_default();
            for pair in labels.split(',') {
                let name = pair.split('=').next().unwrap_or("").trim();
                if !name.is_empty() && name != "le" {
                    family.labels.insert(name.to_string());
                }
            }
        }
    }
    let mut page = format!(
        "# `beebot-server` metrics\n\n{}\n\n\
         Every metric `beebot-server serve` answers `GET /metrics` with ([where and \
         how to scrape them](../metrics.md)). Counters count from the server's start; \
         a histogram's series are its `_bucket` (by `le`), `_sum` and `_count`. Every \
         label's values are the closed list shown: no label names a site, a URL or a \
         host.\n\n| metric | type | labels | what |\n|---|---|---|---|\n",
        made_from_the_code()
    );
    for (name, family) in &families {
        assert!(!family.help.is_empty(), "{name} has no help text");
        let shown = match family.kind.as_str() {
            "counter" => format!("{name}_total"),
            _ => name.clone(),
        };
        let labels: Vec<String> = family
            .labels
            .iter()
            .map(|l| {
                let values: Vec<String> =
                    label_values(l).iter().map(|v| format!("`{v}`")).collect();
                format!("`{l}`: {}", values.join(", "))
            })
            .collect();
        page += &format!(
            "| `{shown}` | {} | {} | {} |\n",
            family.kind,
            labels.join("; "),
            cell(&family.help)
        );
    }
    page
}

/// `docs/reference/export.md`: the columns of an export's rows, their
/// types in JSON Lines and in Parquet, and the host graph's files.
fn export_page() -> String {
    let record = LinkRecord {
        source_url: "http://a.test/".into(),
        target_url: "http://b.test/".into(),
        tag: LinkTag::A,
        nofollow: false,
        anchor_text: String::new(),
    };
    let mut writer =
        ExportWriter::new(Vec::new(), beebot_shared::export::Format::Jsonl).expect("a writer");
    writer.write("a.test", &record).expect("a row");
    let row: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&writer.finish().expect("rows")).expect("a JSON object");
    let parquet_types: Vec<(&str, String)> = parquet::SCHEMA
        .lines()
        .filter_map(|l| l.trim().strip_prefix("REQUIRED "))
        .map(|l| {
            let mut words = l.trim_end_matches(';').split_whitespace();
            let physical = words.next().unwrap_or("");
            let name = words.next().unwrap_or("");
            let logical: Vec<&str> = words.collect();
            let mut shown = format!("{physical} {}", logical.join(" "));
            if parquet::DICTIONARY_COLUMNS.contains(&name) {
                shown += ", dictionary";
            }
            (name, shown.trim().replace(" ,", ","))
        })
        .collect();
    let names: Vec<&str> = parquet_types.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        names, COLUMNS,
        "the Parquet schema's columns against COLUMNS"
    );
    let mut page = format!(
        "# Export columns\n\n{}\n\n\
         `beebot-server export --round ID` writes a round's outbound links, one row a \
         link: TSV with a header row of these names (the default), JSON Lines (`--format \
         jsonl`: one object a line, these its fields) or Parquet (`--format parquet`: \
         zstd pages, row groups of at most {} rows). `beebot crawl` writes the same TSV \
         and JSON Lines. In TSV a tab or a line break inside a field is written as a \
         space.\n\n| column | JSON | Parquet | what |\n|---|---|---|---|\n",
        made_from_the_code(),
        parquet::ROW_GROUP_ROWS
    );
    for ((name, what), (_, parquet_type)) in COLUMN_DOCS.iter().zip(&parquet_types) {
        let json = match row.get(*name) {
            Some(serde_json::Value::Bool(_)) => "boolean",
            Some(serde_json::Value::String(_)) => "string",
            other => panic!("column {name} is {other:?} in JSON Lines"),
        };
        page += &format!("| `{name}` | {json} | {parquet_type} | {} |\n", cell(what));
    }
    page += "\n## Host graph\n\n`beebot-server export --round ID --graph host --out DIR` \
             writes Common Crawl's host-graph layout, which the cc-webgraph and WebGraph \
             tools load, instead of rows:\n\n| file | each line |\n|---|---|\n";
    for (file, lines) in graph::FILES {
        page += &format!("| `{file}` | {} |\n", cell(lines));
    }
    page
}

#[test]
fn the_config_reference_page_is_current() {
    assert_current("server-config.md", &config_page());
}

#[test]
fn the_metrics_reference_page_is_current() {
    assert_current("metrics.md", &metrics_page());
}

#[test]
fn the_export_reference_page_is_current() {
    assert_current("export.md", &export_page());
}

#[test]
fn a_structs_fields_are_read_with_their_doc_comments() {
    let source = "pub struct Other {\n    pub x: u8,\n}\n\
                  /// The struct.\npub struct S {\n    /// First,\n    /// and more.\n    \
                  #[serde(default)]\n    pub first: u8,\n    #[arg(\n        long,\n    )]\n    \
                  pub second: Vec<[u8; 2]>,\n}\n";
    assert_eq!(
        field_docs(source, "S"),
        [
            ("first".to_string(), "First, and more.".to_string()),
            ("second".to_string(), String::new())
        ]
    );
    let linked = [("MAX", "9".to_string())];
    assert_eq!(
        with_values("at most [`MAX`].", "k", &linked),
        "at most `9`."
    );
}

#[test]
fn the_reference_index_links_every_page() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/reference");
    let index = std::fs::read_to_string(dir.join("README.md")).expect("docs/reference/README.md");
    for entry in std::fs::read_dir(&dir).expect("docs/reference") {
        let name = entry.expect("an entry").file_name();
        let name = name.to_string_lossy();
        if name != "README.md" {
            assert!(
                index.contains(&format!("]({name})")),
                "docs/reference/README.md does not link {name}"
            );
        }
    }
}
