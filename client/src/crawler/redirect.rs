//! Redirect decisions of the crawler, as a pure function: follow inside the
//! scope (at most [`MAX_REDIRECTS`] hops, loops detected), record a redirect that
//! leaves the scope as an outbound link, refuse anything else.

use beebot_shared::limits::MAX_URL_LEN;
use beebot_shared::scope::{canonical_url, SiteScope};
use url::Url;

/// Redirect hops followed for one page before giving up (as browsers and
/// Googlebot do, a handful is enough for every real site).
pub const MAX_REDIRECTS: usize = 5;

/// What to do with one redirect response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RedirectStep {
    /// Request this in-scope URL next (canonical).
    Follow(Url),
    /// The redirect leaves the scope: an outbound link from the URL that redirected.
    Outbound(Url),
    /// The redirect cannot be followed.
    Fail(RedirectError),
}

/// Why a redirect was not followed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RedirectError {
    #[error("redirect to an unparsable location {0:?}")]
    BadLocation(String),
    #[error("redirect to a URL longer than the limit")]
    TooLong,
    #[error("redirect to a non-HTTP URL {0}")]
    UnsupportedScheme(String),
    #[error("redirect loop back to {0}")]
    Loop(String),
    #[error("more than {MAX_REDIRECTS} redirects")]
    TooMany,
}

/// Decide what the redirect from `current` to `location` means. `chain` holds
/// every URL requested for this page so far, `current` last.
pub fn next_step(current: &Url, location: &str, chain: &[Url], scope: &SiteScope) -> RedirectStep {
    let target = match current.join(location.trim()) {
        Ok(url) => canonical_url(&url),
        Err(_) => return RedirectStep::Fail(RedirectError::BadLocation(truncated(location))),
    };
    if target.as_str().len() > MAX_URL_LEN {
        return RedirectStep::Fail(RedirectError::TooLong);
    }
    if !matches!(target.scheme(), "http" | "https") {
        return RedirectStep::Fail(RedirectError::UnsupportedScheme(
            target.scheme().to_string(),
        ));
    }
    if !scope.contains(&target) {
        return RedirectStep::Outbound(target);
    }
    if chain.contains(&target) {
        return RedirectStep::Fail(RedirectError::Loop(target.to_string()));
    }
    if chain.len() > MAX_REDIRECTS {
        return RedirectStep::Fail(RedirectError::TooMany);
    }
    RedirectStep::Follow(target)
}

/// Whether a status is a redirect that carries a `Location` to follow.
pub fn is_redirect(status: u16) -> bool {
    matches!(status, 301 | 302 | 303 | 307 | 308)
}

fn truncated(s: &str) -> String {
    s.chars().take(200).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use beebot_shared::scope::Scope;

    fn url(s: &str) -> Url {
        Url::parse(s).expect("test URL")
    }

    #[test]
    fn follows_inside_scope_and_records_outside() {
        let scope = SiteScope::new("a.test", Scope::Host);
        let here = url("http://a.test/old");
        let chain = [here.clone()];
        assert_eq!(
            next_step(&here, "/new#top", &chain, &scope),
            RedirectStep::Follow(url("http://a.test/new"))
        );
        assert_eq!(
            next_step(&here, "HTTP://B.TEST/x#y", &chain, &scope),
            RedirectStep::Outbound(url("http://b.test/x"))
        );
        assert_eq!(
            next_step(&here, " https://a.test/secure ", &chain, &scope),
            RedirectStep::Follow(url("https://a.test/secure"))
        );
    }

    #[test]
    fn detects_loops_and_long_chains() {
        let scope = SiteScope::new("a.test", Scope::Host);
        let a = url("http://a.test/a");
        let b = url("http://a.test/b");
        let chain = [a.clone(), b.clone()];
        assert!(matches!(
            next_step(&b, "/a", &chain, &scope),
            RedirectStep::Fail(RedirectError::Loop(_))
        ));
        assert!(matches!(
            next_step(&a, "/a#again", std::slice::from_ref(&a), &scope),
            RedirectStep::Fail(RedirectError::Loop(_))
        ));
        let chain: Vec<Url> = (0..=MAX_REDIRECTS)
            .map(|i| url(&format!("http://a.test/{i}")))
            .collect();
        let last = chain[MAX_REDIRECTS].clone();
        assert_eq!(
            next_step(&last, "/next", &chain, &scope),
            RedirectStep::Fail(RedirectError::TooMany)
        );
        // One hop fewer is still followed.
        assert!(matches!(
            next_step(&last, "/next", &chain[..MAX_REDIRECTS], &scope),
            RedirectStep::Follow(_)
        ));
    }

    #[test]
    fn refuses_odd_locations() {
        let scope = SiteScope::new("a.test", Scope::Host);
        let here = url("http://a.test/");
        let chain = [here.clone()];
        assert!(matches!(
            next_step(&here, "http://[::1", &chain, &scope),
            RedirectStep::Fail(RedirectError::BadLocation(_))
        ));
        assert!(matches!(
            next_step(&here, "ftp://a.test/file", &chain, &scope),
            RedirectStep::Fail(RedirectError::UnsupportedScheme(_))
        ));
        let long = format!("/{}", "x".repeat(MAX_URL_LEN));
        assert_eq!(
            next_step(&here, &long, &chain, &scope),
            RedirectStep::Fail(RedirectError::TooLong)
        );
    }

    #[test]
    fn redirect_statuses() {
        for s in [301, 302, 303, 307, 308] {
            assert!(is_redirect(s));
        }
        for s in [200, 300, 304, 305, 404] {
            assert!(!is_redirect(s));
        }
    }
}
