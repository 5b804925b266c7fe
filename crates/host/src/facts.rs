//! Provenance facts about a machine for run reports that /proc tells: the CPU model. (The
//! kernel release and CPU count come from `qpslab_sys::system`.)

use qpslab_sys::root::Root;

/// The first `model name` of /proc/cpuinfo under `root`; empty when absent.
pub fn cpu_model(root: &Root) -> String {
    root.read_opt("proc/cpuinfo")
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .and_then(|v| v.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    #[test]
    fn cpu_model_from_a_captured_cpuinfo() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("proc")).unwrap();
        std::fs::write(
            dir.path().join("proc/cpuinfo"),
            "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13\n",
        )
        .unwrap();
        assert_eq!(cpu_model(&Root::new(dir.path())), "AMD EPYC 7B13");
        assert_eq!(cpu_model(&Root::new("/nonexistent")), "");
    }
}
