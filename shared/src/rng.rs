//! The one seeded random generator of the grid: SplitMix64 (Steele, Lea and
//! Flood, 2014). Tiny, fast and fixed forever, so a seed means the same
//! synthetic web, the same reference site and the same simulation on every
//! platform and every version of any crate. Never for secrets: keys and
//! tokens come from the operating system's generator (`rand`).

/// The golden-ratio increment of SplitMix64 (also a handy seed mixer).
pub const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// A SplitMix64 generator: its whole state is one `u64`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose state starts at `state` (no mixing: the first
    /// output is [`SplitMix64::step`] of it).
    pub const fn new(state: u64) -> SplitMix64 {
        SplitMix64 { state }
    }

    /// One SplitMix64 step on a bare state: advance it, return the output.
    pub fn step(state: &mut u64) -> u64 {
        *state = state.wrapping_add(GOLDEN_GAMMA);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        Self::step(&mut self.state)
    }

    /// Uniform in `[0, 1)`, from the top 53 bits of the next output.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sequence_is_splitmix64s() {
        // Reference outputs of SplitMix64 from state 0 (Vigna's splitmix64.c).
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(r.next_u64(), 0x06C4_5D18_8009_454F);
        let mut state = 0;
        assert_eq!(SplitMix64::step(&mut state), 0xE220_A839_7B1D_CDAF);
        assert_eq!(state, GOLDEN_GAMMA);
    }

    #[test]
    fn one_seed_one_sequence_and_units_in_range() {
        let (mut a, mut b) = (SplitMix64::new(7), SplitMix64::new(7));
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
            let u = a.unit();
            assert!((0.0..1.0).contains(&u), "{u}");
            b.unit();
        }
        assert_ne!(SplitMix64::new(1).next_u64(), SplitMix64::new(2).next_u64());
    }
}
