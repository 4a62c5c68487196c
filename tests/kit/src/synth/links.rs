//! One link element of a synthetic page, written in one of many equivalent
//! forms (absolute, relative, protocol-relative, upper-case, quoted or not,
//! entities, odd anchor text) together with what it means: its canonical target,
//! anchor text and `rel`, as the truth has them. Every form must resolve to the
//! same canonical target; it never writes a form an HTML parser would read
//! differently.

use super::{Link, Rng, Target};
use beebot_shared::extract::LinkTag;
use beebot_shared::limits::{MAX_ANCHOR_CHARS, MAX_URL_LEN};
use beebot_shared::util::collapse_whitespace;

/// Writes link elements of one page in varied but equivalent forms.
pub(super) struct LinkWriter<'a> {
    pub(super) host: &'a str,
    /// The path relative hrefs resolve against (the page's, or its `<base href>`'s).
    pub(super) base_path: &'a str,
}

impl LinkWriter<'_> {
    /// A link to a path of this site (in scope).
    pub(super) fn internal(&self, rng: &mut Rng, target_path: &str, label: &str) -> Link {
        let host = self.host;
        let absolute = format!("http://{host}{target_path}");
        let relative = relative_href(self.base_path, target_path);
        let href = match rng.below(7) {
            0 => absolute.clone(),
            1 => target_path.to_string(),
            2 | 3 => relative.clone(),
            4 if !relative.starts_with('.') => format!("./{relative}"),
            5 => upper_scheme_host(&absolute),
            _ => format!("{relative}#section-{}", rng.below(5)),
        };
        let nofollow = rng.chance(0.05);
        self.anchor(rng, &href, Target::InScope(absolute), nofollow, label)
    }

    /// A link leaving the site (or ignored, when the URL is too long to keep).
    pub(super) fn outbound(&self, rng: &mut Rng, url: &str, nofollow: bool, label: &str) -> Link {
        let href = outbound_form(rng, url);
        let target = if url.len() > MAX_URL_LEN {
            Target::Ignored
        } else {
            Target::Outbound(url.to_string())
        };
        self.anchor(rng, &href, target, nofollow, label)
    }

    /// A link whose href is written exactly as given.
    pub(super) fn raw(&self, rng: &mut Rng, href: &str, target: Target, label: &str) -> Link {
        self.anchor(rng, href, target, false, label)
    }

    /// An `<area>` link without alt text (anchor text empty).
    pub(super) fn area(&self, rng: &mut Rng, url: &str) -> Link {
        let href = outbound_form(rng, url);
        let x = rng.below(200);
        let markup = format!(
            "<area shape=\"rect\" coords=\"{x},0,{},40\" href=\"{}\">",
            x + 40,
            escape_href(rng, &href)
        );
        Link {
            target: Target::Outbound(url.to_string()),
            href,
            markup,
            anchor: String::new(),
            nofollow: false,
            tag: LinkTag::Area,
        }
    }

    fn anchor(
        &self,
        rng: &mut Rng,
        href: &str,
        target: Target,
        nofollow: bool,
        label: &str,
    ) -> Link {
        let (inner_html, text) = anchor_text(rng, label);
        let upper = rng.chance(0.1);
        let escaped = escape_href(rng, href);
        let needs_quotes = escaped.is_empty()
            || escaped
                .chars()
                .any(|c| c.is_whitespace() || matches!(c, '"' | '\'' | '=' | '<' | '>' | '`'));
        let href_attr = match rng.below(5) {
            0 if !needs_quotes => format!("{}={escaped}", if upper { "HREF" } else { "href" }),
            1 => format!("{}='{escaped}'", if upper { "HREF" } else { "href" }),
            _ => format!("{}=\"{escaped}\"", if upper { "HREF" } else { "href" }),
        };
        let rel = if nofollow {
            Some(*rng.pick(&[
                "rel=\"nofollow\"",
                "rel=\"noopener nofollow\"",
                "rel=NoFollow",
                "rel=\"external nofollow ugc\"",
            ]))
        } else {
            match rng.below(6) {
                0 => Some("rel=\"noopener\""),
                1 => Some("rel=\"external\""),
                _ => None,
            }
        };
        let mut attrs = vec![href_attr];
        if let Some(rel) = rel {
            attrs.push(rel.to_string());
        }
        if rng.chance(0.2) {
            attrs.push("class=\"link\"".into());
        }
        if rng.chance(0.1) {
            attrs.push("title=\"next &gt; page\"".into());
        }
        shuffle(rng, &mut attrs);
        let tag = if upper { "A" } else { "a" };
        let markup = format!("<{tag} {}>{inner_html}</{tag}>", attrs.join(" "));
        Link {
            target,
            href: href.to_string(),
            markup,
            anchor: collapse_whitespace(&text, MAX_ANCHOR_CHARS),
            nofollow,
            tag: LinkTag::A,
        }
    }
}

