//! The processes of a run, found in /proc under a root: a server's children (nginx's workers
//! under its master) and the CPUs a server runs on, from its threads' affinities.

use crate::cpuset::CpuSet;
use crate::parse;
use qpslab_sys::root::Root;

/// `pids` and every process descending from them, ascending, each once.
pub fn with_descendants(root: &Root, pids: &[u32]) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = root
        .pids()
        .into_iter()
        .filter_map(|pid| {
            let stat = parse::task_stat(&root.read_opt(&format!("proc/{pid}/stat"))?)?;
            Some((pid, stat.ppid))
        })
        .collect();
    let mut all: Vec<u32> = pids.to_vec();
    let mut i = 0;
    while i < all.len() {
        let parent = all[i];
        for &(pid, ppid) in &parents {
            if ppid == parent && !all.contains(&pid) {
                all.push(pid);
            }
        }
        i += 1;
    }
    all.sort_unstable();
    all.dedup();
    all
}

/// The CPUs the threads of `pids` may run on. Threads pinned to fewer CPUs than the machine has
/// online (a server's workers, when its master or main thread is not pinned) decide; when none
/// is pinned, every thread's affinity counts. None when no affinity could be read.
pub fn server_cpus(root: &Root, pids: &[u32], online: &CpuSet) -> Option<CpuSet> {
    let sets: Vec<CpuSet> = pids
        .iter()
        .flat_map(|pid| {
            root.list(&format!("proc/{pid}/task")).into_iter().filter_map(move |tid| {
                parse::cpus_allowed(&root.read_opt(&format!("proc/{pid}/task/{tid}/status"))?)
            })
        })
        .collect();
    let union =
        |sets: &mut dyn Iterator<Item = &CpuSet>| sets.fold(CpuSet::new(), |all, s| all.union(s));
    let pinned = union(&mut sets.iter().filter(|s| s.len() < online.len()));
    let all = union(&mut sets.iter());
    match (pinned.is_empty(), all.is_empty()) {
        (false, _) => Some(pinned),
        (true, false) => Some(all),
        (true, true) => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    fn write(dir: &std::path::Path, rel: &str, text: &str) {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn task(dir: &std::path::Path, pid: u32, tid: u32, ppid: u32, cpus: &str) {
        let stat = format!("{pid} (x) S {ppid} 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 1 0 0\n");
        write(dir, &format!("proc/{pid}/stat"), &stat);
        write(
            dir,
            &format!("proc/{pid}/task/{tid}/status"),
            &format!("Cpus_allowed_list:\t{cpus}\n"),
        );
    }

    #[test]
    fn an_nginx_master_and_its_pinned_workers() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        task(d, 100, 100, 1, "0-3"); // master, not pinned
        task(d, 101, 101, 100, "2"); // workers
        task(d, 102, 102, 100, "3");
        task(d, 200, 200, 1, "0-3"); // unrelated
        let root = Root::new(d);
        let family = with_descendants(&root, &[100]);
        assert_eq!(family, vec![100, 101, 102]);
        let online: CpuSet = (0..4).collect();
        assert_eq!(server_cpus(&root, &family, &online), Some([2, 3].into_iter().collect()));
        // Nothing pinned: the threads' affinity as it is.
        assert_eq!(server_cpus(&root, &[200], &online), Some(online.clone()));
        assert_eq!(server_cpus(&root, &[999], &online), None);
    }

    #[test]
    fn a_server_pinned_with_taskset_or_by_thread() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // qpslab serve --cpus 0: the main thread is free, the worker pinned.
        task(d, 300, 300, 1, "0-1");
        write(d, "proc/300/task/301/status", "Cpus_allowed_list:\t0\n");
        let online: CpuSet = (0..2).collect();
        let root = Root::new(d);
        assert_eq!(server_cpus(&root, &[300], &online), Some([0].into_iter().collect()));
    }
}
