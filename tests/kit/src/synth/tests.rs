//! Tests of the synthetic web: determinism (including golden hashes of every
//! answer and the truth), sizes, features, and that the truth matches what the
//! extractor finds in the rendered pages.

use super::links::relative_href;
use super::truth::page_links;
use super::*;
use beebot_shared::limits::MAX_URL_LEN;
use url::Url;

/// Decode the entities `escape_href` writes.
fn unescape(s: &str) -> String {
    s.replace("&#38;", "&").replace("&amp;", "&")
}

fn all_pages(site: &Site) -> impl Iterator<Item = &Page> {
    site.pages.iter().chain(std::iter::once(&site.private))
}

#[test]
fn same_seed_same_bytes() {
    let a = SynthWeb::generate(42, 20);
    let b = SynthWeb::generate(42, 20);
    assert_eq!(a.site_hosts(), b.site_hosts());
    for site in &a.sites {
        for page in all_pages(site) {
            let ra = a.respond(&site.host, &page.path);
            let rb = b.respond(&site.host, &page.path);
            assert_eq!(ra, rb);
            assert_eq!(ra.status, 200);
        }
    }
    assert_eq!(a.truth(), b.truth());
    let c = SynthWeb::generate(43, 20);
    assert_ne!(a.truth(), c.truth());
}

#[test]
fn sizes_are_bounded_and_heavy_tailed() {
    let cfg = SynthConfig::default();
    let web = SynthWeb::generate(9, 500);
    let mut sizes: Vec<usize> = web
        .site_hosts()
        .iter()
        .map(|h| web.site_pages(h).unwrap())
        .collect();
    assert!(sizes
        .iter()
        .all(|&s| s >= cfg.min_pages_per_site && s <= cfg.max_pages_per_site));
    sizes.sort_unstable();
    let median = sizes[sizes.len() / 2];
    let mean = web.total_pages() as f64 / sizes.len() as f64;
    let small = sizes
        .iter()
        .filter(|&&s| s <= 2 * cfg.min_pages_per_site)
        .count();
    assert!(small * 3 > sizes.len(), "{small} small of {}", sizes.len());
    assert!(mean > 1.5 * median as f64, "mean {mean} median {median}");
    assert!(*sizes.last().unwrap() >= cfg.max_pages_per_site / 2);
}

#[test]
fn config_is_clamped() {
    let web = SynthWeb::with_config(
        1,
        5,
        SynthConfig {
            min_pages_per_site: 0,
            max_pages_per_site: 1,
            crawl_delay_ms: Some(10 * MAX_SYNTH_CRAWL_DELAY_MS),
        },
    );
    for h in web.site_hosts() {
        assert_eq!(web.site_pages(&h), Some(1));
        assert!(!web.site_truth(&h).unwrap().is_empty());
    }
    let robots = web.respond("site0.synth.test", "/robots.txt");
    assert!(String::from_utf8(robots.body)
        .unwrap()
        .contains("Crawl-delay: 60.000"));
}

#[test]
fn canonical_strings_are_what_url_serialises() {
    let web = SynthWeb::generate(5, 30);
    for site in &web.sites {
        for page in all_pages(site) {
            for link in page_links(page) {
                if let Target::InScope(u) | Target::Outbound(u) = &link.target {
                    assert_eq!(Url::parse(u).unwrap().as_str(), u);
                }
            }
        }
        for r in &site.redirects {
            if let Target::InScope(u) | Target::Outbound(u) = &r.target {
                assert_eq!(Url::parse(u).unwrap().as_str(), u);
            }
        }
    }
}

#[test]
fn every_href_resolves_to_its_target() {
    let web = SynthWeb::generate(11, 30);
    for site in &web.sites {
        for page in all_pages(site) {
            let page_url = Url::parse(&format!("http://{}{}", site.host, page.path)).unwrap();
            let base = match &page.base {
                Some(b) => Url::parse(b).unwrap(),
                None => page_url.clone(),
            };
            for link in page_links(page) {
                let mut resolved = base.join(&unescape(&link.href)).unwrap();
                resolved.set_fragment(None);
                match &link.target {
                    Target::InScope(u) => {
                        assert_eq!(resolved.as_str(), u, "{}", link.markup);
                        assert_eq!(resolved.host_str(), Some(site.host.as_str()));
                    }
                    Target::Outbound(u) => {
                        assert_eq!(resolved.as_str(), u, "{}", link.markup);
                        assert_ne!(resolved.host_str(), Some(site.host.as_str()));
                    }
                    Target::Ignored => {
                        assert!(
                            !matches!(resolved.scheme(), "http" | "https")
                                || resolved.as_str().len() > MAX_URL_LEN
                        );
                    }
                }
                assert!(page_url.scheme() == "http");
            }
        }
        for r in &site.redirects {
            let resolved = Url::parse(&format!("http://{}/", site.host))
                .unwrap()
                .join(&r.location)
                .unwrap();
            let mut resolved = resolved;
            resolved.set_fragment(None);
            match &r.target {
                Target::InScope(u) | Target::Outbound(u) => assert_eq!(resolved.as_str(), u),
                Target::Ignored => panic!("redirects always lead somewhere"),
            }
        }
    }
}

