//! Link extraction from HTML: the targets of `a[href]`, `area[href]` and
//! `<meta http-equiv=refresh>`, resolved as a browser resolves them.
//!
//! # Tokenizer
//!
//! This uses [`html5gum`], a WHATWG tokenizer (it passes the html5lib tokenizer
//! tests), with an [`Emitter`] of our own rather than a hand-written tokenizer:
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
//! done here by tag name ([`raw_text_state`]; html5gum's own `naive_next_state`
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

use std::borrow::Cow;
use std::collections::HashSet;
use std::hash::{BuildHasher, RandomState};

use encoding_rs::Encoding;

use html5gum::{Emitter, Error as TokenizerError, State, Tokenizer};
use serde::{Deserialize, Serialize};
use url::Url;

use crate::limits::{MAX_ANCHOR_CHARS, MAX_LINKS_PER_PAGE, MAX_URL_LEN};
use crate::util::collapse_whitespace;

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
/// dropped. Only `http` and `https` URLs of at most [`MAX_URL_LEN`] bytes are
/// kept; a URL seen before is skipped, so the first occurrence (and its flags
/// and text) wins.
///
/// `nofollow` is set when the element's `rel` has the token `nofollow`.
/// `anchor_text` is the text inside the `<a>` (up to its `</a>` or the next
/// `<a>`), the `alt` of an `area`, and empty for a refresh; whitespace is
/// collapsed and it is capped at [`MAX_ANCHOR_CHARS`] characters.
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

/// Longest tag or attribute name kept; longer names are none we look for.
const NAME_CAP: usize = 16;

/// Bytes of one attribute value kept. An `href` may carry whitespace, tabs and
/// newlines that URL parsing strips, so this is well above [`MAX_URL_LEN`];
/// longer `href` and `content` values are dropped, longer `alt`/`rel` values cut.
const ATTR_VALUE_CAP: usize = 8 * MAX_URL_LEN;

/// Bytes of anchor text kept before collapsing whitespace (runs of ASCII
/// whitespace are already collapsed while collecting): room for
/// [`MAX_ANCHOR_CHARS`] characters with plenty of other Unicode spaces.
const ANCHOR_TEXT_CAP: usize = 64 * MAX_ANCHOR_CHARS;

/// The attributes we keep, as indexes into [`Extractor::values`].
const HREF: usize = 0;
const REL: usize = 1;
const ALT: usize = 2;
const HTTP_EQUIV: usize = 3;
const CONTENT: usize = 4;
const SLOTS: usize = 5;

/// The elements we act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TagId {
    A,
    Area,
    Base,
    Meta,
    Template,
    Other,
}

impl TagId {
    fn of(name: &[u8]) -> TagId {
        match name {
            b"a" => TagId::A,
            b"area" => TagId::Area,
            b"base" => TagId::Base,
            b"meta" => TagId::Meta,
            b"template" => TagId::Template,
            _ => TagId::Other,
        }
    }

    /// The attribute slot for `attr` on this element, if we use it.
    fn slot(self, attr: &[u8]) -> Option<usize> {
        match (self, attr) {
            (TagId::A | TagId::Area | TagId::Base, b"href") => Some(HREF),
            (TagId::A | TagId::Area, b"rel") => Some(REL),
            (TagId::Area, b"alt") => Some(ALT),
            (TagId::Meta, b"http-equiv") => Some(HTTP_EQUIV),
            (TagId::Meta, b"content") => Some(CONTENT),
            _ => None,
        }
    }
}

/// The tokenizer state that follows a start tag of this name (the
/// tokenizer's tree-construction hook, approximated by name).
fn raw_text_state(name: &[u8]) -> Option<State> {
    match name {
        b"textarea" | b"title" => Some(State::RcData),
        b"script" => Some(State::ScriptData),
        b"style" | b"xmp" | b"iframe" | b"noembed" | b"noframes" | b"noscript" => {
            Some(State::RawText)
        }
        b"plaintext" => Some(State::PlainText),
        _ => None,
    }
}

/// A short lower-case name: tag and attribute names longer than [`NAME_CAP`]
/// are marked overlong and match nothing.
#[derive(Clone, Copy, Debug, Default)]
struct Name {
    buf: [u8; NAME_CAP],
    len: usize,
    overlong: bool,
}

impl Name {
    fn clear(&mut self) {
        self.len = 0;
        self.overlong = false;
    }

    fn push(&mut self, s: &[u8]) {
        if self.overlong {
            return;
        }
        match self.buf.get_mut(self.len..self.len + s.len()) {
            Some(dst) => {
                dst.copy_from_slice(s);
                self.len += s.len();
            }
            None => self.overlong = true,
        }
    }

    /// The name, or an empty slice when overlong (matching no name we use).
    fn get(&self) -> &[u8] {
        if self.overlong {
            b""
        } else {
            &self.buf[..self.len]
        }
    }

