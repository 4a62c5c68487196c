//! Result validation by adaptive replication (BOINC's, for link graphs).
//! Pure: no I/O, no grid state.
//!
//! Two honest scans of one site differ a little (pages change, a request
//! times out), so results are compared, not matched: the similarity of
//! their sets of (source, target) pairs (Jaccard). Each result is reduced to
//! a sketch, the [`SKETCH_PAIRS`] smallest 64-bit digests of its pairs
//! (bottom-k): the sketch of a union is the bottom-k of the sketches' union,
//! so a scan in several segments is sketched piece by piece, and two
//! sketches estimate the Jaccard similarity of their sets (exactly when both
//! sets have fewer pairs than the sketch holds; otherwise with a standard
//! error of about √(J(1−J)/k), under 0.01 at J = 0.9).
//!
//! A sketch is built with one comparison and a push a digest, compacted by
//! sorting at twice its size (no hash set, no heap); two sketches are compared
//! and merged in one walk, allocating nothing to compare.

use beebot_shared::util::sha256;
use serde::{Deserialize, Serialize};

/// Pair digests a sketch keeps: 8 KiB per result while it waits for its
/// check; Jaccard estimated within ±0.01 (one standard error) near the
/// threshold.
pub const SKETCH_PAIRS: usize = 1024;

/// Two results of one site agree when the Jaccard similarity of their link
/// pairs is at least this. Honest pairs measured on the synthetic web (with
/// and without politeness delay, hostile sites included) agree at 1.0; the
/// threshold leaves room for pages that change between two scans, and a
/// result that fabricates or drops a tenth of its links fails it.
pub const MIN_SIMILARITY: f64 = 0.9;

/// Complete results of one job compared before it is given up as
/// inconclusive (the first, its check, a third copy on disagreement, one more).
pub const MAX_RESULTS_PER_JOB: usize = 4;

/// Consecutive valid results after which a host is trusted (BOINC's
/// adaptive replication uses about ten).
pub const DEFAULT_TRUST_AFTER: u32 = 10;

/// Slots a host not trusted yet is taken to have at most, whatever its
/// benchmark claims, before it delivered anything: what it may hold is
/// bounded by this (a new desktop still scans several sites at once), and
/// grows by one slot for each result of it kept ([`untrusted_slots`]).
pub const UNTRUSTED_MAX_SLOTS: u32 = 4;

/// Slots a host not trusted yet may count: [`UNTRUSTED_MAX_SLOTS`] and one
/// more for each of its results kept (`jobs_done`), less one for each unit
/// it let pass its deadline or gave back (`lapsed`), as BOINC's quota of a
/// new host grows with the work it returns and shrinks with what it drops:
/// a desktop that keeps its sites coming back is never held below its pace
/// for lack of units, and one that hoards and lets them lapse earns
/// nothing from its past. A host with a result found invalid counts
/// [`UNTRUSTED_MAX_SLOTS`] until it is trusted again.
pub fn untrusted_slots(jobs_done: u64, lapsed: u64, invalid_results: u64) -> u32 {
    if invalid_results > 0 {
        return UNTRUSTED_MAX_SLOTS;
    }
    let earned = jobs_done.saturating_sub(lapsed);
    UNTRUSTED_MAX_SLOTS.saturating_add(u32::try_from(earned).unwrap_or(u32::MAX))
}

/// Share of a trusted host's results still checked (spot checks), percent.
pub const DEFAULT_SPOT_CHECK_PERCENT: u32 = 5;

/// Highest spot-check share an admin may set, percent (100: check everything).
pub const MAX_SPOT_CHECK_PERCENT: u32 = 100;

/// How a round validates its results.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ValidateMode {
    /// Every result is taken as it comes.
    Off,
    /// A result of an untrusted host is checked by another host's scan; a
    /// trusted host's only at random (spot checks).
    #[default]
    Adaptive,
    /// Every result is checked.
    All,
}

impl ValidateMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ValidateMode::Off => "off",
            ValidateMode::Adaptive => "adaptive",
            ValidateMode::All => "all",
        }
    }
}

/// The digest of one link pair (the export's key of a pair too).
pub fn pair_digest(source: &str, target: &str) -> u64 {
    // SHA-256 of `source`, a newline and `target`, fed in parts (no copy).
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(source.as_bytes());
    h.update(b"\n");
    h.update(target.as_bytes());
    let key: [u8; 32] = h.finalize().into();
    u64::from_le_bytes([
        key[0], key[1], key[2], key[3], key[4], key[5], key[6], key[7],
    ])
}

/// A result's sketch as it is built: the digests that may still be among
/// the smallest, unsorted, repeats included, compacted (sorted, repeats
/// dropped, cut to [`SKETCH_PAIRS`]) whenever twice that many have
/// gathered. Once the sketch is full, a digest at or past its largest is
/// passed over with one comparison. No hash set and no heap: a digest
/// costs a comparison and a push, and a median result (a few hundred
/// pairs) one sort at the end.
#[derive(Clone, Debug, Default)]
pub struct SketchBuilder {
    /// At most `2 × SKETCH_PAIRS` digests.
    kept: Vec<u64>,
    /// The largest digest of a full sketch (after a compaction): no digest
    /// at or past it can enter.
    bound: Option<u64>,
}

