//! The html5gum [`Emitter`] that collects links while the page is tokenized.
//!
//! Invariants: it keeps no element stack and copies only what links need
//! (tag names up to [`NAME_CAP`], five attributes of four tags up to
//! [`ATTR_VALUE_CAP`], open anchors' text up to [`ANCHOR_TEXT_CAP`]), so memory
//! is bounded by the links kept; it switches the tokenizer to raw-text states
//! by tag name, as tree construction would. It never builds a DOM and never
//! panics on any input.

use std::borrow::Cow;
use std::collections::HashSet;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher, RandomState};

use encoding_rs::Encoding;
use html5gum::{Emitter, Error as TokenizerError, State, Tokenizer};
use url::Url;

use super::resolve::{
    anchor_text, decode, has_nofollow, refresh_target, resolve, trim_partial_char,
};
use super::{ExtractedLink, LinkTag};
use crate::limits::{MAX_ANCHOR_CHARS, MAX_URL_LEN};
use crate::util::collapse_whitespace;

/// The hasher of a set of keyed hashes ([`Extractor`]'s `seen`): each
/// `u64` is its own hash, already keyed at random per page.
#[derive(Default)]
pub(super) struct Identity(u64);

impl Hasher for Identity {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only `u64`s are hashed here; any other input is folded in.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
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
pub(super) struct Stop;

/// State of one pass over a page; the tokenizer drives it through [`Emitter`].
pub(super) struct Extractor<'u> {
    page_url: &'u Url,
    /// What relative links resolve against: the page URL until the first
    /// `<base href>` (or the base found by the first pass).
    base: Url,
    /// The first `<base href>` has been seen (or the base is known up front).
    base_seen: bool,
    /// Set when the first `<base href>` comes after a link: run again with it.
    pub(super) late_base: Option<Url>,
    /// Link elements handled so far (kept or not).
    candidates: usize,
    max_links: usize,
    pub(super) links: Vec<ExtractedLink>,
    /// Keyed 64-bit hashes of the URLs kept: the key is random per page, so a
    /// page cannot make two of its URLs collide on purpose (and by chance the
    /// odds are below 1e-11 at [`MAX_LINKS_PER_PAGE`](crate::limits::MAX_LINKS_PER_PAGE)); saves copying each URL.
    /// Being keyed already, they are their own hash in the set.
    seen: HashSet<u64, BuildHasherDefault<Identity>>,
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
    pub(super) fn new(
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
            seen: HashSet::default(),
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

    pub(super) fn run(&mut self, html: &[u8]) {
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