    fn same_as(&self, other: &Name) -> bool {
        !self.overlong && !other.overlong && self.get() == other.get()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TagKind {
    None,
    Start,
    End,
}

/// The only token our emitter hands to the tokenizer's iterator: enough links.
#[derive(Debug)]
struct Stop;

/// State of one pass over a page; the tokenizer drives it through [`Emitter`].
struct Extractor<'u> {
    page_url: &'u Url,
    /// What relative links resolve against: the page URL until the first
    /// `<base href>` (or the base found by the first pass).
    base: Url,
    /// The first `<base href>` has been seen (or the base is known up front).
    base_seen: bool,
    /// Set when the first `<base href>` comes after a link: run again with it.
    late_base: Option<Url>,
    /// Link elements handled so far (kept or not).
    candidates: usize,
    max_links: usize,
    links: Vec<ExtractedLink>,
    /// Keyed 64-bit hashes of the URLs kept: the key is random per page, so a
    /// page cannot make two of its URLs collide on purpose (and by chance the
    /// odds are below 1e-11 at [`MAX_LINKS_PER_PAGE`]); saves copying each URL.
    seen: HashSet<u64>,
    hasher: RandomState,
    /// The document's encoding when it is not UTF-8: URL queries are
    /// percent-encoded in it, as browsers do.
    encoding: Option<&'static Encoding>,
    stop: bool,
    stop_sent: bool,

    // The tag being tokenized.
    tag_kind: TagKind,
    tag_name: Name,
    tag_id: Option<TagId>,
    attr_open: bool,
    attr_resolved: bool,
    attr_name: Name,
    attr_slot: Option<usize>,
    present: [bool; SLOTS],
    overflow: [bool; SLOTS],
    values: [Vec<u8>; SLOTS],
    last_start_tag: Name,

    // Document state.
    /// Index in `links` of the link of the open `<a>`, whose text we collect.
    anchor: Option<usize>,
    anchor_text: Vec<u8>,
    /// `anchor_text` reached [`ANCHOR_TEXT_CAP`].
    anchor_text_full: bool,
    /// In the content of a raw-text element (script, style, textarea, ...).
    in_raw_text: bool,
    /// Depth of open `<template>` elements, whose content is not in the document.
    template_depth: u32,
}

impl<'u> Extractor<'u> {
    fn new(
        page_url: &'u Url,
        known_base: Option<Url>,
        max_links: usize,
        encoding: Option<&'static Encoding>,
    ) -> Self {
        let base_seen = known_base.is_some();
        Extractor {
            page_url,
            base: known_base.unwrap_or_else(|| page_url.clone()),
            base_seen,
            late_base: None,
            candidates: 0,
            max_links,
            links: Vec::new(),
            seen: HashSet::new(),
            hasher: RandomState::new(),
            encoding,
            stop: false,
            stop_sent: false,
            tag_kind: TagKind::None,
            tag_name: Name::default(),
            tag_id: None,
            attr_open: false,
            attr_resolved: false,
            attr_name: Name::default(),
            attr_slot: None,
            present: [false; SLOTS],
            overflow: [false; SLOTS],
            values: Default::default(),
            last_start_tag: Name::default(),
            anchor: None,
            anchor_text: Vec::new(),
            anchor_text_full: false,
            in_raw_text: false,
            template_depth: 0,
        }
    }

    fn run(&mut self, html: &[u8]) {
        let mut tokenizer = Tokenizer::new_with_emitter(html, &mut *self);
        // The emitter's only token is `Stop`, sent when there is nothing left to
        // find; without it, this one call runs the tokenizer to the end of input.
        let _: Option<Result<Stop, std::convert::Infallible>> = tokenizer.next();
        drop(tokenizer);
        self.close_anchor();
    }

    fn full(&self) -> bool {
        self.links.len() >= self.max_links
    }

    fn current_tag_id(&mut self) -> TagId {
        match self.tag_id {
            Some(id) => id,
            None => {
                let id = TagId::of(self.tag_name.get());
                self.tag_id = Some(id);
                id
            }
        }
    }

    fn reset_tag(&mut self, kind: TagKind) {
        self.tag_kind = kind;
        self.tag_name.clear();
        self.tag_id = None;
        self.attr_open = false;
        self.present = [false; SLOTS];
        self.overflow = [false; SLOTS];
    }

    /// Decide where the current attribute's value goes, once its name is complete.
    fn resolve_attribute(&mut self) {
        self.attr_resolved = true;
        self.attr_slot = None;
        if self.tag_kind != TagKind::Start {
            return;
        }
        let id = self.current_tag_id();
        if id == TagId::Other {
            return;
        }
        if let Some(slot) = id.slot(self.attr_name.get()) {
            // Of duplicate attributes, the first wins.
            if !self.present[slot] {
                self.present[slot] = true;
                self.values[slot].clear();
                self.attr_slot = Some(slot);
            }
        }
    }

    fn finish_attribute(&mut self) {
        if self.attr_open && !self.attr_resolved {
            self.resolve_attribute();
        }
        self.attr_open = false;
        self.attr_slot = None;
    }

    fn value(&self, slot: usize) -> Option<&[u8]> {
        self.present[slot].then(|| self.values[slot].as_slice())
    }

    fn start_tag(&mut self, id: TagId) {
        match id {
            TagId::A => {
                self.close_anchor();
                if self.present[HREF] {
                    let nofollow = self.value(REL).is_some_and(has_nofollow);
                    self.anchor = self.add_href_link(LinkTag::A, nofollow, String::new());
                }
            }
            TagId::Area => {
                if self.present[HREF] {
                    let nofollow = self.value(REL).is_some_and(has_nofollow);
                    let alt = self.value(ALT).map_or_else(String::new, |alt| {
                        collapse_whitespace(&String::from_utf8_lossy(alt), MAX_ANCHOR_CHARS)
                    });
                    self.add_href_link(LinkTag::Area, nofollow, alt);
                }
            }
            TagId::Meta => {
                let is_refresh = self
                    .value(HTTP_EQUIV)
                    .is_some_and(|v| v.trim_ascii().eq_ignore_ascii_case(b"refresh"));
                if is_refresh && self.present[CONTENT] && !self.overflow[CONTENT] {
                    let content = decode(&self.values[CONTENT]);
                    if let Some(target) = refresh_target(&content) {
                        self.add_link(target, LinkTag::MetaRefresh);
                    }
                }
            }
            TagId::Base => {
                if !self.base_seen && self.present[HREF] {
                    self.base_seen = true;
                    self.set_base();
                }
            }
            TagId::Template | TagId::Other => {}
        }
    }

