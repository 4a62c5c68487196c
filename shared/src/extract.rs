//! Link extraction from HTML: the targets of `a[href]`, `area[href]` and
//! `<meta http-equiv=refresh>`, resolved as a browser resolves them.
//!
//! # Tokenizer
//!
//! This uses [`html5gum`], a WHATWG tokenizer (it passes the html5lib tokenizer
//! tests), with an [`Emitter`](html5gum::Emitter) of our own rather than a hand-written tokenizer:
//!
//! - it gets the hard parts right that ad-hoc scanners get wrong: unquoted and
//!   duplicate attributes, case-insensitive names, comments and bogus comments,
//!   the script-data escape states, and character references with the full
//!   named-entity table, including the attribute rule that `&copy=2` stays
//!   literal;
//! - it has no recursion and keeps no element stack, so nesting depth costs
//!   nothing, and it reads bytes, passing invalid UTF-8 through (we decode the
//!   few strings we keep lossily);
//! - a custom emitter keeps it fast: text is skipped with a word-at-a-time scan
//!   and nothing is copied except tag names (capped at 16 bytes), the five
//!   attributes we use on the four tags we use, and the text of open anchors.
//!
//! html5gum is only a tokenizer: switching to the RAWTEXT, RCDATA, script-data
//! and PLAINTEXT states after `<script>`, `<style>`, `<textarea>`, `<title>`,
//! `<xmp>`, `<iframe>`, `<noembed>`, `<noframes>`, `<noscript>` (a browser runs
//! scripts, so its content is raw text) and `<plaintext>` is the emitter's job,
//! done here by tag name (`emitter::raw_text_state`; html5gum's own `naive_next_state`
//! misspells `noframes`). The rest of tree construction is approximated where it
//! matters for links: anchors do not nest (an `<a>` start tag closes the open
//! one), `<template>` contents are not part of the document, and the first
//! `<base href>` in the document (even after some links) sets the base URL for
//! every link. SVG and MathML (foreign content) are treated as HTML.
//!
//! Throughput in release (`cargo bench -p beebot-tools --bench crawler`):
//! about 200-220 MB/s per core on a real-looking 80 KB portal page and about
//! 190-200 MB/s on the synthetic web's link-dense 4 KB pages (a link every
//! 100 bytes). html5gum's states take about 40% of the time, URL resolution
//! about 20%, allocation about 10%; a hand-written tokenizer limited to what
//! link extraction needs is the next step if more is wanted.
//!
//! [`extract_links`] reads UTF-8 (invalid bytes become U+FFFD);
//! [`extract_page_links`] first finds the page's encoding as a browser does
//! ([`sniff_encoding`]), decodes other encodings to UTF-8 with `encoding_rs`,
//! and percent-encodes URL queries in the page's encoding.

//!
//! # Where things live
//! This file holds the public entry points; `encoding` finds a page's character
//! encoding, `emitter` is the html5gum emitter that collects links while
//! tokenizing, and `resolve` turns what it collects into results (URLs
//! resolved with the page's encoding, anchor text, `rel` and refresh values).

mod emitter;
mod encoding;
mod resolve;
#[cfg(test)]
mod tests;

use encoding_rs::Encoding;
use serde::{Deserialize, Serialize};
use url::Url;

use crate::limits::MAX_LINKS_PER_PAGE;

pub use encoding::{sniff_encoding, CHARSET_PRESCAN_BYTES};

use emitter::Extractor;

/// Where a link came from on the page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum LinkTag {
    /// `<a href>`
    A,
    /// `<area href>`
    Area,
    /// `<meta http-equiv=refresh content="N; url=...">`
    MetaRefresh,
    /// An HTTP redirect that leaves the site's scope.
    Redirect,
}

impl LinkTag {
    /// Every tag, in declaration order.
    pub const ALL: [LinkTag; 4] = [
        LinkTag::A,
        LinkTag::Area,
        LinkTag::MetaRefresh,
        LinkTag::Redirect,
    ];

