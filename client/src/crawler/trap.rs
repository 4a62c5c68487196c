//! Crawler-trap rules (pure): URLs whose path shows the shape of an endless
//! space, such as a calendar whose relative "next month" link nests one level
//! deeper on every page (`/cal/2024/01/2024/02/2024/03/…`) or a relative link
//! that repeats a directory forever (`/a/b/a/b/a/b/…`). Like Heritrix's
//! pathological-path and too-many-path-segments rules; the page and depth caps
//! bound what slips through.

use url::Url;

/// Times one path segment may occur in a URL's path; one more is a trap. Real
/// sites repeat a segment (`/docs/v2/docs/`) but hardly ever four times.
pub const MAX_SEGMENT_REPEATS: usize = 3;

/// Path segments a URL may have; more is a trap (real sites stay far below).
pub const MAX_PATH_SEGMENTS: usize = 32;

/// Why a URL looks like a trap.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Trap {
    #[error("path segment {segment:?} occurs more than {MAX_SEGMENT_REPEATS} times")]
    RepeatedSegment { segment: String },
    #[error("path has more than {MAX_PATH_SEGMENTS} segments")]
    TooManySegments,
}

/// Whether `url`'s path looks like a crawler trap. Empty segments (`//`) are
/// ignored; the query is not looked at.
pub fn check(url: &Url) -> Result<(), Trap> {
    let Some(segments) = url.path_segments() else {
        return Ok(());
    };
    // At most MAX_PATH_SEGMENTS + 1 segments are looked at.
    let mut seen: Vec<(&str, usize)> = Vec::new();
    for (count, segment) in segments.filter(|s| !s.is_empty()).enumerate() {
        if count >= MAX_PATH_SEGMENTS {
            return Err(Trap::TooManySegments);
        }
        match seen.iter_mut().find(|(s, _)| *s == segment) {
            Some((_, n)) => {
                *n += 1;
                if *n > MAX_SEGMENT_REPEATS {
                    return Err(Trap::RepeatedSegment {
                        segment: segment.to_string(),
                    });
                }
            }
            None => seen.push((segment, 1)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_str(s: &str) -> Result<(), Trap> {
        check(&Url::parse(s).expect("test URL"))
    }

    #[test]
    fn ordinary_paths_pass() {
        for ok in [
            "http://a.test/",
            "http://a.test/docs/guide/install.html",
            "http://a.test/calendar/2024/05/",
            "http://a.test/x/x/x/",
            "http://a.test/a/b/a/b/a/b/",
            "http://a.test/p?x=/a/a/a/a/a/a",
            "http://a.test////////////////////////////////////////////",
        ] {
            assert_eq!(check_str(ok), Ok(()), "{ok}");
        }
        let deep: String = (0..MAX_PATH_SEGMENTS).map(|i| format!("/s{i}")).collect();
        assert_eq!(check_str(&format!("http://a.test{deep}")), Ok(()));
    }

    #[test]
    fn traps_are_caught() {
        assert_eq!(
            check_str("http://a.test/cal/2024/01/2024/02/2024/03/2024/04/"),
            Err(Trap::RepeatedSegment {
                segment: "2024".into()
            })
        );
        assert!(matches!(
            check_str("http://a.test/a/b/a/b/a/b/a/b/"),
            Err(Trap::RepeatedSegment { .. })
        ));
        assert!(matches!(
            check_str("http://a.test/x/x/x/x"),
            Err(Trap::RepeatedSegment { .. })
        ));
        let deep: String = (0..=MAX_PATH_SEGMENTS).map(|i| format!("/s{i}")).collect();
        assert_eq!(
            check_str(&format!("http://a.test{deep}")),
            Err(Trap::TooManySegments)
        );
    }
}