    /// Handle the first `<base href>`: its URL (resolved against the page URL)
    /// becomes the base, unless it fails to parse or is a `data:` or
    /// `javascript:` URL (as browsers do).
    fn set_base(&mut self) {
        if self.overflow[HREF] {
            return;
        }
        let Some(href) = self.value(HREF).map(decode) else {
            return;
        };
        let Ok(base) = self.page_url.join(&href) else {
            return;
        };
        if matches!(base.scheme(), "data" | "javascript") || base == self.base {
            return;
        }
        if self.candidates > 0 {
            // Links before this one were resolved against the page URL.
            self.late_base = Some(base);
            self.stop = true;
        } else {
            self.base = base;
        }
    }

    /// Resolve and keep the link in the current tag's `href`; the index in
    /// `links` if it was kept.
    fn add_href_link(&mut self, tag: LinkTag, nofollow: bool, text: String) -> Option<usize> {
        self.candidates += 1;
        if self.full() || self.overflow[HREF] {
            return None;
        }
        // Valid UTF-8 is the rule: check it fast, replace bytes only when not.
        let href = match std::str::from_utf8(&self.values[HREF]) {
            Ok(href) => Cow::Borrowed(href),
            Err(_) => String::from_utf8_lossy(&self.values[HREF]),
        };
        let url = resolve(&self.base, &href, self.encoding)?;
        self.keep(url, tag, nofollow, text)
    }

    /// Resolve and keep a link given as text (a refresh target).
    fn add_link(&mut self, href: &str, tag: LinkTag) -> Option<usize> {
        self.candidates += 1;
        if self.full() {
            return None;
        }
        let url = resolve(&self.base, href, self.encoding)?;
        self.keep(url, tag, false, String::new())
    }

    /// Keep a resolved link unless it was seen before; its index in `links`.
    fn keep(&mut self, url: Url, tag: LinkTag, nofollow: bool, text: String) -> Option<usize> {
        if !self.seen.insert(self.hasher.hash_one(url.as_str())) {
            return None;
        }
        self.links.push(ExtractedLink {
            url,
            tag,
            nofollow,
            anchor_text: text,
        });
        Some(self.links.len() - 1)
    }

    /// A tag is complete: act on it; the tokenizer state to switch to, if any.
    fn tag(&mut self, kind: TagKind) -> Option<State> {
        match kind {
            TagKind::Start => {
                self.last_start_tag = self.tag_name;
                let id = self.current_tag_id();
                if self.template_depth == 0 {
                    self.start_tag(id);
                }
                if id == TagId::Template {
                    self.template_depth = self.template_depth.saturating_add(1);
                }
                let next = raw_text_state(self.tag_name.get());
                self.in_raw_text = next.is_some();
                next
            }
            TagKind::End => {
                self.in_raw_text = false;
                match self.current_tag_id() {
                    TagId::A if self.template_depth == 0 => self.close_anchor(),
                    TagId::Template => self.template_depth = self.template_depth.saturating_sub(1),
                    _ => {}
                }
                None
            }
            TagKind::None => None,
        }
    }

    /// The open `<a>` ends: give its link the text collected.
    fn close_anchor(&mut self) {
        if let Some(index) = self.anchor.take() {
            let text = anchor_text(&self.anchor_text);
            if let Some(link) = self.links.get_mut(index) {
                link.anchor_text = text;
            }
        }
        self.anchor_text.clear();
        self.anchor_text_full = false;
    }

    fn push_anchor_text(&mut self, s: &[u8]) {
        for &b in s {
            if self.anchor_text.len() >= ANCHOR_TEXT_CAP {
                // Full: no more text, and no half character at the end.
                let keep = trim_partial_char(&self.anchor_text).len();
                self.anchor_text.truncate(keep);
                self.anchor_text_full = true;
                return;
            }
            if b.is_ascii_whitespace() {
                if self.anchor_text.last().is_some_and(|&last| last != b' ') {
                    self.anchor_text.push(b' ');
                }
            } else {
                self.anchor_text.push(b);
            }
        }
    }
}

impl Emitter for &mut Extractor<'_> {
    type Token = Stop;

    fn set_last_start_tag(&mut self, last_start_tag: Option<&[u8]>) {
        self.last_start_tag.clear();
        self.last_start_tag.push(last_start_tag.unwrap_or_default());
    }

    fn emit_eof(&mut self) {
        self.close_anchor();
    }

    fn emit_error(&mut self, _error: TokenizerError) {}

    fn should_emit_errors(&mut self) -> bool {
        false
    }

    fn pop_token(&mut self) -> Option<Stop> {
        if self.stop && !self.stop_sent {
            self.stop_sent = true;
            Some(Stop)
        } else {
            None
        }
    }

    fn emit_string(&mut self, s: &[u8]) {
        if self.anchor.is_some() && !self.in_raw_text && !self.anchor_text_full {
            self.push_anchor_text(s);
        }
    }

    fn init_start_tag(&mut self) {
        self.reset_tag(TagKind::Start);
    }

    fn init_end_tag(&mut self) {
        self.reset_tag(TagKind::End);
    }

    fn init_comment(&mut self) {}

    fn emit_current_tag(&mut self) -> Option<State> {
        self.finish_attribute();
        let kind = std::mem::replace(&mut self.tag_kind, TagKind::None);
        let next = self.tag(kind);
        if self.full() && self.base_seen && self.anchor.is_none() {
            // Nothing left to find once the last anchor's text is in. (Without
            // a base yet, keep going: a later `<base href>` would change the
            // links already kept.)
            self.stop = true;
        }
        next
    }

    fn emit_current_comment(&mut self) {}