#[test]
fn truth_is_nonempty_and_excludes_private_pages() {
    let web = SynthWeb::generate(7, 12);
    let truth = web.truth();
    assert!(!truth.is_empty());
    for (site, r) in &truth {
        assert!(r.source_url.starts_with(&format!("http://{site}/")));
        assert!(!r.source_url.contains("/private/"));
        assert!(!r.target_url.contains("private-ext"));
        assert!(!r.target_url.contains("fake-"));
        assert!(!r.target_url.starts_with(&format!("http://{site}/")));
        assert!(r.target_url.len() <= MAX_URL_LEN);
    }
    // The private pages exist, are served, and are linked from home.
    for host in web.site_hosts() {
        let private = &web.site_disallowed_paths(&host).unwrap()[0];
        assert_eq!(web.respond(&host, private).status, 200);
        let home = String::from_utf8(web.respond(&host, "/").body).unwrap();
        assert!(home.contains("/private/") || home.contains("private/members"));
    }
    // Distinct (source, target) pairs.
    let mut pairs: Vec<_> = truth
        .iter()
        .map(|(_, r)| (r.source_url.clone(), r.target_url.clone()))
        .collect();
    let n = pairs.len();
    pairs.sort();
    pairs.dedup();
    assert_eq!(pairs.len(), n);
    // The truth covers every page of every site (all reachable from `/`) and
    // includes redirect records.
    assert!(truth.iter().any(|(_, r)| r.tag == LinkTag::Redirect));
    assert!(truth.iter().any(|(_, r)| r.tag == LinkTag::Area));
    assert!(truth.iter().any(|(_, r)| r.nofollow));
    assert!(truth
        .iter()
        .any(|(_, r)| r.target_url.starts_with("https://")));
    assert!(truth
        .iter()
        .any(|(_, r)| r.target_url.contains(".synth.test/")));
}

#[test]
fn redirects_and_errors_are_served() {
    let web = SynthWeb::generate(7, 12);
    let go = web.respond("site0.synth.test:8080", "/go/0");
    assert_eq!(go.status, 302);
    assert!(go
        .location
        .unwrap()
        .to_ascii_lowercase()
        .contains("landing"));
    let old = web.respond("site0.synth.test", "/old-0");
    assert_eq!(old.status, 301);
    assert_eq!(web.respond("site1.synth.test", "/loop-a").status, 302);
    assert_eq!(
        web.respond("site0.synth.test", "/missing-0.html").status,
        404
    );
    assert_eq!(web.respond("site3.synth.test", "/error-3.html").status, 500);
    assert_eq!(
        web.respond("site2.synth.test", "/files/report-2.pdf")
            .content_type,
        "application/pdf"
    );
    assert_eq!(web.respond("site99.synth.test", "/").status, 404);
    assert_eq!(web.respond("other.test", "/").status, 404);
    assert_eq!(web.respond("site0.synth.test", "/nope").status, 404);
    assert_eq!(web.respond("SITE0.Synth.Test.", "/").status, 200);
    let robots = String::from_utf8(web.respond("site0.synth.test", "/robots.txt").body).unwrap();
    assert!(robots.contains("Disallow: /private/"));
}

#[test]
fn pages_are_a_few_kb() {
    let web = SynthWeb::generate(3, 10);
    let mut total = 0usize;
    let mut count = 0usize;
    for site in &web.sites {
        for page in &site.pages {
            let body = web.respond(&site.host, &page.path).body;
            assert!(
                body.len() > 1000 && body.len() < 64 * 1024,
                "{}",
                body.len()
            );
            total += body.len();
            count += 1;
        }
    }
    let mean = total / count;
    assert!((2000..12_000).contains(&mean), "mean page {mean} bytes");
}

#[test]
fn site_urls_count_every_request_once() {
    let web = SynthWeb::generate(7, 12);
    for host in web.site_hosts() {
        let pages = web.site_pages(&host).unwrap();
        let urls = web.site_urls(&host).unwrap();
        assert!(urls >= pages, "{host}: {urls} < {pages}");
        assert!(urls <= pages + 6, "{host}: {urls} vs {pages}");
    }
}