/// An href form that resolves to the canonical `url` from any http page.
fn outbound_form(rng: &mut Rng, url: &str) -> String {
    let is_http = url.starts_with("http://");
    let is_root = url.matches('/').count() == 3 && url.ends_with('/');
    match rng.below(8) {
        0 => format!("{url}#frag-{}", rng.below(9)),
        1 => upper_scheme_host(url),
        2 if is_http => url["http:".len()..].to_string(),
        3 if is_http
            && !url["http://".len()..]
                .split('/')
                .next()
                .unwrap_or("")
                .contains(':') =>
        {
            let rest = &url["http://".len()..];
            match rest.find('/') {
                Some(i) => format!("http://{}:80{}", &rest[..i], &rest[i..]),
                None => url.to_string(),
            }
        }
        4 if is_root => url.trim_end_matches('/').to_string(),
        5 => format!("  {url} "),
        6 if url.contains("%20") => url.replace("%20", " "),
        _ => url.to_string(),
    }
}

/// Write an href into an attribute: `&` always escaped (as `&amp;` or `&#38;`).
fn escape_href(rng: &mut Rng, href: &str) -> String {
    if !href.contains('&') {
        return href.to_string();
    }
    let entity = if rng.chance(0.8) { "&amp;" } else { "&#38;" };
    href.replace('&', entity)
}

/// Anchor inner HTML and its text content, in one of several realistic shapes.
fn anchor_text(rng: &mut Rng, label: &str) -> (String, String) {
    let (first, rest) = label.split_once(' ').unwrap_or((label, ""));
    match rng.below(10) {
        0 => (
            format!("\n      {first}\t{rest}  \n   "),
            format!("\n {first}\t{rest} \n"),
        ),
        1 => (
            format!("<em>{first}</em> {rest}"),
            format!("{first} {rest}"),
        ),
        2 => (format!("{first} &amp; {rest}"), format!("{first} & {rest}")),
        3 => (
            format!("<span class=\"x\">{first}</span>\r\n<b>{rest}</b>"),
            format!("{first}\n{rest}"),
        ),
        4 if rng.chance(0.2) => {
            let long = format!("{label} ").repeat(20);
            (long.clone(), long)
        }
        _ => (label.to_string(), label.to_string()),
    }
}

/// Fisher–Yates shuffle drawing from `rng`.
pub(super) fn shuffle<T>(rng: &mut Rng, items: &mut [T]) {
    for i in (1..items.len()).rev() {
        let j = rng.below(i + 1);
        items.swap(i, j);
    }
}

/// Each word of `s` with its first letter upper-cased.
pub(super) fn title_case(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut start = true;
    for ch in s.chars() {
        if start {
            out.extend(ch.to_uppercase());
        } else {
            out.push(ch);
        }
        start = ch == ' ';
    }
    out
}

/// `http://host/path` → `HTTP://HOST/path`.
pub(super) fn upper_scheme_host(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (host, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    format!(
        "{}://{}{}",
        scheme.to_ascii_uppercase(),
        host.to_ascii_uppercase(),
        path
    )
}

/// The href that reaches `target_path` from a document whose base path is `base_path`
/// (both absolute paths), with `../` where needed; `./` when it is the base directory.
pub(super) fn relative_href(base_path: &str, target_path: &str) -> String {
    let base_dirs: Vec<&str> = {
        let dir = &base_path[..base_path.rfind('/').map_or(0, |i| i + 1)];
        dir.split('/').filter(|s| !s.is_empty()).collect()
    };
    let (target_dir, file) = match target_path.rfind('/') {
        Some(i) => (&target_path[..=i], &target_path[i + 1..]),
        None => ("/", target_path),
    };
    let target_dirs: Vec<&str> = target_dir.split('/').filter(|s| !s.is_empty()).collect();
    let common = base_dirs
        .iter()
        .zip(&target_dirs)
        .take_while(|(a, b)| a == b)
        .count();
    let mut out = "../".repeat(base_dirs.len() - common);
    for dir in &target_dirs[common..] {
        out.push_str(dir);
        out.push('/');
    }
    out.push_str(file);
    if out.is_empty() {
        out.push_str("./");
    }
    out
}