    fn emit_current_doctype(&mut self) {}

    fn set_self_closing(&mut self) {}

    fn set_force_quirks(&mut self) {}

    fn push_tag_name(&mut self, s: &[u8]) {
        self.tag_name.push(s);
    }

    fn push_comment(&mut self, _s: &[u8]) {}

    fn push_doctype_name(&mut self, _s: &[u8]) {}

    fn init_doctype(&mut self) {}

    fn init_attribute(&mut self) {
        self.finish_attribute();
        self.attr_open = true;
        self.attr_resolved = false;
        self.attr_name.clear();
    }

    fn init_attribute_value(&mut self) {
        if self.attr_open && !self.attr_resolved {
            self.resolve_attribute();
        }
    }

    fn push_attribute_name(&mut self, s: &[u8]) {
        self.attr_name.push(s);
    }

    fn push_attribute_value(&mut self, s: &[u8]) {
        if self.attr_open && !self.attr_resolved {
            self.resolve_attribute();
        }
        if let Some(slot) = self.attr_slot {
            let value = &mut self.values[slot];
            if self.overflow[slot] {
                return;
            }
            if value.len() + s.len() <= ATTR_VALUE_CAP {
                value.extend_from_slice(s);
            } else {
                let room = ATTR_VALUE_CAP.saturating_sub(value.len());
                value.extend_from_slice(&s[..room.min(s.len())]);
                let keep = trim_partial_char(value).len();
                value.truncate(keep);
                self.overflow[slot] = true;
            }
        }
    }

    fn set_doctype_public_identifier(&mut self, _value: &[u8]) {}

    fn set_doctype_system_identifier(&mut self, _value: &[u8]) {}

    fn push_doctype_public_identifier(&mut self, _s: &[u8]) {}

    fn push_doctype_system_identifier(&mut self, _s: &[u8]) {}

