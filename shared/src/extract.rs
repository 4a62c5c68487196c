//! Link extraction from HTML (stub: to be written).
use serde::{Deserialize, Serialize};
use url::Url;

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

/// Extract links (stub).
pub fn extract_links(_html: &[u8], _page_url: &Url) -> Vec<ExtractedLink> {
    Vec::new()
}