impl SketchBuilder {
    pub fn add(&mut self, digest: u64) {
        if self.bound.is_some_and(|b| digest >= b) {
            return;
        }
        self.kept.push(digest);
        if self.kept.len() >= 2 * SKETCH_PAIRS {
            self.compact();
        }
    }

    /// Sort, drop repeats, keep the smallest [`SKETCH_PAIRS`].
    fn compact(&mut self) {
        self.kept.sort_unstable();
        self.kept.dedup();
        self.kept.truncate(SKETCH_PAIRS);
        if self.kept.len() == SKETCH_PAIRS {
            self.bound = self.kept.last().copied();
        }
    }

    /// The sketch: sorted, distinct, at most [`SKETCH_PAIRS`].
    pub fn finish(mut self) -> Vec<u64> {
        self.compact();
        self.kept.shrink_to_fit();
        self.kept
    }
}

/// The sketch of the union of two results' pairs.
pub fn merge(a: &[u64], b: &[u64]) -> Vec<u64> {
    let (a, b) = (sorted(a), sorted(b));
    let mut v = Vec::with_capacity((a.len() + b.len()).min(SKETCH_PAIRS));
    union_walk(&a, &b, |d, _| v.push(d));
    v
}

/// Estimated Jaccard similarity of the two sets sketched (1.0 for two empty
/// results: a site with no links scanned twice agrees with itself): of the
/// union's sketch, the share of digests in both.
pub fn similarity(a: &[u64], b: &[u64]) -> f64 {
    let (a, b) = (sorted(a), sorted(b));
    let (mut union, mut both) = (0usize, 0usize);
    union_walk(&a, &b, |_, in_both| {
        union += 1;
        both += usize::from(in_both);
    });
    if union == 0 {
        return 1.0;
    }
    both as f64 / union as f64
}

/// `s` sorted with repeats dropped, borrowed when it is already (every
/// sketch this module makes is).
fn sorted(s: &[u64]) -> std::borrow::Cow<'_, [u64]> {
    if s.windows(2).all(|w| w[0] < w[1]) {
        std::borrow::Cow::Borrowed(s)
    } else {
        let mut v = s.to_vec();
        v.sort_unstable();
        v.dedup();
        std::borrow::Cow::Owned(v)
    }
}

/// The smallest [`SKETCH_PAIRS`] digests of the union of `a` and `b` (both
/// sorted, distinct) in order, each with whether both hold it: one walk,
/// nothing allocated.
fn union_walk(a: &[u64], b: &[u64], mut f: impl FnMut(u64, bool)) {
    let (mut i, mut j) = (0, 0);
    for _ in 0..SKETCH_PAIRS {
        match (a.get(i), b.get(j)) {
            (Some(&x), Some(&y)) if x == y => {
                f(x, true);
                i += 1;
                j += 1;
            }
            (Some(&x), Some(&y)) if x < y => {
                f(x, false);
                i += 1;
            }
            (_, Some(&y)) => {
                f(y, false);
                j += 1;
            }
            (Some(&x), None) => {
                f(x, false);
                i += 1;
            }
            (None, None) => return,
        }
    }
}