#[test]
fn relative_hrefs() {
    assert_eq!(relative_href("/news/a.html", "/"), "../");
    assert_eq!(relative_href("/news/a.html", "/news/b.html"), "b.html");
    assert_eq!(
        relative_href("/news/a.html", "/docs/guide/c.html"),
        "../docs/guide/c.html"
    );
    assert_eq!(relative_href("/", "/"), "./");
    assert_eq!(relative_href("/", "/docs/x.html"), "docs/x.html");
    assert_eq!(relative_href("/docs/guide/", "/docs/y.html"), "../y.html");
}

#[test]
fn site_index_parses_hosts() {
    assert_eq!(site_index("site0.synth.test"), Some(0));
    assert_eq!(site_index("site12.synth.test:443"), Some(12));
    assert_eq!(site_index("Site7.SYNTH.test."), Some(7));
    assert_eq!(site_index("site01.synth.test"), None);
    assert_eq!(site_index("site.synth.test"), None);
    assert_eq!(site_index("blog.site1.synth.test"), None);
    assert_eq!(site_index("site1xsynth.test"), None);
}

#[test]
fn one_site_may_serve_its_own_robots_txt() {
    let mut web = SynthWeb::generate(3, 2);
    let generated = web.respond("site1.synth.test", "/robots.txt").body;
    let ours = "User-agent: BeeBot\nDisallow: /\n";
    assert!(web.set_robots_txt("site0.synth.test", ours));
    assert!(!web.set_robots_txt("site2.synth.test", ours));
    assert_eq!(
        web.respond("site0.synth.test", "/robots.txt").body,
        ours.as_bytes()
    );
    assert_eq!(
        web.respond("site1.synth.test", "/robots.txt").body,
        generated
    );
}

/// FNV-1a over length-prefixed parts: a hash that is the same on every
/// platform and Rust version, for the golden-bytes test below.
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xCBF2_9CE4_8422_2325)
    }

    fn bytes(&mut self, bytes: &[u8]) {
        for b in (bytes.len() as u64).to_le_bytes().iter().chain(bytes) {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01B3);
        }
    }

    fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }
}

/// Every answer and the truth of a few fixed webs, through the public API.
fn web_hash(web: &SynthWeb) -> u64 {
    let mut h = Fnv::new();
    for (i, host) in web.site_hosts().iter().enumerate() {
        h.str(host);
        h.str(&format!("{:?}", web.site_urls(host)));
        let mut paths = web.site_page_paths(host).unwrap();
        paths.extend(web.site_disallowed_paths(host).unwrap());
        for extra in [
            "/robots.txt".to_string(),
            format!("/old-{i}"),
            format!("/go/{i}"),
            "/loop-a".into(),
            "/loop-b".into(),
            format!("/missing-{i}.html"),
            format!("/error-{i}.html"),
            format!("/files/report-{i}.pdf"),
            "/nowhere".into(),
        ] {
            paths.push(extra);
        }
        for path in &paths {
            let r = web.respond(&format!("{host}:8080"), path);
            h.str(path);
            h.str(&r.status.to_string());
            h.str(&r.content_type);
            h.str(&format!("{:?}", r.location));
            h.bytes(&r.body);
        }
    }
    for (host, record) in web.truth() {
        h.str(&host);
        h.str(&record.source_url);
        h.str(&record.target_url);
        h.str(record.tag.as_str());
        h.str(&record.nofollow.to_string());
        h.str(&record.anchor_text);
    }
    h.0
}

#[test]
fn golden_bytes_never_change() {
    let mut h = Fnv::new();
    for (seed, sites) in [(0u64, 1usize), (1, 7), (42, 20), (0xDEAD_BEEF, 33)] {
        h.bytes(&web_hash(&SynthWeb::generate(seed, sites)).to_le_bytes());
    }
    let small = SynthConfig {
        min_pages_per_site: 1,
        max_pages_per_site: 9,
        crawl_delay_ms: Some(1_250),
    };
    h.bytes(&web_hash(&SynthWeb::with_config(5, 12, small)).to_le_bytes());
    let big = SynthConfig {
        min_pages_per_site: 200,
        max_pages_per_site: 400,
        crawl_delay_ms: Some(u64::MAX),
    };
    h.bytes(&web_hash(&SynthWeb::with_config(7, 3, big)).to_le_bytes());
    assert_eq!(
        h.0, 11188824895636413028,
        "the synthetic web's bytes changed"
    );
}
