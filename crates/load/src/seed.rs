//! Seeds: a fresh one for a run that names none, and the generator a seed drives.

/// A seed that differs from run to run (and between processes started at once), short
/// enough to type back.
pub fn fresh_seed() -> u64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    let nanos = now.map_or(0, |d| d.as_nanos() as u64);
    SplitMix(nanos ^ u64::from(std::process::id())).next() >> 16
}

/// SplitMix64: a small, well-mixed generator for a reproducible shuffle.
pub struct SplitMix(pub u64);

impl SplitMix {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}