/// Whether a trusted host's result is spot-checked: a share of
/// `percent` of results, drawn from a secret (the project key) so that a
/// host cannot tell in advance which of its results will be checked.
pub fn spot_check(secret: &[u8; 32], job_id: u64, unit_id: u64, percent: u32) -> bool {
    let mut msg = Vec::with_capacity(48);
    msg.extend_from_slice(secret);
    msg.extend_from_slice(&job_id.to_le_bytes());
    msg.extend_from_slice(&unit_id.to_le_bytes());
    let h = sha256(&msg);
    let draw = u64::from_le_bytes([h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]]) % 100;
    draw < u64::from(percent.min(MAX_SPOT_CHECK_PERCENT))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sketch_of(pairs: impl IntoIterator<Item = u64>) -> Vec<u64> {
        let mut b = SketchBuilder::default();
        for p in pairs {
            b.add(p);
        }
        b.finish()
    }

    fn digests(range: std::ops::Range<u32>) -> Vec<u64> {
        range
            .map(|i| pair_digest(&format!("http://a.test/{i}"), "http://a.test/"))
            .collect()
    }

    #[test]
    fn small_results_are_compared_exactly() {
        let a = sketch_of(digests(0..100));
        let b = sketch_of(digests(10..100));
        assert_eq!(similarity(&a, &a), 1.0);
        assert!((similarity(&a, &b) - 0.9).abs() < 1e-12);
        assert_eq!(similarity(&a, &sketch_of(digests(100..200))), 0.0);
        assert_eq!(similarity(&[], &[]), 1.0);
        assert_eq!(similarity(&a, &[]), 0.0);
    }

    #[test]
    fn large_results_are_estimated_closely() {
        // 20 000 pairs against the same with 10% dropped and 5% fabricated.
        let a = sketch_of(digests(0..20_000));
        let b = sketch_of(digests(2_000..21_000));
        let exact = 18_000.0 / 21_000.0;
        let est = similarity(&a, &b);
        assert!(
            (est - exact).abs() < 0.04,
            "estimate {est} vs exact {exact}"
        );
        assert_eq!(a.len(), SKETCH_PAIRS);
    }

    #[test]
    fn a_union_sketched_in_pieces_equals_the_whole() {
        let whole = sketch_of(digests(0..5_000));
        let pieces = merge(
            &sketch_of(digests(0..3_000)),
            &sketch_of(digests(2_000..5_000)),
        );
        assert_eq!(whole, pieces);
    }

    #[test]
    fn spot_checks_take_about_their_share() {
        let secret = [7u8; 32];
        let n = (0..10_000)
            .filter(|i| spot_check(&secret, *i, i + 1, 5))
            .count();
        assert!((350..650).contains(&n), "{n} of 10000 checked at 5%");
        assert!((0..1000).all(|i| !spot_check(&secret, i, i, 0)));
        assert!((0..1000).all(|i| spot_check(&secret, i, i, 100)));
        assert!((0..1000).all(|i| spot_check(&secret, i, i, 1000)));
    }

    #[test]
    fn a_modes_name_is_the_same_for_the_command_line_the_api_and_the_page() {
        use clap::ValueEnum;
        for m in [ValidateMode::Off, ValidateMode::Adaptive, ValidateMode::All] {
            assert_eq!(ValidateMode::from_str(m.as_str(), false), Ok(m));
            assert_eq!(
                serde_json::to_string(&m).unwrap(),
                format!("\"{}\"", m.as_str())
            );
        }
        assert!(ValidateMode::from_str("sometimes", false).is_err());
    }

    /// What `merge` and `similarity` answer, as first written (on sets
    /// sorted and distinct, as every sketch is): the union sorted whole,
    /// then each digest looked up in both.
    fn merge_by_sorting(a: &[u64], b: &[u64]) -> Vec<u64> {
        let mut v: Vec<u64> = a.iter().chain(b).copied().collect();
        v.sort_unstable();
        v.dedup();
        v.truncate(SKETCH_PAIRS);
        v
    }

    fn similarity_by_sorting(a: &[u64], b: &[u64]) -> f64 {
        let (a, b) = (merge_by_sorting(a, &[]), merge_by_sorting(b, &[]));
        let union = merge_by_sorting(&a, &b);
        if union.is_empty() {
            return 1.0;
        }
        let both = union
            .iter()
            .filter(|d| a.binary_search(d).is_ok() && b.binary_search(d).is_ok())
            .count();
        both as f64 / union.len() as f64
    }

    proptest! {
        /// The one-walk union answers what sorting the whole union does,
        /// for sketches (sorted, distinct, up to full) and for sets given
        /// in any order with repeats.
        #[test]
        fn the_walk_answers_what_sorting_the_union_does(
            a in proptest::collection::vec(0u64..3_000, 0..2_500),
            b in proptest::collection::vec(0u64..3_000, 0..2_500),
        ) {
            let (sa, sb) = (sketch_of(a.clone()), sketch_of(b.clone()));
            prop_assert_eq!(merge(&sa, &sb), merge_by_sorting(&sa, &sb));
            prop_assert_eq!(similarity(&sa, &sb), similarity_by_sorting(&sa, &sb));
            prop_assert_eq!(merge(&a, &b), merge_by_sorting(&a, &b));
            prop_assert_eq!(similarity(&a, &b), similarity_by_sorting(&a, &b));
        }

        /// However many digests pass through (several compactions, the
        /// bound set early or late), the sketch is the smallest distinct ones.
        #[test]
        fn a_sketch_of_many_digests_is_the_smallest_distinct(
            a in proptest::collection::vec(any::<u64>(), 0..10_000),
            repeats in 0usize..3,
        ) {
            let mut all = a.clone();
            for _ in 0..repeats {
                all.extend(a.iter().rev());
            }
            prop_assert_eq!(sketch_of(all), merge_by_sorting(&a, &[]));
        }

        #[test]
        fn similarity_is_symmetric_and_bounded(
            a in proptest::collection::vec(any::<u64>(), 0..300),
            b in proptest::collection::vec(any::<u64>(), 0..300),
        ) {
            let (sa, sb) = (sketch_of(a), sketch_of(b));
            let s = similarity(&sa, &sb);
            prop_assert!((0.0..=1.0).contains(&s));
            prop_assert_eq!(s, similarity(&sb, &sa));
        }

        /// The sketch is the smallest distinct digests, whatever their
        /// order and repeats (few values, so repeats past the sketch's
        /// size are common).
        #[test]
        fn a_sketch_is_the_smallest_distinct_digests(
            a in proptest::collection::vec(0u64..2_000, 0..3_000),
        ) {
            let mut want = a.clone();
            want.sort_unstable();
            want.dedup();
            want.truncate(SKETCH_PAIRS);
            prop_assert_eq!(sketch_of(a), want);
        }
    }
}
