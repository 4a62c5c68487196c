//! Generation of the synthetic web's model from a seed: first a plan of every
//! site (its page paths and tree), then each site with its redirects, error
//! paths, robots.txt and pages, each page with its blocks of links.
//!
//! Deterministic: every site and page draws from its own [`Rng`] derived from
//! the seed and its indices, in a fixed order; changing the order of any draw
//! changes the web (the golden test in `tests` pins the bytes).

use std::collections::HashMap;

use super::links::{shuffle, title_case, upper_scheme_host, LinkWriter};
use super::{
    pareto_size, site_host, Block, Link, Page, Redirect, Resource, Rng, Site, SynthConfig, Target,
};
use beebot_shared::limits::MAX_URL_LEN;

/// How many distinct external hosts pages link to.
const EXTERNAL_HOSTS: u64 = 40;

/// Directories pages live in (relative links need some depth to be interesting).
const DIRS: &[&str] = &[
    "",
    "news/",
    "docs/",
    "docs/guide/",
    "blog/",
    "about/",
    "products/2024/",
];

/// The plan of one site, made before any page links (pages link across sites).
pub(super) struct SitePlan {
    host: String,
    paths: Vec<String>,
    parents: Vec<usize>,
}

/// The plan of site `index`: its size, page paths and page tree.
pub(super) fn plan_site(seed: u64, index: usize, config: &SynthConfig) -> SitePlan {
    let mut rng = Rng::derive(seed, index as u64, 0);
    let n = pareto_size(
        &mut rng,
        config.min_pages_per_site,
        config.max_pages_per_site,
    );
    let mut paths = Vec::with_capacity(n);
    let mut parents = Vec::with_capacity(n);
    paths.push("/".to_string());
    parents.push(0);
    for p in 1..n {
        let dir = rng.pick(DIRS);
        let slug = rng.word();
        paths.push(format!("/{dir}{slug}-{p}.html"));
        parents.push(rng.below(p));
    }
    SitePlan {
        host: site_host(index),
        paths,
        parents,
    }
}

/// Which optional parts a site has: fixed by its index, so even a web of a
/// handful of sites has every kind.
struct Features {
    old_redirect: bool,
    go_redirect: bool,
    redirect_loop: bool,
    missing: bool,
    pdf: bool,
    server_error: bool,
    long_url: bool,
}

impl Features {
    fn of(index: usize, pages: usize) -> Features {
        Features {
            old_redirect: index % 3 != 1 && pages >= 2,
            go_redirect: index % 2 == 0,
            redirect_loop: index % 4 == 1,
            missing: index % 3 == 0,
            pdf: index % 3 == 2,
            server_error: index % 5 == 3,
            long_url: index % 4 == 3,
        }
    }
}

/// Links a page must carry besides its tree, nav, cross and outbound links.
#[derive(Default)]
struct Extras {
    internal_paths: Vec<String>,
    outbound: Vec<String>,
}

/// Site `index` of the web whose sites `plans` describes.
pub(super) fn build_site(
    seed: u64,
    index: usize,
    plans: &[SitePlan],
    config: &SynthConfig,
) -> Site {
    let plan = &plans[index];
    let n = plan.paths.len();
    let host = plan.host.clone();
    let mut rng = Rng::derive(seed, index as u64, 1);
    let features = Features::of(index, n);

    let mut paths: HashMap<String, Resource> = HashMap::new();
    for (p, path) in plan.paths.iter().enumerate() {
        paths.insert(path.clone(), Resource::Page(p));
    }
    let private_path = format!("/private/members-{index}.html");
    paths.insert(private_path.clone(), Resource::Private);

    let mut special = SpecialPaths {
        index,
        origin: format!("http://{host}"),
        paths,
        redirects: Vec::new(),
        extras: (0..n).map(|_| Extras::default()).collect(),
        redirected_child: None,
    };
    // The order of these steps is the order of their draws: it is part of the web.
    if features.old_redirect {
        special.add_old_redirect(&mut rng, plan);
    }
    if features.go_redirect {
        special.add_go_redirect(&mut rng);
    }
    if features.redirect_loop {
        special.add_redirect_loop(&mut rng);
    }
    special.add_broken_paths(&mut rng, &features);
    if features.long_url {
        let url = format!(
            "http://www.ext{}.example.org/trap?data={}",
            rng.below(EXTERNAL_HOSTS as usize),
            "a".repeat(MAX_URL_LEN + 10)
        );
        special.extras[rng.below(n)].outbound.push(url);
    }

    let pages = build_pages(seed, index, plans, &special, &private_path);
    let private = build_private_page(
        &mut Rng::derive(seed, index as u64, 2),
        index,
        &host,
        private_path,
    );
    let robots_txt = robots_txt(&host, config);

    Site {
        host,
        pages,
        private,
        paths: special.paths,
        redirects: special.redirects,
        robots_txt,
    }
}

