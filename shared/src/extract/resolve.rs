//! From collected bytes to results: URLs resolved as a browser resolves them
//! (queries percent-encoded in the page's encoding), anchor text collapsed and
//! capped, `rel` tokens and `<meta http-equiv=refresh>` values parsed. Pure
//! functions on values: no tokenizer state lives here, and none of them panics.

use std::borrow::Cow;

use encoding_rs::Encoding;
use url::Url;

use crate::limits::{MAX_ANCHOR_CHARS, MAX_URL_LEN};
use crate::util::collapse_whitespace;

/// `query` in `encoding` as the URL standard's "percent-encode after
/// encoding" does: a character the encoding lacks becomes `%26%23N%3B`
/// (`&#N;`, already percent-encoded, so the URL parser leaves it alone).
fn encode_query(encoding: &'static Encoding, query: &str) -> Cow<'static, [u8]> {
    if query.is_ascii() {
        return Cow::Owned(query.as_bytes().to_vec());
    }
    let mut encoder = encoding.new_encoder();
    let mut out = Vec::with_capacity(query.len() * 2 + 16);
    let mut src = query;
    // Each turn consumes input (one unmappable character at least), so the
    // input's length bounds the turns.
    for _ in 0..=query.len() {
        let room = encoder
            .max_buffer_length_from_utf8_without_replacement(src.len())
            .unwrap_or(src.len() * 4 + 16);
        let start = out.len();
        out.resize(start + room, 0);
        let (result, read, written) =
            encoder.encode_from_utf8_without_replacement(src, &mut out[start..], true);
        out.truncate(start + written);
        src = &src[read..];
        match result {
            encoding_rs::EncoderResult::InputEmpty => break,
            encoding_rs::EncoderResult::OutputFull => {}
            encoding_rs::EncoderResult::Unmappable(c) => {
                out.extend_from_slice(format!("%26%23{}%3B", u32::from(c)).as_bytes());
            }
        }
    }
    Cow::Owned(out)
}

/// Pins a closure's signature to the higher-ranked one `url` wants.
fn encoder<F: for<'a> Fn(&'a str) -> Cow<'a, [u8]>>(f: F) -> F {
    f
}

/// Collected anchor text (ASCII whitespace runs already one space) with its
/// whitespace collapsed and capped at [`MAX_ANCHOR_CHARS`] characters: what
/// [`collapse_whitespace`] gives, without decoding when the text is plain ASCII.
pub(super) fn anchor_text(bytes: &[u8]) -> String {
    if bytes.is_ascii() && !bytes.contains(&0x0b) {
        let text = bytes.trim_ascii();
        let text = text
            .get(..MAX_ANCHOR_CHARS)
            .unwrap_or(text)
            .trim_ascii_end();
        // ASCII is UTF-8.
        return String::from_utf8_lossy(text).into_owned();
    }
    collapse_whitespace(&decode(bytes), MAX_ANCHOR_CHARS)
}

/// `href` resolved against `base`, fragment dropped, if it is an http(s) URL
/// of at most [`MAX_URL_LEN`] bytes. With a document `encoding` other than
/// UTF-8, the query is percent-encoded in that encoding (WHATWG URL parsing
/// with an encoding override; unmappable characters become `&#N;` first).
pub(super) fn resolve(base: &Url, href: &str, encoding: Option<&'static Encoding>) -> Option<Url> {
    let mut url = match encoding {
        None => base.join(href).ok()?,
        Some(encoding) => {
            let encode = encoder(move |s| encode_query(encoding, s));
            Url::options()
                .base_url(Some(base))
                .encoding_override(Some(&encode))
                .parse(href)
                .ok()?
        }
    };
    if !matches!(url.scheme(), "http" | "https") {
        return None;
    }
    url.set_fragment(None);
    (url.as_str().len() <= MAX_URL_LEN).then_some(url)
}

/// Bytes to text, invalid UTF-8 replaced by U+FFFD.
pub(super) fn decode(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Drop an incomplete UTF-8 sequence a byte cap left at the end.
pub(super) fn trim_partial_char(bytes: &[u8]) -> &[u8] {
    let len = bytes.len();
    for back in 1..=len.min(4) {
        let byte = bytes[len - back];
        if byte & 0xC0 != 0x80 {
            let needed = match byte {
                0xC0..=0xDF => 2,
                0xE0..=0xEF => 3,
                0xF0..=0xF7 => 4,
                _ => 1,
            };
            return if needed > back {
                &bytes[..len - back]
            } else {
                bytes
            };
        }
    }
    bytes
}

/// Whether a `rel` value has the token `nofollow` (ASCII case-insensitive,
/// separated by ASCII whitespace).
pub(super) fn has_nofollow(rel: &[u8]) -> bool {
    rel.split(|b| b.is_ascii_whitespace())
        .any(|token| token.eq_ignore_ascii_case(b"nofollow"))
}

/// The URL in a `<meta http-equiv=refresh>` `content` value, following the
/// HTML "shared declarative refresh steps" (`5; url=/x`, `0;URL='/x'`,
/// `5, /x`, `5 /x`), made lenient in one way: the delay may be missing
/// (`url=/x`). `None` when there is no URL (a plain reload) or the value is not
/// a refresh.
pub(super) fn refresh_target(content: &str) -> Option<&str> {
    let is_space = |c: char| c.is_ascii_whitespace();
    let s = content.trim_start_matches(is_space);
    let after_delay = s.trim_start_matches(|c: char| c.is_ascii_digit() || c == '.');
    let had_delay = after_delay.len() != s.len();
    if had_delay
        && !after_delay.is_empty()
        && !after_delay.starts_with([';', ',', ' ', '\t', '\n', '\x0c', '\r'])
    {
        return None;
    }
    let s = after_delay.trim_start_matches(is_space);
    let s = s.strip_prefix([';', ',']).unwrap_or(s);
    let mut s = s.trim_start_matches(is_space);
    if s.get(..3).is_some_and(|p| p.eq_ignore_ascii_case("url")) {
        if let Some(rest) = s[3..].trim_start_matches(is_space).strip_prefix('=') {
            s = rest.trim_start_matches(is_space);
        }
    }
    let s = match s.chars().next() {
        Some(quote @ ('"' | '\'')) => {
            let inner = &s[1..];
            inner.split(quote).next().unwrap_or(inner)
        }
        _ => s,
    };
    (!s.trim_matches(is_space).is_empty()).then_some(s)
}
