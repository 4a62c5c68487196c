//! The truth of the synthetic web: the records a correct crawl exports, found by
//! walking the model breadth-first from `/` the way the crawler would (robots.txt
//! obeyed, redirects followed, first anchor of a target wins). It never parses
//! the rendered HTML, so it checks the extractor and the crawler independently.

use std::collections::{HashSet, VecDeque};

use super::{Block, Link, LinkRecord, LinkTag, Page, Resource, Site, Target};

/// What a complete crawl of a site yields, computed on the model.
pub(super) struct SimulatedCrawl {
    pub(super) records: Vec<LinkRecord>,
    pub(super) urls_requested: usize,
}

/// Breadth-first over the model from `/`, obeying robots.txt, following
/// redirects, one record per distinct (source, target), first anchor wins.
pub(super) fn simulate_crawl(site: &Site) -> SimulatedCrawl {
    let origin = format!("http://{}", site.host);
    let mut seen: HashSet<String> = HashSet::new();
    let mut queue: VecDeque<String> = VecDeque::new();
    let mut records = Vec::new();
    let mut urls_requested = 0usize;
    let home = format!("{origin}/");
    seen.insert(home.clone());
    queue.push_back(home);
    // Every URL enters the queue once and the site is finite, so this ends.
    while let Some(url) = queue.pop_front() {
        let Some(path) = url.strip_prefix(&origin) else {
            continue;
        };
        if path.starts_with("/private/") {
            continue; // robots.txt: never requested
        }
        let mut path = path.to_string();
        let mut url = url.clone();
        let mut chain: Vec<String> = Vec::new();
        // Redirect chains in the model are at most two hops long.
        loop {
            urls_requested += 1;
            chain.push(url.clone());
            match site.paths.get(&path) {
                Some(Resource::Page(p)) => {
                    emit_page(&site.pages[*p], &url, &mut seen, &mut queue, &mut records);
                    break;
                }
                Some(Resource::Redirect(r)) => match &site.redirects[*r].target {
                    Target::Outbound(target) => {
                        records.push(LinkRecord {
                            source_url: url.clone(),
                            target_url: target.clone(),
                            tag: LinkTag::Redirect,
                            nofollow: false,
                            anchor_text: String::new(),
                        });
                        break;
                    }
                    Target::InScope(next) => {
                        if chain.contains(next) || !seen.insert(next.clone()) {
                            break; // loop, or already fetched or queued
                        }
                        let Some(next_path) = next.strip_prefix(&origin) else {
                            break;
                        };
                        path = next_path.to_string();
                        url = next.clone();
                    }
                    Target::Ignored => break,
                },
                _ => break,
            }
        }
    }
    records.sort_by(|a, b| (&a.source_url, &a.target_url).cmp(&(&b.source_url, &b.target_url)));
    SimulatedCrawl {
        records,
        urls_requested,
    }
}

/// The links of one page, in document order.
pub(super) fn page_links(page: &Page) -> impl Iterator<Item = &Link> {
    page.blocks.iter().flat_map(|b| match b {
        Block::Nav(l)
        | Block::Paragraph(l)
        | Block::Related(l)
        | Block::Map(l)
        | Block::Footer(l) => l.as_slice(),
        Block::Script(_) | Block::Comment(_) => &[],
    })
}

/// Queue the in-scope links of `page` (fetched as `source`) not seen yet and
/// record its outbound links, one record per target.
fn emit_page(
    page: &Page,
    source: &str,
    seen: &mut HashSet<String>,
    queue: &mut VecDeque<String>,
    records: &mut Vec<LinkRecord>,
) {
    let mut targets: HashSet<&str> = HashSet::new();
    for link in page_links(page) {
        match &link.target {
            Target::InScope(url) => {
                if seen.insert(url.clone()) {
                    queue.push_back(url.clone());
                }
            }
            Target::Outbound(url) => {
                if targets.insert(url.as_str()) {
                    records.push(LinkRecord {
                        source_url: source.to_string(),
                        target_url: url.clone(),
                        tag: link.tag,
                        nofollow: link.nofollow,
                        anchor_text: link.anchor.clone(),
                    });
                }
            }
            Target::Ignored => {}
        }
    }
}