/// Everything a site serves or links to besides its pages, as it is added.
struct SpecialPaths {
    index: usize,
    /// `http://{host}`.
    origin: String,
    /// Every path the site serves, to what (pages included).
    paths: HashMap<String, Resource>,
    redirects: Vec<Redirect>,
    /// What each page must link to besides its own links, by page index.
    extras: Vec<Extras>,
    /// The page whose tree link goes through `/old-{index}` instead, and that path.
    redirected_child: Option<(usize, String)>,
}

impl SpecialPaths {
    /// Serve `redirect` at `path`.
    fn add_redirect(&mut self, path: String, redirect: Redirect) {
        self.paths
            .insert(path, Resource::Redirect(self.redirects.len()));
        self.redirects.push(redirect);
    }

    /// Link `path` from one page drawn at random.
    fn link_from_some_page(&mut self, rng: &mut Rng, path: String) {
        let n = self.extras.len();
        self.extras[rng.below(n)].internal_paths.push(path);
    }

    /// `/old-{index}`: a 301 to a page, replacing that page's tree link.
    fn add_old_redirect(&mut self, rng: &mut Rng, plan: &SitePlan) {
        let (index, origin) = (self.index, self.origin.clone());
        let child = 1 + rng.below(plan.paths.len() - 1);
        let old_path = format!("/old-{index}");
        let target_path = &plan.paths[child];
        let location = if rng.chance(0.5) {
            format!("{origin}{target_path}")
        } else {
            target_path.clone()
        };
        self.add_redirect(
            old_path.clone(),
            Redirect {
                status: 301,
                location,
                target: Target::InScope(format!("{origin}{target_path}")),
            },
        );
        self.redirected_child = Some((child, old_path));
    }

    /// `/go/{index}`: a 302 to an external URL, linked from one page.
    fn add_go_redirect(&mut self, rng: &mut Rng) {
        let index = self.index;
        let go_path = format!("/go/{index}");
        let target = format!(
            "http://www.ext{}.example.org/landing?from=site{index}&id={}",
            rng.below(EXTERNAL_HOSTS as usize),
            rng.below(1000)
        );
        let location = match rng.below(3) {
            0 => target.clone(),
            1 => format!("{target}#welcome"),
            _ => upper_scheme_host(&target),
        };
        self.add_redirect(
            go_path.clone(),
            Redirect {
                status: 302,
                location,
                target: Target::Outbound(target),
            },
        );
        self.link_from_some_page(rng, go_path);
    }

    /// `/loop-a` ⇄ `/loop-b`, `/loop-a` linked from one page.
    fn add_redirect_loop(&mut self, rng: &mut Rng) {
        let origin = self.origin.clone();
        self.add_redirect(
            "/loop-a".into(),
            Redirect {
                status: 302,
                location: "/loop-b".into(),
                target: Target::InScope(format!("{origin}/loop-b")),
            },
        );
        self.add_redirect(
            "/loop-b".into(),
            Redirect {
                status: 302,
                location: format!("{origin}/loop-a"),
                target: Target::InScope(format!("{origin}/loop-a")),
            },
        );
        self.link_from_some_page(rng, "/loop-a".into());
    }

    /// The 404, 500 and PDF paths the features ask for, each linked from one page.
    fn add_broken_paths(&mut self, rng: &mut Rng, features: &Features) {
        let index = self.index;
        if features.missing {
            // Linked but never served: a 404.
            let path = format!("/missing-{index}.html");
            self.link_from_some_page(rng, path);
        }
        if features.server_error {
            let path = format!("/error-{index}.html");
            self.paths.insert(path.clone(), Resource::ServerError);
            self.link_from_some_page(rng, path);
        }
        if features.pdf {
            let path = format!("/files/report-{index}.pdf");
            self.paths.insert(path.clone(), Resource::Pdf);
            self.link_from_some_page(rng, path);
        }
    }
}

