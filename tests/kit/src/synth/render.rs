//! Rendering: one page of the model as the HTML a site serves. The filler text
//! comes from the page's own [`Rng`] seeded by `Page::text_seed`, so a page
//! renders to the same bytes every time and nothing but the model is stored.
//! Links appear exactly as their `markup`; it never adds a link of its own
//! outside fake ones (script, comment, `<a name>`) the truth leaves out.

use super::{Block, Link, Page, Rng, Site};

/// The HTML of `page`, a page of `site`, exactly as served.
pub(super) fn render_page(site: &Site, page: &Page) -> String {
    let mut rng = Rng::new(page.text_seed);
    let mut out = String::with_capacity(6 * 1024);
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str(&format!("<title>{} | {}</title>\n", page.title, site.host));
    if let Some(base) = &page.base {
        out.push_str(&format!("<base href=\"{base}\">\n"));
    }
    out.push_str(
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <link rel=\"stylesheet\" href=\"https://cdn.ext-static.example.net/style.css\">\n\
         <style>body { font-family: sans-serif; max-width: 50em } nav a { margin: 0 .5em }</style>\n\
         </head>\n<body>\n",
    );
    for (b, block) in page.blocks.iter().enumerate() {
        render_block(&mut out, &mut rng, site, page, b, block);
    }
    out.push_str("</body>\n</html>\n");
    out
}

/// Block `b` of `page`, appended to `out`; paragraphs draw their filler from `rng`.
fn render_block(
    out: &mut String,
    rng: &mut Rng,
    site: &Site,
    page: &Page,
    b: usize,
    block: &Block,
) {
    match block {
        Block::Nav(links) => {
            out.push_str("<header><nav class=\"menu\">\n");
            for link in links {
                out.push_str(&link.markup);
                out.push('\n');
            }
            out.push_str(&format!(
                "</nav></header>\n<main>\n<h1>{}</h1>\n",
                page.title
            ));
        }
        Block::Paragraph(links) => render_paragraph(out, rng, b, links),
        Block::Related(links) => {
            out.push_str("<h2>Related</h2>\n<ul class=\"related\">\n");
            for link in links {
                out.push_str(&format!("  <li>{}</li>\n", link.markup));
            }
            out.push_str("</ul>\n");
        }
        Block::Map(links) => {
            out.push_str(&format!(
                "<img src=\"/static/map-{b}.png\" usemap=\"#map{b}\" alt=\"map\">\n<map name=\"map{b}\">\n"
            ));
            for link in links {
                out.push_str(&link.markup);
                out.push('\n');
            }
            out.push_str("</map>\n");
        }
        Block::Script(url) => {
            out.push_str(&format!(
                "<script>\n  var promo = '<a href=\"{url}\">promo</a>';\n  if (1 < 2 && promo) {{ document.title += ''; }}\n</script>\n"
            ));
        }
        Block::Comment(url) => {
            out.push_str(&format!("<!-- old menu: <a href=\"{url}\">gone</a> -->\n"));
        }
        Block::Footer(links) => {
            out.push_str("</main>\n<footer>\n<p>&copy; ");
            out.push_str(&site.host);
            out.push_str(" &middot; <img src=\"/static/logo.png\" alt=\"logo\">");
            for link in links {
                out.push(' ');
                out.push_str(&link.markup);
            }
            out.push_str("</p>\n</footer>\n");
        }
    }
}

/// A paragraph of filler words with `links` spread evenly through it (block `b`
/// names its fake `<a name>` anchors).
fn render_paragraph(out: &mut String, rng: &mut Rng, b: usize, links: &[Link]) {
    out.push_str("<p>");
    let words = 40 + rng.below(60);
    let gap = words / (links.len() + 1);
    let mut next_link = 0;
    for i in 0..words {
        if i > 0 {
            out.push(' ');
        }
        if gap > 0 && i > 0 && i % gap == 0 && next_link < links.len() {
            out.push_str(&links[next_link].markup);
            out.push(' ');
            next_link += 1;
        }
        out.push_str(rng.word());
        if rng.chance(0.02) {
            out.push_str(" R&amp;D");
        }
        if rng.chance(0.02) {
            out.push_str(&format!(" <a name=\"n{b}-{i}\">here</a>"));
        }
    }
    for link in &links[next_link..] {
        out.push(' ');
        out.push_str(&link.markup);
    }
    out.push_str(".</p>\n");
}
