//! Exported rows as Parquet, with the low-level column writer (no Arrow):
//! typed columns (`nofollow` BOOLEAN, the others UTF-8 strings, `tag`
//! dictionary-encoded), zstd-compressed pages, and row groups of at most
//! [`ROW_GROUP_ROWS`] rows.
//!
//! Invariants: at most one row group's rows are held in memory (then written
//! out, column by column, and dropped), so memory is bounded whatever the
//! export's size; the file is valid only after [`ParquetRows::finish`]
//! writes its footer (a writer dropped before that leaves bytes no reader
//! takes for a complete file).
//!
//! Only the server links the Parquet writer: the client never depends on it.

use std::io::{self, Write};
use std::sync::Arc;

use parquet::basic::{Compression, ZstdLevel};
use parquet::data_type::{BoolType, ByteArray, ByteArrayType};
use parquet::errors::ParquetError;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use parquet::schema::types::ColumnPath;

use beebot_shared::export::target_host;
use beebot_shared::linkfile::LinkRecord;

use super::RowSink;

/// Rows gathered before a row group is written: a few megabytes of links.
pub const ROW_GROUP_ROWS: usize = 32 * 1024;
/// zstd's level for the pages (its default).
const ZSTD_LEVEL: i32 = 3;

/// The schema: the TSV's columns, in its order, typed.
pub(crate) const SCHEMA: &str = "message link {
    REQUIRED BYTE_ARRAY site (STRING);
    REQUIRED BYTE_ARRAY source_url (STRING);
    REQUIRED BYTE_ARRAY target_url (STRING);
    REQUIRED BYTE_ARRAY target_host (STRING);
    REQUIRED BYTE_ARRAY tag (STRING);
    REQUIRED BOOLEAN nofollow;
    REQUIRED BYTE_ARRAY anchor_text (STRING);
}";

/// Columns whose values repeat enough to be worth a dictionary.
pub(crate) const DICTIONARY_COLUMNS: [&str; 3] = ["site", "target_host", "tag"];
/// Index of the one BOOLEAN column in [`SCHEMA`].
const NOFOLLOW: usize = 5;
/// String columns of [`SCHEMA`], in order (the boolean aside).
const STRING_COLUMNS: usize = 6;

fn io_err(e: ParquetError) -> io::Error {
    match e {
        ParquetError::External(inner) => io::Error::other(inner),
        other => io::Error::other(other.to_string()),
    }
}

/// Writes rows to a Parquet file.
pub struct ParquetRows<W: Write + Send> {
    file: SerializedFileWriter<W>,
    strings: [Vec<ByteArray>; STRING_COLUMNS],
    nofollow: Vec<bool>,
}

impl<W: Write + Send> ParquetRows<W> {
    /// Start a file (its magic bytes are written now).
    pub fn new(out: W) -> io::Result<Self> {
        let schema = parse_message_type(SCHEMA).map_err(io_err)?;
        let level = ZstdLevel::try_new(ZSTD_LEVEL).map_err(io_err)?;
        let mut props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(level))
            .set_dictionary_enabled(false);
        for col in DICTIONARY_COLUMNS {
            props = props.set_column_dictionary_enabled(ColumnPath::from(col), true);
        }
        let file = SerializedFileWriter::new(out, Arc::new(schema), Arc::new(props.build()))
            .map_err(io_err)?;
        Ok(ParquetRows {
            file,
            strings: Default::default(),
            nofollow: Vec::new(),
        })
    }

    /// Write the gathered rows as one row group.
    fn write_group(&mut self) -> io::Result<()> {
        if self.nofollow.is_empty() {
            return Ok(());
        }
        let mut group = self.file.next_row_group().map_err(io_err)?;
        let mut strings = self.strings.iter_mut();
        let mut index = 0;
        while let Some(mut col) = group.next_column().map_err(io_err)? {
            if index == NOFOLLOW {
                col.typed::<BoolType>()
                    .write_batch(&self.nofollow, None, None)
                    .map_err(io_err)?;
            } else {
                let values = strings.next().ok_or_else(|| io::Error::other("schema"))?;
                col.typed::<ByteArrayType>()
                    .write_batch(values, None, None)
                    .map_err(io_err)?;
                values.clear();
            }
            col.close().map_err(io_err)?;
            index += 1;
        }
        group.close().map_err(io_err)?;
        self.nofollow.clear();
        Ok(())
    }

    /// Write the last row group and the footer; hand back the writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.write_group()?;
        let mut out = self.file.into_inner().map_err(io_err)?;
        out.flush()?;
        Ok(out)
    }
}

impl<W: Write + Send> RowSink for ParquetRows<W> {
    fn row(&mut self, site: &str, rec: &LinkRecord) -> io::Result<()> {
        let values = [
            site,
            &rec.source_url,
            &rec.target_url,
            &target_host(&rec.target_url),
            rec.tag.as_str(),
            &rec.anchor_text,
        ];
        for (col, value) in self.strings.iter_mut().zip(values) {
            col.push(ByteArray::from(value.as_bytes().to_vec()));
        }
        self.nofollow.push(rec.nofollow);
        if self.nofollow.len() >= ROW_GROUP_ROWS {
            self.write_group()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use beebot_shared::extract::LinkTag;
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::record::Field;

    fn rec(i: usize) -> LinkRecord {
        LinkRecord {
            source_url: format!("http://a.test/{i}"),
            target_url: format!("http://b{}.test/x", i % 7),
            tag: if i % 3 == 0 {
                LinkTag::A
            } else {
                LinkTag::Area
            },
            nofollow: i % 2 == 0,
            anchor_text: format!("\"quoted\"\t{i} été"),
        }
    }

    #[test]
    fn rows_come_back_typed_in_bounded_row_groups() {
        let n = ROW_GROUP_ROWS * 2 + 5;
        let mut w = ParquetRows::new(Vec::new()).expect("writer");
        for i in 0..n {
            w.row("a.test", &rec(i)).expect("row");
        }
        let bytes = w.finish().expect("finish");
        let reader = SerializedFileReader::new(axum::body::Bytes::from(bytes)).expect("reader");
        let meta = reader.metadata();
        assert_eq!(meta.num_row_groups(), 3);
        assert!(meta
            .row_groups()
            .iter()
            .all(|g| g.num_rows() as usize <= ROW_GROUP_ROWS));
        let rows: Vec<_> = reader.get_row_iter(None).expect("rows").collect();
        assert_eq!(rows.len(), n);
        let row = rows[4].as_ref().expect("row");
        let fields: Vec<(&String, &Field)> = row.get_column_iter().collect();
        assert_eq!(fields[5], (&"nofollow".to_string(), &Field::Bool(true)));
        assert_eq!(
            fields[6].1,
            &Field::Str("\"quoted\"\t4 été".to_string()),
            "anchor text kept whole"
        );
        assert_eq!(fields[3].1, &Field::Str("b4.test".into()));
    }
}