/// Every HTML page of site `index`, each from its own generator.
fn build_pages(
    seed: u64,
    index: usize,
    plans: &[SitePlan],
    special: &SpecialPaths,
    private_path: &str,
) -> Vec<Page> {
    let plan = &plans[index];
    let n = plan.paths.len();
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); n];
    for p in 1..n {
        children[plan.parents[p]].push(p);
    }
    (0..n)
        .map(|p| {
            let mut page_rng = Rng::derive(seed, index as u64, 1000 + p as u64);
            build_page(
                &mut page_rng,
                PageContext {
                    site_index: index,
                    page_index: p,
                    plans,
                    children: &children[p],
                    redirected_child: special.redirected_child.as_ref(),
                    extras: &special.extras[p],
                    private_path,
                },
            )
        })
        .collect()
}

/// The site's robots.txt: everything forbidden to another robot, `/private/`
/// to everyone, and the configured `Crawl-delay`.
fn robots_txt(host: &str, config: &SynthConfig) -> String {
    let mut robots_txt = format!(
        "# robots.txt for {host} (BeeBot synthetic web)\n\
         User-agent: GreedyBot\n\
         Disallow: /\n\
         \n\
         User-agent: *\n\
         Disallow: /private/\n"
    );
    if let Some(ms) = config.crawl_delay_ms {
        robots_txt.push_str(&format!("Crawl-delay: {}.{:03}\n", ms / 1000, ms % 1000));
    }
    robots_txt
}

/// Everything `build_page` needs to know about the page's surroundings.
struct PageContext<'a> {
    site_index: usize,
    page_index: usize,
    plans: &'a [SitePlan],
    children: &'a [usize],
    redirected_child: Option<&'a (usize, String)>,
    extras: &'a Extras,
    private_path: &'a str,
}

/// One HTML page of the model. The order of the steps is the order of their
/// draws from `rng`: it is part of the web.
fn build_page(rng: &mut Rng, ctx: PageContext<'_>) -> Page {
    let plan = &ctx.plans[ctx.site_index];
    let p = ctx.page_index;
    let index = ctx.site_index;
    let host = plan.host.as_str();
    let path = plan.paths[p].clone();
    let title = title_case(&format!("{} {} {}", rng.word(), rng.word(), rng.word()));
    let base = page_base(rng, &ctx);
    // The path relative links are written against.
    let base_path = match &base {
        Some(b) => b[format!("http://{host}").len()..].to_string(),
        None => path.clone(),
    };
    let content_type = page_content_type(rng, &ctx);
    let w = LinkWriter {
        host,
        base_path: &base_path,
    };

    let mut blocks = vec![Block::Nav(nav_links(rng, &w, plan))];
    if p == 0 || rng.chance(0.3) {
        blocks.push(Block::Script(format!(
            "http://fake-script{index}.example.org/p{p}"
        )));
    }
    // Links that go into paragraphs, shuffled.
    let mut inline = internal_links(rng, &w, &ctx);
    let outbound_urls = outbound_urls(rng, &ctx);
    let (outbound_links, duplicates) = outbound_links(rng, &w, &outbound_urls);
    inline.extend(outbound_links);
    if rng.chance(0.3) && p != 0 && base.is_none() {
        inline.push(w.raw(
            rng,
            "#top",
            Target::InScope(format!("http://{host}{path}")),
            "Back to top",
        ));
    }
    shuffle(rng, &mut inline);
    push_paragraphs(rng, &mut blocks, inline, &ctx);
    push_related_map_footer(rng, &mut blocks, &w, duplicates);

    Page {
        path,
        title,
        base,
        content_type,
        text_seed: rng.next_u64(),
        blocks,
    }
}

/// The absolute `<base href>` of a few pages, pointing at another directory.
fn page_base(rng: &mut Rng, ctx: &PageContext<'_>) -> Option<String> {
    let plan = &ctx.plans[ctx.site_index];
    let (p, n, index) = (ctx.page_index, plan.paths.len(), ctx.site_index);
    let wants_base = p > 0 && ((index % 2 == 1 && p == n - 1) || rng.chance(0.05));
    if wants_base {
        let dir = rng.pick(DIRS);
        Some(format!("http://{}/{dir}", plan.host))
    } else {
        None
    }
}

