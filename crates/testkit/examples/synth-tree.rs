//! Writes a synthetic /proc and /sys tree for rehearsing `qpslab host`, `doctor` and `tune`
//! with `--root DIR` on a machine shape you do not have.
//!
//! cargo run -p qpslab-testkit --example synth-tree -- SHAPE DIR
//! SHAPE: two-nodes (2 NUMA nodes x 16 CPUs with SMT, two NICs of 2 queues), 24-queues
//! (24 CPUs in 2 packages with SMT, one NIC with 24 queues), small (2 CPUs, one virtio queue).

use qpslab_testkit::Shape;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let shape = match args.first().map(String::as_str) {
        Some("two-nodes") => Shape::two_nodes_two_nics(),
        Some("24-queues") => Shape::two_packages_24_queues(),
        Some("small") => Shape::small_virtio(),
        _ => {
            eprintln!("usage: synth-tree two-nodes|24-queues|small DIR");
            return ExitCode::from(2);
        }
    };
    let Some(dir) = args.get(1) else {
        eprintln!("synth-tree: give the directory to write, e.g. /tmp/two-nodes");
        return ExitCode::from(2);
    };
    match shape.write(std::path::Path::new(dir)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("synth-tree: cannot write {dir}: {e}");
            ExitCode::from(1)
        }
    }
}