    /// The name used in exports (`a`, `area`, `meta-refresh`, `redirect`).
    pub fn as_str(self) -> &'static str {
        match self {
            LinkTag::A => "a",
            LinkTag::Area => "area",
            LinkTag::MetaRefresh => "meta-refresh",
            LinkTag::Redirect => "redirect",
        }
    }
}

/// One link found on a page, resolved against the page URL (or its `<base href>`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtractedLink {
    pub url: Url,
    pub tag: LinkTag,
    pub nofollow: bool,
    pub anchor_text: String,
}

/// The links of a page, at most [`MAX_LINKS_PER_PAGE`] of them.
///
/// See [`extract_links_limited`].
pub fn extract_links(html: &[u8], page_url: &Url) -> Vec<ExtractedLink> {
    extract_links_limited(html, page_url, MAX_LINKS_PER_PAGE)
}

/// The first `max_links` distinct links of a page, in document order.
///
/// Links are the `href` of `a` and `area` elements and the target of
/// `<meta http-equiv=refresh>`, with HTML character references decoded,
/// resolved against the document's base URL (the first `<base href>`, itself
/// resolved against `page_url`; `page_url` when there is none), fragment
/// dropped. Only `http` and `https` URLs of at most [`MAX_URL_LEN`](crate::limits::MAX_URL_LEN) bytes are
/// kept; a URL seen before is skipped, so the first occurrence (and its flags
/// and text) wins.
///
/// `nofollow` is set when the element's `rel` has the token `nofollow`.
/// `anchor_text` is the text inside the `<a>` (up to its `</a>` or the next
/// `<a>`), the `alt` of an `area`, and empty for a refresh; whitespace is
/// collapsed and it is capped at [`MAX_ANCHOR_CHARS`](crate::limits::MAX_ANCHOR_CHARS) characters.
///
/// Never panics; time is linear in the input and memory is bounded by the
/// number of links kept.
pub fn extract_links_limited(html: &[u8], page_url: &Url, max_links: usize) -> Vec<ExtractedLink> {
    extract_decoded(html, page_url, max_links, None)
}

/// The links of a page as served, at most [`MAX_LINKS_PER_PAGE`]: like
/// [`extract_links`], for a page in any encoding. `content_type` is the HTTP
/// `Content-Type` header, if there was one.
///
/// The encoding is found as a browser finds it ([`sniff_encoding`]); a page
/// that is not UTF-8 is decoded to UTF-8 first (at most three output bytes per
/// input byte, so memory stays bounded by the page cap), and the queries of
/// its URLs are percent-encoded in its encoding, as a browser sends them.
pub fn extract_page_links(
    body: &[u8],
    page_url: &Url,
    content_type: Option<&str>,
) -> Vec<ExtractedLink> {
    let (encoding, bom_len) = sniff_encoding(body, content_type);
    let body = &body[bom_len..];
    if encoding == encoding_rs::UTF_8 {
        return extract_decoded(body, page_url, MAX_LINKS_PER_PAGE, None);
    }
    let output = encoding.output_encoding();
    let url_encoding = (output != encoding_rs::UTF_8).then_some(output);
    let decoded = encoding.decode_without_bom_handling(body).0;
    extract_decoded(
        decoded.as_bytes(),
        page_url,
        MAX_LINKS_PER_PAGE,
        url_encoding,
    )
}

/// [`extract_links_limited`] over UTF-8 (or invalid UTF-8, read lossily), with
/// queries encoded in `url_encoding` when it is not UTF-8.
fn extract_decoded(
    html: &[u8],
    page_url: &Url,
    max_links: usize,
    url_encoding: Option<&'static Encoding>,
) -> Vec<ExtractedLink> {
    if max_links == 0 {
        return Vec::new();
    }
    let mut first = Extractor::new(page_url, None, max_links, url_encoding);
    first.run(html);
    match first.late_base.take() {
        // A `<base href>` came after links already resolved against the page
        // URL: run again with the base known from the start (rare).
        Some(base) => {
            let mut second = Extractor::new(page_url, Some(base), max_links, url_encoding);
            second.run(html);
            second.links
        }
        None => first.links,
    }
}
