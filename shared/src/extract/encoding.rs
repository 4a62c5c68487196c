//! Finding a page's character encoding as a browser does, without its locale
//! guess: byte-order mark, `Content-Type` charset, then the `<meta>` prescan
//! of the first [`CHARSET_PRESCAN_BYTES`]. It only reads bytes: it never
//! decodes the page (that is the caller's job, with `encoding_rs`).

use encoding_rs::Encoding;

/// Bytes of a page searched for a `<meta charset>` (the HTML standard's prescan).
pub const CHARSET_PRESCAN_BYTES: usize = 1024;

/// The character encoding of a page, and the length of its byte-order mark:
/// the HTML standard's order, without the locale guess: a byte-order mark, the
/// `charset` of the `Content-Type` header, a `<meta charset>` or
/// `<meta http-equiv=content-type>` in the first [`CHARSET_PRESCAN_BYTES`];
/// otherwise UTF-8 when the bytes are valid UTF-8 (a character cut by the page
/// cap allowed), windows-1252 when they are not.
pub fn sniff_encoding(body: &[u8], content_type: Option<&str>) -> (&'static Encoding, usize) {
    if let Some((encoding, bom_len)) = Encoding::for_bom(body) {
        return (encoding, bom_len);
    }
    if let Some(encoding) = content_type.and_then(charset_of_content_type) {
        return (encoding, 0);
    }
    let head = &body[..body.len().min(CHARSET_PRESCAN_BYTES)];
    if let Some(encoding) = prescan_meta_charset(head) {
        return (encoding, 0);
    }
    match std::str::from_utf8(body) {
        Ok(_) => (encoding_rs::UTF_8, 0),
        // Only an incomplete character at the very end (the page was cut).
        Err(e) if e.error_len().is_none() => (encoding_rs::UTF_8, 0),
        Err(_) => (encoding_rs::WINDOWS_1252, 0),
    }
}

/// The encoding named by the `charset` parameter of a `Content-Type` value.
fn charset_of_content_type(content_type: &str) -> Option<&'static Encoding> {
    content_type.split(';').skip(1).find_map(|param| {
        let (name, value) = param.split_once('=')?;
        if !name.trim().eq_ignore_ascii_case("charset") {
            return None;
        }
        Encoding::for_label(value.trim().trim_matches(['"', '\'']).as_bytes())
    })
}

/// The encoding a `<meta>` in `head` declares (the HTML standard's prescan,
/// simplified: comments and other tags are skipped, the first `<meta>` with a
/// usable `charset`, or `http-equiv=content-type` with a `content` charset,
/// wins). A declared UTF-16 means UTF-8 (the bytes were read as ASCII), as in
/// the standard. Bounded by `head`, which the caller caps.
fn prescan_meta_charset(head: &[u8]) -> Option<&'static Encoding> {
    let mut i = 0;
    while i < head.len() {
        let rest = &head[i..];
        if rest.starts_with(b"<!--") {
            i += find(&rest[4..], b"-->").map_or(head.len(), |end| 4 + end + 3);
            continue;
        }
        let is_meta = rest.len() > 5
            && rest[..5].eq_ignore_ascii_case(b"<meta")
            && (rest[5].is_ascii_whitespace() || rest[5] == b'/');
        if is_meta {
            let (encoding, used) = meta_charset(&rest[5..]);
            if let Some(encoding) = encoding {
                return Some(
                    if encoding == encoding_rs::UTF_16BE || encoding == encoding_rs::UTF_16LE {
                        encoding_rs::UTF_8
                    } else if encoding == encoding_rs::X_USER_DEFINED {
                        encoding_rs::WINDOWS_1252
                    } else {
                        encoding
                    },
                );
            }
            i += 5 + used;
            continue;
        }
        if rest.first() == Some(&b'<') && rest.len() > 1 {
            // Another tag, `</…`, `<!…` or `<?…`: skip to its `>`.
            i += rest
                .iter()
                .position(|&b| b == b'>')
                .map_or(head.len(), |p| p + 1);
            continue;
        }
        i += 1;
    }
    None
}

/// The charset a `<meta` tag's attributes declare, and the bytes they took.
fn meta_charset(attrs: &[u8]) -> (Option<&'static Encoding>, usize) {
    let mut i = 0;
    let mut charset = None;
    let mut content_charset = None;
    let mut is_content_type = false;
    // Each turn consumes at least one byte.
    while i < attrs.len() {
        let b = attrs[i];
        if b == b'>' {
            i += 1;
            break;
        }
        if b.is_ascii_whitespace() || b == b'/' {
            i += 1;
            continue;
        }
        let name_start = i;
        while i < attrs.len()
            && !matches!(attrs[i], b'=' | b'>' | b'/')
            && !attrs[i].is_ascii_whitespace()
        {
            i += 1;
        }
        let name = &attrs[name_start..i];
        while i < attrs.len() && attrs[i].is_ascii_whitespace() {
            i += 1;
        }
        let mut value: &[u8] = b"";
        if attrs.get(i) == Some(&b'=') {
            i += 1;
            while i < attrs.len() && attrs[i].is_ascii_whitespace() {
                i += 1;
            }
            match attrs.get(i) {
                Some(&q @ (b'"' | b'\'')) => {
                    let start = i + 1;
                    // An unterminated value ends the prescan, as at the end of input.
                    let Some(len) = attrs[start..].iter().position(|&c| c == q) else {
                        return (None, attrs.len());
                    };
                    value = &attrs[start..start + len];
                    i = start + len + 1;
                }
                _ => {
                    let start = i;
                    while i < attrs.len() && attrs[i] != b'>' && !attrs[i].is_ascii_whitespace() {
                        i += 1;
                    }
                    value = &attrs[start..i];
                }
            }
        }
        if name.eq_ignore_ascii_case(b"charset") && charset.is_none() {
            charset = Some(Encoding::for_label(value));
        } else if name.eq_ignore_ascii_case(b"http-equiv") {
            is_content_type |= value.trim_ascii().eq_ignore_ascii_case(b"content-type");
        } else if name.eq_ignore_ascii_case(b"content") && content_charset.is_none() {
            content_charset = Some(charset_in_content(value));
        }
    }
    let encoding = match charset {
        Some(found) => found,
        None if is_content_type => content_charset.flatten(),
        None => None,
    };
    (encoding, i)
}

/// The encoding after `charset=` in a `content` attribute value.
fn charset_in_content(value: &[u8]) -> Option<&'static Encoding> {
    let lower = value.to_ascii_lowercase();
    let at = find(&lower, b"charset")?;
    let rest = value[at + 7..].trim_ascii_start();
    let rest = rest.strip_prefix(b"=")?.trim_ascii_start();
    let rest = match rest.first() {
        Some(&q @ (b'"' | b'\'')) => {
            let inner = &rest[1..];
            &inner[..inner.iter().position(|&c| c == q)?]
        }
        _ => {
            let end = rest
                .iter()
                .position(|&c| c == b';' || c.is_ascii_whitespace())
                .unwrap_or(rest.len());
            &rest[..end]
        }
    };
    Encoding::for_label(rest)
}

/// Where `needle` first occurs in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