/// The page's `Content-Type`: mostly ordinary, odd on the second page of some sites.
fn page_content_type(rng: &mut Rng, ctx: &PageContext<'_>) -> &'static str {
    let (p, index) = (ctx.page_index, ctx.site_index);
    if p == 1 && index % 4 == 2 {
        "application/xhtml+xml"
    } else if p == 1 && index % 4 == 0 {
        "Text/HTML; Charset=UTF-8"
    } else if rng.chance(0.5) {
        "text/html; charset=utf-8"
    } else {
        "text/html"
    }
}

/// Navigation: home and the first few pages, on every page.
fn nav_links(rng: &mut Rng, w: &LinkWriter<'_>, plan: &SitePlan) -> Vec<Link> {
    let mut nav = Vec::new();
    for q in 0..plan.paths.len().min(4) {
        let label = if q == 0 {
            "Home".to_string()
        } else {
            title_case(&format!("{} {}", rng.word(), rng.word()))
        };
        nav.push(w.internal(rng, &plan.paths[q], &label));
    }
    nav
}

/// In-scope links of the paragraphs: tree children (one maybe through its
/// `/old-` redirect), random cross links, the members area from `/`, extras.
fn internal_links(rng: &mut Rng, w: &LinkWriter<'_>, ctx: &PageContext<'_>) -> Vec<Link> {
    let plan = &ctx.plans[ctx.site_index];
    let n = plan.paths.len();
    let mut inline: Vec<Link> = Vec::new();
    for &child in ctx.children {
        let label = format!("{} {}", rng.word(), rng.word());
        match ctx.redirected_child {
            Some((c, old_path)) if *c == child => inline.push(w.internal(rng, old_path, &label)),
            _ => inline.push(w.internal(rng, &plan.paths[child], &label)),
        }
    }
    for _ in 0..rng.below(4) {
        let q = rng.below(n);
        let label = format!("{} {}", rng.word(), rng.word());
        inline.push(w.internal(rng, &plan.paths[q], &label));
    }
    if ctx.page_index == 0 {
        inline.push(w.internal(rng, ctx.private_path, "Members area"));
    }
    for extra in &ctx.extras.internal_paths {
        let label = format!("{} {}", rng.word(), rng.word());
        inline.push(w.internal(rng, extra, &label));
    }
    inline
}

/// Canonical URLs the paragraphs link out to: external hosts, other synthetic
/// sites, sometimes a subdomain of this site, and the extras.
fn outbound_urls(rng: &mut Rng, ctx: &PageContext<'_>) -> Vec<String> {
    let index = ctx.site_index;
    let mut outbound_urls: Vec<String> = Vec::new();
    for _ in 0..1 + rng.below(6) {
        outbound_urls.push(external_url(rng));
    }
    if ctx.plans.len() > 1 {
        for _ in 0..rng.below(3) {
            let mut other = rng.below(ctx.plans.len() - 1);
            if other >= index {
                other += 1;
            }
            let other_plan = &ctx.plans[other];
            let page = rng.pick(&other_plan.paths);
            outbound_urls.push(format!("http://{}{}", other_plan.host, page));
        }
    }
    if rng.chance(0.1) {
        let host = &ctx.plans[index].host;
        outbound_urls.push(format!("http://blog.{host}/post-{}.html", rng.below(100)));
    }
    outbound_urls.extend(ctx.extras.outbound.iter().cloned());
    outbound_urls
}

/// One link per outbound URL, and duplicates of some of them: same target and
/// rel, another form and anchor, for later on the page.
fn outbound_links(
    rng: &mut Rng,
    w: &LinkWriter<'_>,
    outbound_urls: &[String],
) -> (Vec<Link>, Vec<Link>) {
    let mut outbound_links = Vec::new();
    for url in outbound_urls {
        let nofollow = rng.chance(0.2);
        let anchor = format!("{} {}", rng.word(), rng.word());
        outbound_links.push(w.outbound(rng, url, nofollow, &anchor));
    }
    let mut duplicates = Vec::new();
    for link in &outbound_links {
        if let Target::Outbound(url) = &link.target {
            if rng.chance(0.25) {
                let anchor = format!("{} again", rng.word());
                duplicates.push(w.outbound(rng, url, link.nofollow, &anchor));
            }
        }
    }
    (outbound_links, duplicates)
}

/// The paragraphs, `inline` dealt among them in turn, with a fake link in a
/// comment after the second one on some pages.
fn push_paragraphs(
    rng: &mut Rng,
    blocks: &mut Vec<Block>,
    inline: Vec<Link>,
    ctx: &PageContext<'_>,
) {
    let (p, index) = (ctx.page_index, ctx.site_index);
    let n_paragraphs = 3 + rng.below(3);
    let mut paragraphs: Vec<Vec<Link>> = vec![Vec::new(); n_paragraphs];
    for (i, link) in inline.into_iter().enumerate() {
        paragraphs[i % n_paragraphs].push(link);
    }
    for (i, links) in paragraphs.into_iter().enumerate() {
        blocks.push(Block::Paragraph(links));
        if i == 1 && (p == 0 || rng.chance(0.3)) {
            blocks.push(Block::Comment(format!(
                "http://fake-comment{index}.example.org/p{p}"
            )));
        }
    }
}

/// The end of the page: related links (the duplicates and a few more), maybe an
/// image map, and the footer with its `mailto:` and `javascript:` links.
fn push_related_map_footer(
    rng: &mut Rng,
    blocks: &mut Vec<Block>,
    w: &LinkWriter<'_>,
    duplicates: Vec<Link>,
) {
    let mut related = duplicates;
    for _ in 0..rng.below(3) {
        let url = external_url(rng);
        let anchor = format!("{} {}", rng.word(), rng.word());
        let nofollow = rng.chance(0.3);
        related.push(w.outbound(rng, &url, nofollow, &anchor));
    }
    if !related.is_empty() {
        blocks.push(Block::Related(related));
    }

    if rng.chance(0.15) {
        let mut areas = Vec::new();
        for _ in 0..1 + rng.below(2) {
            let url = external_url(rng);
            areas.push(w.area(rng, &url));
        }
        blocks.push(Block::Map(areas));
    }

    let mut footer = Vec::new();
    if rng.chance(0.4) {
        footer.push(w.raw(
            rng,
            &format!("mailto:webmaster@{}", w.host),
            Target::Ignored,
            "Write to us",
        ));
    }
    if rng.chance(0.3) {
        footer.push(w.raw(rng, "javascript:void(0)", Target::Ignored, "Print"));
    }
    blocks.push(Block::Footer(footer));
}

/// The robots-forbidden members page: a link home and outbound links that are
/// not in the truth.
fn build_private_page(rng: &mut Rng, index: usize, host: &str, path: String) -> Page {
    let w = LinkWriter {
        host,
        base_path: &path,
    };
    let nav = vec![w.internal(rng, "/", "Home")];
    let mut links = Vec::new();
    for k in 0..3 {
        let url = format!("http://www.private-ext{index}.example.org/secret-{k}.html");
        links.push(w.outbound(rng, &url, false, "secret partner"));
    }
    Page {
        path,
        title: "Members only".into(),
        base: None,
        content_type: "text/html; charset=utf-8",
        text_seed: rng.next_u64(),
        blocks: vec![
            Block::Nav(nav),
            Block::Paragraph(links),
            Block::Footer(Vec::new()),
        ],
    }
}

/// A canonical external URL (already in the form the `url` crate serialises).
fn external_url(rng: &mut Rng) -> String {
    let k = rng.below(EXTERNAL_HOSTS as usize);
    let word = rng.word();
    let n = rng.below(500);
    match rng.below(8) {
        0 => format!("http://www.ext{k}.example.org/"),
        1 => format!("https://www.ext{k}.example.org/"),
        2 => format!("https://www.ext{k}.example.org/search?q={word}&page={n}"),
        3 => format!("http://ext{k}.example.net/{}/Index.HTML", title_case(word)),
        4 => format!(
            "https://news.ext{k}.example.com/20{:02}/{:02}/story-{n}",
            rng.below(25),
            1 + rng.below(12)
        ),
        5 => format!(
            "http://www.ext{k}.example.org:8080/api/v{}",
            1 + rng.below(3)
        ),
        6 => format!("http://www.ext{k}.example.org/files/{word}%20list.html"),
        _ => format!("http://www.ext{k}.example.org/articles/{word}-{n}.html"),
    }
}
