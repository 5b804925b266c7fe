//! Splitting the CPUs this process may use between the server and the load generator.

use qpslab_host::{CpuSet, Host};

/// CPUs for each side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    pub server: Vec<usize>,
    pub generator: Vec<usize>,
    /// Both sides share the same CPUs (a single usable CPU).
    pub shared: bool,
}

/// Whole physical cores to each side (SMT siblings stay together, so the two sides never share
/// a core): the first half of the cores to the server, the rest to the generator. With one
/// usable core, the siblings are split; with one CPU, both sides share it.
pub fn split(allowed: &[usize], host: Option<&Host>) -> Split {
    let allowed_set: CpuSet = allowed.iter().copied().collect();
    let mut cores: Vec<Vec<usize>> = Vec::new();
    for &cpu in allowed {
        let siblings = host
            .and_then(|h| h.cpus.iter().find(|c| c.id == cpu))
            .map_or_else(|| CpuSet::from_iter([cpu]), |c| c.siblings.intersection(&allowed_set));
        if siblings.first() == Some(cpu) || siblings.is_empty() {
            cores.push(if siblings.is_empty() { vec![cpu] } else { siblings.iter().collect() });
        }
    }
    if cores.len() == 1 && cores[0].len() > 1 {
        cores = cores[0].iter().map(|&c| vec![c]).collect();
    }
    match cores.len() {
        0 => Split { server: vec![0], generator: vec![0], shared: true },
        1 => Split { server: cores[0].clone(), generator: cores[0].clone(), shared: true },
        n => {
            let half = n / 2;
            Split {
                server: cores[..half].concat(),
                generator: cores[half..].concat(),
                shared: false,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;
    use qpslab_host::Root;
    use qpslab_testkit::Shape;

    #[test]
    fn two_cpus_one_each() {
        assert_eq!(
            split(&[0, 1], None),
            Split { server: vec![0], generator: vec![1], shared: false }
        );
        assert!(split(&[3], None).shared);
    }

    #[test]
    fn smt_siblings_stay_on_one_side() {
        let dir = tempfile::tempdir().unwrap();
        Shape::two_packages_24_queues().write(dir.path()).unwrap();
        let host = Host::read(&Root::new(dir.path())).unwrap();
        let all: Vec<usize> = (0..24).collect();
        let s = split(&all, Some(&host));
        assert_eq!(s.server.len(), 12);
        for cpu in &s.server {
            let sib = host.cpus[*cpu].siblings.iter().collect::<Vec<_>>();
            assert!(sib.iter().all(|c| s.server.contains(c)), "{cpu}: {sib:?} in {:?}", s.server);
        }
        // Only one core's two threads allowed: split the siblings.
        let s = split(&[0, 12], Some(&host));
        assert_eq!((s.server, s.generator, s.shared), (vec![0], vec![12], false));
    }
}
