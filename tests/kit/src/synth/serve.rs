//! Answers of the synthetic web: an HTTP status, headers and body for a host and
//! path, built from the model. It never generates anything: pages come from
//! `render`, the rest are fixed bodies (a 404, a 500, a PDF, a redirect note).

use super::render::render_page;
use super::{Resource, SynthResponse, SynthWeb};

impl SynthWeb {
    /// Answer a GET for `path_and_query` on `host` (which may carry `:port`).
    /// Unknown hosts and paths get a 404.
    pub fn respond(&self, host: &str, path_and_query: &str) -> SynthResponse {
        let Some(site) = self.site(host) else {
            return not_found();
        };
        if path_and_query == "/robots.txt" {
            return SynthResponse {
                status: 200,
                content_type: "text/plain; charset=utf-8".into(),
                location: None,
                body: site.robots_txt.clone().into_bytes(),
            };
        }
        let Some(resource) = site.paths.get(path_and_query) else {
            return not_found();
        };
        match *resource {
            Resource::Page(p) => html_response(200, site.pages[p].content_type, render_page(site, &site.pages[p])),
            Resource::Private => html_response(200, site.private.content_type, render_page(site, &site.private)),
            Resource::Redirect(r) => {
                let redirect = &site.redirects[r];
                SynthResponse {
                    status: redirect.status,
                    content_type: "text/html; charset=utf-8".into(),
                    location: Some(redirect.location.clone()),
                    body: format!(
                        "<html><body>Moved to <a href=\"{0}\">{0}</a></body></html>\n",
                        redirect.location
                    )
                    .into_bytes(),
                }
            }
            Resource::ServerError => html_response(
                500,
                "text/html; charset=utf-8",
                "<!DOCTYPE html><html><head><title>Error</title></head><body><h1>Internal error</h1>\
                 <p>Try <a href=\"http://fake-500.example.org/status\">the status page</a>.</p></body></html>\n"
                    .into(),
            ),
            Resource::Pdf => SynthResponse {
                status: 200,
                content_type: "application/pdf".into(),
                location: None,
                body: b"%PDF-1.4\n% not HTML: <a href=\"http://fake-pdf.example.org/\">no link</a>\n%%EOF\n"
                    .to_vec(),
            },
        }
    }
}

/// The 404 of unknown hosts and paths (its body links out, not in the truth).
fn not_found() -> SynthResponse {
    html_response(
        404,
        "text/html; charset=utf-8",
        "<!DOCTYPE html><html><head><title>Not found</title></head><body><h1>Not found</h1>\
         <p>See <a href=\"http://fake-404.example.org/help\">help</a>.</p></body></html>\n"
            .into(),
    )
}

/// An HTML answer without `Location`.
fn html_response(status: u16, content_type: &str, body: String) -> SynthResponse {
    SynthResponse {
        status,
        content_type: content_type.into(),
        location: None,
        body: body.into_bytes(),
    }
}