    fn current_is_appropriate_end_tag_token(&mut self) -> bool {
        self.tag_kind == TagKind::End && self.tag_name.same_as(&self.last_start_tag)
    }
}

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
fn anchor_text(bytes: &[u8]) -> String {
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
fn resolve(base: &Url, href: &str, encoding: Option<&'static Encoding>) -> Option<Url> {
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
fn decode(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Drop an incomplete UTF-8 sequence a byte cap left at the end.
fn trim_partial_char(bytes: &[u8]) -> &[u8] {
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
fn has_nofollow(rel: &[u8]) -> bool {
    rel.split(|b| b.is_ascii_whitespace())
        .any(|token| token.eq_ignore_ascii_case(b"nofollow"))
}

/// The URL in a `<meta http-equiv=refresh>` `content` value, following the
/// HTML "shared declarative refresh steps" (`5; url=/x`, `0;URL='/x'`,
/// `5, /x`, `5 /x`), made lenient in one way: the delay may be missing
/// (`url=/x`). `None` when there is no URL (a plain reload) or the value is not
/// a refresh.
fn refresh_target(content: &str) -> Option<&str> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn page() -> Url {
        Url::parse("http://example.test/dir/page.html").expect("test URL")
    }

    fn urls(html: &str) -> Vec<String> {
        extract_links(html.as_bytes(), &page())
            .into_iter()
            .map(|l| l.url.to_string())
            .collect()
    }

    fn links(html: &str) -> Vec<ExtractedLink> {
        extract_links(html.as_bytes(), &page())
    }

    #[test]
    fn quoting_styles() {
        assert_eq!(
            urls(r#"<a href="/a">1</a><a href='/b'>2</a><a href=/c>3</a><a href = "/d" >4</a>"#),
            [
                "http://example.test/a",
                "http://example.test/b",
                "http://example.test/c",
                "http://example.test/d"
            ]
        );
        // An unquoted value runs to whitespace or `>`: `/` is part of it.
        assert_eq!(urls("<a href=x/>y</a>"), ["http://example.test/dir/x/"]);
    }

    #[test]
    fn names_are_case_insensitive() {
        assert_eq!(
            urls(r#"<A HREF="/x">1</A><aReA hReF=/y><Base HREF=/ignored/>"#),
            ["http://example.test/x", "http://example.test/y"]
        );
    }

    #[test]
    fn entities_in_attributes() {
        assert_eq!(
            urls(r#"<a href="/s?a=1&amp;b=2&#38;c=3&#x26;d=4&AMP;e">x</a>"#),
            ["http://example.test/s?a=1&b=2&c=3&d=4&e"]
        );
        // Named reference without `;` followed by `=` or alphanumeric: literal.
        assert_eq!(
            urls(r#"<a href="/?x=1&copy=2">x</a>"#),
            ["http://example.test/?x=1&copy=2"]
        );
        assert_eq!(
            urls(r#"<a href="/?x=1&copyz">x</a>"#),
            ["http://example.test/?x=1&copyz"]
        );
        // ... but decoded when followed by something else, or with `;`.
        assert_eq!(
            urls(r#"<a href="/?x=&copy-">x</a>"#),
            ["http://example.test/?x=%C2%A9-"]
        );
        assert_eq!(
            urls(r#"<a href="/?x=&copy;=">x</a>"#),
            ["http://example.test/?x=%C2%A9="]
        );
        // Unknown names stay as they are; numeric references always decode.
        assert_eq!(
            urls(r#"<a href="/&bogus;&#47;">x</a>"#),
            ["http://example.test/&bogus;/"]
        );
        assert_eq!(
            urls(r#"<a href="/&#0;&#x110000;">x</a>"#),
            ["http://example.test/%EF%BF%BD%EF%BF%BD"]
        );
    }

    #[test]
    fn entities_in_text() {
        let l = links(r#"<a href=/x>Fish &amp; Chips&nbsp;&copy 2024 &notit;</a>"#);
        // U+00A0 is whitespace to `collapse_whitespace`.
        assert_eq!(l[0].anchor_text, "Fish & Chips © 2024 ¬it;");
    }

    #[test]
    fn base_handling() {
        assert_eq!(
            urls(r#"<base href="http://mirror.test/root/"><a href=p>x</a><a href=/top>t</a>"#),
            ["http://mirror.test/root/p", "http://mirror.test/top"]
        );
        assert_eq!(
            urls(r#"<base href="/o/d/"><a href=p>x</a>"#),
            ["http://example.test/o/d/p"]
        );
        assert_eq!(
            urls(r#"<base href="http://one.test/"><base href="http://two.test/"><a href=a>x</a>"#),
            ["http://one.test/a"]
        );
        // A base without href does not count; the next one with href does.
        assert_eq!(
            urls(r#"<base target=_top><base href="http://two.test/"><a href=a>x</a>"#),
            ["http://two.test/a"]
        );
        // The first base applies to the whole document, even to earlier links.
        assert_eq!(
            urls(r#"<a href=a>x</a><base href="http://late.test/"><a href=b>y</a>"#),
            ["http://late.test/a", "http://late.test/b"]
        );
        // data: and javascript: bases are ignored, and still count as the first.
        assert_eq!(
            urls(r#"<base href="javascript:x"><base href="http://two.test/"><a href=a>x</a>"#),
            ["http://example.test/dir/a"]
        );
        // Entities in base, fragment in base.
        assert_eq!(
            urls(r#"<base href="http://b.test/x&amp;y/#f"><a href="z#g">x</a>"#),
            ["http://b.test/x&y/z"]
        );
        // A base that makes relative links unresolvable (cannot-be-a-base).
        assert_eq!(
            urls(r#"<base href="mailto:a@b.test"><a href=a>x</a><a href=http://c.test/>c</a>"#),
            ["http://c.test/"]
        );
    }

    #[test]
    fn raw_text_elements_hide_markup() {
        for tag in [
            "script", "style", "textarea", "title", "xmp", "iframe", "noembed", "noframes",
            "noscript",
        ] {
            let html = format!(
                r#"<{tag}><a href="/hidden">x</a></{tag}><a href="/shown">y</a>"#,
                tag = tag.to_uppercase()
            );
            assert_eq!(urls(&html), ["http://example.test/shown"], "{tag}");
        }
        // End tag must match the open element; escapes inside scripts.
        assert_eq!(
            urls(r#"<script>x="</style><a href=/1>"</script ><a href=/2>"#),
            ["http://example.test/2"]
        );
        assert_eq!(
            urls(r#"<script><!--<script></script><a href=/1>--></script><a href=/2>"#),
            ["http://example.test/2"]
        );
        assert!(urls(r#"<plaintext><a href=/1></plaintext><a href=/2>"#).is_empty());
        // Entities in RCDATA still do not make markup.
        assert_eq!(
            urls(r#"<textarea>&lt;a href=/1></textarea><a href=/2>"#),
            ["http://example.test/2"]
        );
    }

    #[test]
    fn comments_and_bogus_markup() {
        assert_eq!(
            urls(concat!(
                r#"<!-- <a href=/1> --><!--><a href=/2><!---->"#,
                // Outside SVG/MathML, CDATA and `<?` are bogus comments up to `>`.
                r#"<!DOCTYPE html><![CDATA[<a href=/x]]><a href=/3><?php <a href=/4> ?>"#,
                r#"<!-- unterminated <a href=/5>"#
            )),
            ["http://example.test/2", "http://example.test/3"]
        );
    }

    #[test]
    fn template_content_is_not_in_the_document() {
        assert_eq!(
            urls(
                r#"<template><a href=/1>x</a><template><a href=/2></template><a href=/3></template><a href=/4>"#
            ),
            ["http://example.test/4"]
        );
        assert_eq!(urls(r#"</template><a href=/1>"#), ["http://example.test/1"]);
    }

    #[test]
    fn fragments_schemes_whitespace() {
        assert_eq!(
            urls(concat!(
                r##"<a href="#top">t</a><a href="http://o.test/f#sec">x</a>"##,
                r#"<a href="javascript:void(0)">j</a><a href=mailto:a@b.test>m</a>"#,
                r#"<a href="  //cdn.test/lib  ">c</a><a href="ftp://f.test/">f</a>"#,
                r#"<a href="/a&#9;b&#10;c">t</a><a href="/a b">s</a><a href="HTTPS://O.TEST:443/Q">q</a>"#,
            )),
            [
                "http://example.test/dir/page.html",
                "http://o.test/f",
                "http://cdn.test/lib",
                "http://example.test/abc",
                "http://example.test/a%20b",
                "https://o.test/Q",
            ]
        );
    }

    #[test]
    fn duplicates_keep_first_occurrence() {
        let l = links(
            r#"<a href="/x" rel=nofollow>one</a><a href="/x#y">two</a><a href=/y>y</a><a href="http://example.test/x">three</a>"#,
        );
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].url.as_str(), "http://example.test/x");
        assert!(l[0].nofollow);
        assert_eq!(l[0].anchor_text, "one");
        assert_eq!(l[1].anchor_text, "y");
    }

    #[test]
    fn duplicate_attributes_first_wins() {
        let l =
            links(r#"<a href="/1" rel="x" href="/2" rel="nofollow">x</a><a href="" HREF=/3>e</a>"#);
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].url.as_str(), "http://example.test/1");
        assert!(!l[0].nofollow);
        assert_eq!(l[1].url.as_str(), "http://example.test/dir/page.html");
    }

    #[test]
    fn nofollow_tokens() {
        let flags: Vec<bool> = links(concat!(
            r#"<a href=/1 rel=nofollow><a href=/2 rel="NoFollow"><a href=/3 rel="noopener&#9;nofollow ugc">"#,
            r#"<a href=/4 rel="nofollower"><a href=/5 rel="no-follow"><a href=/6 rel=""><a href=/7>"#,
            r#"<area href=/8 rel=nofollow>"#
        ))
        .iter()
        .map(|l| l.nofollow)
        .collect();
        assert_eq!(flags, [true, true, true, false, false, false, false, true]);
    }

    #[test]
    fn tags_and_anchor_text() {
        let l = links(concat!(
            r#"<p><a href=/1>  Hello,
               <b>big</b>   <span>world</span><script>var x = "no";</script><img alt=no></a>"#,
            r#"<a href=/2>two<a href=/3>three</html>"#,
            r#"<map><area href=/4 alt="  A map
            area "></map>"#,
            r#"<meta http-equiv=Refresh content="5; URL='/5'">"#,
            r#"<a name=x>not a link</a><a href=/6><!-- c -->six</a>"#
        ));
        let got: Vec<(&str, LinkTag, &str)> = l
            .iter()
            .map(|l| (l.url.path(), l.tag, l.anchor_text.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("/1", LinkTag::A, "Hello, big world"),
                ("/2", LinkTag::A, "two"),
                ("/3", LinkTag::A, "three"),
                ("/4", LinkTag::Area, "A map area"),
                ("/5", LinkTag::MetaRefresh, ""),
                ("/6", LinkTag::A, "six"),
            ]
        );
    }

    #[test]
    fn anchor_text_is_capped() {
        let text = "word ".repeat(10_000);
        let l = links(&format!("<a href=/x>{text}</a>"));
        assert_eq!(
            l[0].anchor_text,
            collapse_whitespace(&text, MAX_ANCHOR_CHARS)
        );
        assert!(l[0].anchor_text.starts_with("word word"));
        let html = format!(
            "<a href=/x>{}é{}</a>",
            " ".repeat(100_000),
            "é".repeat(100_000)
        );
        let l = links(&html);
        assert_eq!(l[0].anchor_text, "é".repeat(MAX_ANCHOR_CHARS));
        // A long run of non-ASCII spaces before the text.
        let html = format!("<a href=/x>{}text</a>", "&nbsp;".repeat(1000));
        assert_eq!(links(&html)[0].anchor_text, "text");
    }

    #[test]
    fn link_elements_that_are_not_hyperlinks() {
        assert_eq!(
            urls(
                r#"<link rel=stylesheet href=/s.css><img src=/i.png><a>no href</a><div href=/d><a href=/ok>"#
            ),
            ["http://example.test/ok"]
        );
        // Attributes on end tags are ignored.
        assert!(urls(r#"</a href=/x>"#).is_empty());
    }

    #[test]
    fn meta_refresh_forms() {
        let target = |content: &str| {
            let html = format!(r#"<meta http-equiv="refresh" content="{content}">"#);
            urls(&html).first().cloned()
        };
        let x = Some("http://example.test/x".to_string());
        assert_eq!(target("5; url=/x"), x);
        assert_eq!(target("0;URL=/x"), x);
        assert_eq!(target("0; url = '/x'"), x);
        assert_eq!(target("0; url=&quot;/x&quot; trailing"), x);
        assert_eq!(target("0, /x"), x);
        assert_eq!(target("3.5 /x"), x);
        assert_eq!(target("url=/x"), x);
        assert_eq!(target("/x"), x);
        assert_eq!(target("  7  ;  /x  "), x);
        assert_eq!(target("5"), None);
        assert_eq!(target("5;"), None);
        assert_eq!(target("5; url="), None);
        assert_eq!(target("5x; url=/x"), None);
        assert_eq!(target("0; url=javascript:alert(1)"), None);
        assert_eq!(
            target("0; urlfoo"),
            Some("http://example.test/dir/urlfoo".to_string())
        );
        assert!(urls(r#"<meta content="0; url=/x">"#).is_empty());
        assert!(urls(r#"<meta http-equiv=content-type content="0; url=/x">"#).is_empty());
        assert!(urls(r#"<meta http-equiv=refresh>"#).is_empty());
    }

    #[test]
    fn refresh_target_parsing() {
        assert_eq!(refresh_target("0; url=a"), Some("a"));
        assert_eq!(refresh_target("0;url='a b'c"), Some("a b"));
        assert_eq!(refresh_target("0;url=\"a"), Some("a"));
        assert_eq!(refresh_target("0"), None);
        assert_eq!(refresh_target(""), None);
        assert_eq!(refresh_target("0; url=é"), Some("é"));
        assert_eq!(refresh_target("0; ur"), Some("ur"));
    }

    #[test]
    fn long_urls_are_skipped() {
        let long = format!("/{}", "a".repeat(MAX_URL_LEN));
        let ok = format!(
            "/{}",
            "a".repeat(MAX_URL_LEN - "http://example.test/".len())
        );
        let html = format!(r#"<a href="{long}">x</a><a href="{ok}">y</a>"#);
        let got = urls(&html);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].len(), MAX_URL_LEN);
        // Huge values (beyond the attribute cap) are dropped, not truncated.
        let huge = format!(
            r#"<a href="/{}">x</a><a href=/ok>ok</a>"#,
            "b".repeat(1 << 20)
        );
        assert_eq!(urls(&huge), ["http://example.test/ok"]);
        // Whitespace and tabs a URL parser strips do not count against the length.
        let padded = format!(
            "<a href=\"{}/p\t\n{}\">x</a>",
            " ".repeat(3000),
            " ".repeat(3000)
        );
        assert_eq!(urls(&padded), ["http://example.test/p"]);
    }

    #[test]
    fn limit_on_links() {
        let html: String = (0..100).map(|i| format!("<a href=/{i}>{i}</a>")).collect();
        let l = extract_links_limited(html.as_bytes(), &page(), 10);
        assert_eq!(l.len(), 10);
        assert_eq!(l[9].url.path(), "/9");
        assert_eq!(l[9].anchor_text, "9");
        assert!(extract_links_limited(html.as_bytes(), &page(), 0).is_empty());
        // A late base still applies when the limit was reached before it.
        let html = format!("{html}<base href=http://late.test/>");
        let l = extract_links_limited(html.as_bytes(), &page(), 10);
        assert_eq!(l.len(), 10);
        assert_eq!(l[0].url.as_str(), "http://late.test/0");
        assert_eq!(l[9].anchor_text, "9");
        // Duplicates do not count.
        let html = "<a href=/a><a href=/a#x><a href=/b>".repeat(3);
        assert_eq!(extract_links_limited(html.as_bytes(), &page(), 2).len(), 2);
        let html = "<a href=/a>".repeat(20_000);
        assert_eq!(links(&html).len(), 1);
        let html: String = (0..MAX_LINKS_PER_PAGE + 5)
            .map(|i| format!("<a href=/{i}>"))
            .collect();
        assert_eq!(links(&html).len(), MAX_LINKS_PER_PAGE);
    }

    #[test]
    fn deep_nesting_does_not_recurse() {
        let depth = 200_000;
        let html = format!(
            "{}<a href=/deep>deep</a>{}",
            "<div>".repeat(depth),
            "</div>".repeat(depth)
        );
        assert_eq!(urls(&html), ["http://example.test/deep"]);
        // Unclosed anchors, each a link: anchors do not nest.
        let anchors = "<a href=/x><i>".repeat(depth / 10);
        let l = links(&anchors);
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].anchor_text, "");
    }

    #[test]
    fn binary_garbage_and_invalid_utf8() {
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut garbage = Vec::with_capacity(1 << 20);
        while garbage.len() < 1 << 20 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            garbage.extend_from_slice(&state.to_le_bytes());
        }
        let _ = extract_links(&garbage, &page());
        // Garbage made of HTML-ish bytes.
        let alphabet = b"<>/=\"' &#;!-?abhrefAHREF\t\n\0\xff\xfe";
        let soup: Vec<u8> = garbage
            .iter()
            .map(|b| alphabet[*b as usize % alphabet.len()])
            .collect();
        let _ = extract_links(&soup, &page());
        // Invalid UTF-8 in href and text is replaced, not fatal.
        let l = extract_links(b"<a href=\"/a\xffb\">t\xffu\xe2\x82</a>", &page());
        assert_eq!(l[0].url.path(), "/a%EF%BF%BDb");
        assert_eq!(l[0].anchor_text, "t\u{fffd}u\u{fffd}");
        // Truncated documents.
        assert!(urls("<a href=\"/x").is_empty());
        assert!(urls("<a href=/x").is_empty());
        assert_eq!(urls("<a href=/x>text"), ["http://example.test/x"]);
        assert!(urls("").is_empty());
        assert!(urls("<").is_empty());
        assert!(urls("&").is_empty());
    }

    #[test]
    fn huge_attributes_and_names() {
        let big = "x".repeat(256 << 10);
        let html = format!(
            r#"<div data-x="{big}" {big}="1"><{big} href=/no><a title='{big}' href=/yes>y</a><a href=/t title={big}>"#
        );
        assert_eq!(
            urls(&html),
            ["http://example.test/yes", "http://example.test/t"]
        );
        let html = format!(r#"<a href=/a rel="{big} nofollow">x</a>"#);
        assert!(!links(&html)[0].nofollow, "rel beyond the cap is cut");
        let html = format!(r#"<area href=/a alt="{big}">"#);
        assert_eq!(
            links(&html)[0].anchor_text.chars().count(),
            MAX_ANCHOR_CHARS
        );
    }

    /// What holds for every output, whatever the input.
    fn check_invariants(html: &[u8]) {
        let l = extract_links(html, &page());
        let mut seen = HashSet::new();
        for link in &l {
            assert!(
                matches!(link.url.scheme(), "http" | "https"),
                "{}",
                link.url
            );
            assert!(link.url.fragment().is_none(), "{}", link.url);
            assert!(link.url.as_str().len() <= MAX_URL_LEN);
            assert!(link.anchor_text.chars().count() <= MAX_ANCHOR_CHARS);
            assert!(seen.insert(link.url.clone()), "duplicate {}", link.url);
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        #[test]
        fn arbitrary_bytes_never_panic(html in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..4096)) {
            check_invariants(&html);
        }

        #[test]
        fn html_like_soup_never_panics(
            html in "(<a href=[^>]{0,12}>|<a href=\"[^\"]{0,12}\">|</a>|<base href=[a-z:/.]{0,10}>|<script>|</script>|<!--|-->|<template>|</template>|<meta http-equiv=refresh content='0;url=[a-z/]{0,5}'>|&[a-z#0-9]{0,6};?|[a-z /=\"'<>#?\t]{0,8}){0,40}"
        ) {
            check_invariants(html.as_bytes());
        }
    }

    fn page_links(body: &[u8], content_type: Option<&str>) -> Vec<(String, String)> {
        extract_page_links(body, &page(), content_type)
            .into_iter()
            .map(|l| (l.url.to_string(), l.anchor_text))
            .collect()
    }

    #[test]
    fn legacy_encodings_give_the_urls_a_browser_requests() {
        // windows-1252 by header: path in UTF-8, query in the page's encoding.
        let body = b"<a href=\"/caf\xe9?q=\xe9t\xe9&amp;r=&#233;\">Caf\xe9</a>";
        let want = vec![(
            "http://example.test/caf%C3%A9?q=%E9t%E9&r=%E9".to_string(),
            "Caf\u{e9}".to_string(),
        )];
        assert_eq!(
            page_links(body, Some("text/html; charset=ISO-8859-1")),
            want
        );
        // The same bytes undeclared: not UTF-8, so windows-1252.
        assert_eq!(page_links(body, Some("text/html")), want);
        // A character windows-1252 lacks becomes `&#N;`, percent-encoded.
        assert_eq!(
            page_links(
                b"<a href=\"/?q=&#x65E5;\">x</a>",
                Some("text/html;charset=windows-1252")
            )[0]
            .0,
            "http://example.test/?q=%26%2326085%3B"
        );
        // Shift_JIS declared by <meta charset>.
        let mut body = b"<a href=\"/".to_vec();
        body.extend_from_slice(&[0x93, 0xfa, 0x96, 0x7b]); // 日本
        body.extend_from_slice(b"?k=");
        body.extend_from_slice(&[0x93, 0xfa]);
        body.extend_from_slice(b"\">");
        body.extend_from_slice(&[0x93, 0xfa, 0x96, 0x7b]);
        body.extend_from_slice(b"</a>");
        let sjis = [
            b"<html><head><meta charset=\"Shift_JIS\"></head>".as_slice(),
            &body,
        ]
        .concat();
        assert_eq!(
            page_links(&sjis, None),
            vec![(
                "http://example.test/%E6%97%A5%E6%9C%AC?k=%93%FA".to_string(),
                "\u{65e5}\u{672c}".to_string()
            )]
        );
        // The same page with an http-equiv declaration after a comment.
        let equiv = [
            b"<!-- <meta charset=utf-8> --><meta http-equiv=\"Content-Type\" content=\"text/html; charset=shift_jis\">".as_slice(),
            &body,
        ]
        .concat();
        assert_eq!(page_links(&equiv, None), page_links(&sjis, None));
        // UTF-16LE with a byte-order mark: queries stay UTF-8.
        let text = "<a href=\"/\u{e9}?q=\u{e9}\">\u{e9}</a>";
        let mut utf16 = vec![0xff, 0xfe];
        for unit in text.encode_utf16() {
            utf16.extend_from_slice(&unit.to_le_bytes());
        }
        assert_eq!(
            page_links(&utf16, Some("text/html; charset=iso-8859-1")),
            vec![(
                "http://example.test/%C3%A9?q=%C3%A9".to_string(),
                "\u{e9}".to_string()
            )]
        );
        // UTF-8, declared or not, is read as UTF-8; a header beats a meta.
        let utf8 = "<meta charset=windows-1252><a href=\"/?q=\u{e9}\">x</a>".as_bytes();
        assert_eq!(
            page_links(utf8, Some("text/html; charset=utf-8"))[0].0,
            "http://example.test/?q=%C3%A9"
        );
        assert_eq!(
            page_links("<a href=\"/?q=\u{e9}\">x</a>".as_bytes(), None)[0].0,
            "http://example.test/?q=%C3%A9"
        );
    }

    #[test]
    fn encoding_sniffing_order() {
        let sniff = |body: &[u8], ct: Option<&str>| sniff_encoding(body, ct).0.name();
        assert_eq!(
            sniff(
                b"\xef\xbb\xbf<meta charset=koi8-r>",
                Some("text/html; charset=latin1")
            ),
            "UTF-8"
        );
        assert_eq!(
            sniff(
                b"<meta charset=koi8-r>",
                Some("text/html; charset=\"latin1\"")
            ),
            "windows-1252"
        );
        assert_eq!(
            sniff(b"<meta charset=koi8-r>", Some("text/html; charset=bogus")),
            "KOI8-R"
        );
        assert_eq!(sniff(b"<META CHARSET='KOI8-R'>", None), "KOI8-R");
        assert_eq!(sniff(b"<meta charset=utf-16le>", None), "UTF-8");
        assert_eq!(
            sniff(b"<meta name=x content=\"charset=koi8-r\">", None),
            "UTF-8"
        );
        assert_eq!(sniff(b"<metax charset=koi8-r>", None), "UTF-8");
        let late = [
            vec![b' '; CHARSET_PRESCAN_BYTES],
            b"<meta charset=koi8-r>".to_vec(),
        ]
        .concat();
        assert_eq!(sniff(&late, None), "UTF-8");
        // A UTF-8 character cut by the page cap is still UTF-8.
        assert_eq!(sniff(b"caf\xc3", None), "UTF-8");
        assert_eq!(sniff(b"caf\xe9!", None), "windows-1252");
        // Unterminated markup in the prescan window ends it.
        assert_eq!(sniff(b"<!-- <meta charset=koi8-r>", None), "UTF-8");
        assert_eq!(sniff(b"<meta charset=\"koi8-r", None), "UTF-8");
    }

    #[test]
    fn trim_partial_char_cuts_only_incomplete_tails() {
        assert_eq!(trim_partial_char(b"ab"), b"ab");
        assert_eq!(trim_partial_char("aé".as_bytes()), "aé".as_bytes());
        assert_eq!(trim_partial_char(b"a\xc3"), b"a");
        assert_eq!(trim_partial_char(b"a\xe2\x82"), b"a");
        assert_eq!(trim_partial_char("a€".as_bytes()), "a€".as_bytes());
        assert_eq!(trim_partial_char(b"a\xf0\x9f\x98"), b"a");
        assert_eq!(trim_partial_char(b"\x80\x80"), b"\x80\x80");
        assert_eq!(trim_partial_char(b""), b"");
    }
}
