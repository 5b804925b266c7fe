//! CPU sets in the kernel's two text forms: cpulists (`0-3,8`) and hex masks.
//!
//! Unit trap: a mask wider than 32 CPUs is printed by the kernel in comma-separated 32-bit
//! groups, most significant group first (`ff,ffffffff` is CPUs 0-39). Every mask in /proc and
//! /sys (smp_affinity, rps_cpus, xps_cpus) uses that form.

use std::collections::BTreeSet;
use std::fmt;

/// A set of CPU numbers.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct CpuSet(BTreeSet<usize>);

/// Text that is neither a cpulist nor a mask.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CpuSetError(String);

impl CpuSet {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses a cpulist such as `0-3,8` (empty text is the empty set).
    pub fn parse_list(text: &str) -> Result<Self, CpuSetError> {
        qpslab_sys::cpus::parse_cpu_list(text.trim())
            .map(|v| v.into_iter().collect())
            .map_err(CpuSetError)
    }

    /// Parses a hex mask in 32-bit groups such as `ff,ffffffff` (`0` and `00000000,00000000`
    /// are empty).
    pub fn parse_mask(text: &str) -> Result<Self, CpuSetError> {
        let text = text.trim();
        let groups: Vec<&str> = text.split(',').collect();
        let mut set = BTreeSet::new();
        for (i, group) in groups.iter().rev().enumerate() {
            if group.is_empty() || group.len() > 8 {
                return Err(CpuSetError(format!(
                    "{text:?} is not a CPU mask (hex in comma-separated 32-bit groups)"
                )));
            }
            let bits = u32::from_str_radix(group, 16).map_err(|_| {
                CpuSetError(format!(
                    "{text:?} is not a CPU mask (hex in comma-separated 32-bit groups)"
                ))
            })?;
            for bit in 0..32 {
                if bits & (1 << bit) != 0 {
                    set.insert(i * 32 + bit);
                }
            }
        }
        Ok(Self(set))
    }

    /// `CPU 3` or `CPUs 0-3,8`, for sentences.
    pub fn named(&self) -> String {
        let word = if self.len() == 1 { "CPU" } else { "CPUs" };
        format!("{word} {}", self.to_list())
    }

    /// The cpulist form, ranges collapsed (`0-3,8`); empty for the empty set.
    pub fn to_list(&self) -> String {
        let mut out = String::new();
        let mut iter = self.0.iter().copied().peekable();
        while let Some(start) = iter.next() {
            let mut end = start;
            while iter.peek() == Some(&(end + 1)) {
                end += 1;
                iter.next();
            }
            if !out.is_empty() {
                out.push(',');
            }
            if end == start {
                out.push_str(&start.to_string());
            } else {
                out.push_str(&format!("{start}-{end}"));
            }
        }
        out
    }

    /// The mask form as the kernel prints it for `nr_cpus` possible CPUs: `ceil(nr_cpus / 4)`
    /// hex digits, in groups of 8 from the right, separated by commas. Wide enough for the
    /// highest CPU in the set even when `nr_cpus` is smaller.
    pub fn to_mask(&self, nr_cpus: usize) -> String {
        let bits = nr_cpus.max(self.0.last().map_or(1, |&c| c + 1)).max(1);
        let digits = bits.div_ceil(4);
        let mut hex = String::with_capacity(digits + digits / 8);
        for d in (0..digits).rev() {
            let nibble =
                (0..4).filter(|b| self.0.contains(&(d * 4 + b))).fold(0u32, |n, b| n | (1 << b));
            hex.push(char::from_digit(nibble, 16).unwrap_or('0'));
            if d % 8 == 0 && d != 0 {
                hex.push(',');
            }
        }
        hex
    }

    /// Adds a CPU.
    pub fn insert(&mut self, cpu: usize) -> bool {
        self.0.insert(cpu)
    }

    /// Whether the set holds `cpu`.
    pub fn contains(&self, cpu: usize) -> bool {
        self.0.contains(&cpu)
    }

    /// Number of CPUs in the set.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The CPUs in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().copied()
    }

    /// The lowest CPU, if any.
    pub fn first(&self) -> Option<usize> {
        self.0.first().copied()
    }

    /// CPUs in either set.
    pub fn union(&self, other: &CpuSet) -> CpuSet {
        Self(self.0.union(&other.0).copied().collect())
    }

    /// CPUs in `self` but not in `other`.
    pub fn difference(&self, other: &CpuSet) -> CpuSet {
        Self(self.0.difference(&other.0).copied().collect())
    }

    /// CPUs in both sets.
    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        Self(self.0.intersection(&other.0).copied().collect())
    }
}

impl FromIterator<usize> for CpuSet {
    fn from_iter<I: IntoIterator<Item = usize>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
    }
}

impl fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuSet({})", self.to_list())
    }
}

impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_list())
    }
}

impl serde::Serialize for CpuSet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_list())
    }
}

/// Read back from its cpulist form.
impl<'de> serde::Deserialize<'de> for CpuSet {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        CpuSet::parse_list(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn masks_wider_than_32_cpus_use_comma_separated_groups() {
        let set = CpuSet::parse_mask("ff,ffffffff").unwrap();
        assert_eq!(set.to_list(), "0-39");
        assert_eq!(set.to_mask(40), "ff,ffffffff");
        assert_eq!(CpuSet::parse_mask("00000001,00000000").unwrap().to_list(), "32");
        assert_eq!(CpuSet::parse_list("32").unwrap().to_mask(64), "00000001,00000000");
        assert_eq!(CpuSet::parse_list("0,33").unwrap().to_mask(48), "0002,00000001");
    }

    #[test]
    fn masks_of_small_machines_print_as_the_kernel_does() {
        // Captured on the 2-CPU machine: smp_affinity "3", rps_cpus "0".
        assert_eq!(CpuSet::parse_mask("3").unwrap().to_list(), "0-1");
        assert_eq!(CpuSet::parse_list("0-1").unwrap().to_mask(2), "3");
        assert!(CpuSet::parse_mask("0").unwrap().is_empty());
        assert_eq!(CpuSet::new().to_mask(2), "0");
        assert_eq!(CpuSet::parse_list("1,3,5-7").unwrap().to_mask(24), "0000ea");
    }

    #[test]
    fn bad_masks_are_errors() {
        assert!(CpuSet::parse_mask("xyz").is_err());
        assert!(CpuSet::parse_mask("123456789").is_err());
        assert!(CpuSet::parse_mask("ff,,ff").is_err());
        assert!(CpuSet::parse_list("3-1").is_err());
    }

    proptest! {
        #[test]
        fn mask_and_list_round_trip(cpus in proptest::collection::btree_set(0usize..200, 0..40)) {
            let set: CpuSet = cpus.iter().copied().collect();
            prop_assert_eq!(CpuSet::parse_mask(&set.to_mask(200)).unwrap(), set.clone());
            prop_assert_eq!(CpuSet::parse_list(&set.to_list()).unwrap(), set);
        }
    }
}
