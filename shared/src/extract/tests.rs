//! Tests of link extraction: tags, attributes, base URLs, raw-text states,
//! encodings, limits, and the helpers that parse values.

use super::*;
use std::collections::HashSet;

use super::resolve::{refresh_target, trim_partial_char};
use crate::limits::{MAX_ANCHOR_CHARS, MAX_URL_LEN};
use crate::util::collapse_whitespace;

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
        "script", "style", "textarea", "title", "xmp", "iframe", "noembed", "noframes", "noscript",
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
    let l = links(r#"<a href="/1" rel="x" href="/2" rel="nofollow">x</a><a href="" HREF=/3>e</a>"#);
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
