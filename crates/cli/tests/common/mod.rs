//! Helpers shared by the CLI test binaries: a `qpslab serve` child process, and a network
//! namespace with a veth pair (a second host on one machine).

#![allow(dead_code, reason = "each test binary uses a subset")]

use std::io::Read;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The runs store the tests' `qpslab` writes to (bench stores every run): under the build's
/// own scratch directory, never the user's.
pub const TEST_STORE: &str = concat!(env!("CARGO_TARGET_TMPDIR"), "/cli-runs.sqlite");

/// A command's stdout as one JSON document; on anything else, a panic with both outputs.
pub fn json_of(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: stdout {} stderr {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// When `QPSLAB_GT_SHOW` names a directory (`scripts/doctor-kinds`): writes the doctor's
/// findings of `v` (a bench's or a doctor's JSON) as the doctor prints them, to
/// `DIR/TEST.txt`, the first run of each test only: the real output the kinds table points to.
pub fn show(v: &serde_json::Value) {
    let Some(dir) = std::env::var_os("QPSLAB_GT_SHOW") else { return };
    let Some(test) =
        std::thread::current().name().map(|n| n.rsplit("::").next().unwrap_or(n).to_string())
    else {
        return;
    };
    let path = std::path::Path::new(&dir).join(format!("{test}.txt"));
    if path.exists() {
        return;
    }
    let f = if v["doctor"].is_object() { &v["doctor"]["findings"] } else { &v["findings"] };
    let mut text = String::new();
    for x in f.as_array().into_iter().flatten() {
        let s = |k: &str| x[k].as_str().unwrap_or_default().to_string();
        text += &format!(
            "[{}] {}: {}
",
            s("severity"),
            s("name"),
            s("summary")
        );
        for e in x["evidence"].as_array().into_iter().flatten() {
            text += &format!(
                "    evidence: {}
",
                e.as_str().unwrap_or_default()
            );
        }
        text += &format!(
            "    remedy:   {}
",
            s("remedy")
        );
    }
    let _ = std::fs::write(path, text);
}

/// `qpslab` with the tests' runs store.
pub fn qpslab_command() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_qpslab"));
    c.env("QPSLAB_STORE", TEST_STORE);
    c
}

/// A `qpslab serve` child on a free port; killed on drop if still running. It says where it
/// listens on its readiness descriptor (`--ready-fd`), as a supervisor would read it.
pub struct ServeChild {
    pub child: std::process::Child,
    pub addr: String,
    /// What serve printed on stderr before it was ready.
    pub startup: String,
    stderr: std::process::ChildStderr,
}

impl ServeChild {
    #[allow(
        clippy::zombie_processes,
        reason = "the child is owned by ServeChild, whose Drop waits"
    )]
    pub fn start(wrapper: &[&str], args: &[&str]) -> Self {
        use std::io::BufRead;
        use std::os::fd::AsRawFd;
        let bin = env!("CARGO_BIN_EXE_qpslab");
        let (program, pre): (&str, Vec<&str>) = match wrapper.split_first() {
            Some((p, rest)) => (p, rest.iter().copied().chain([bin]).collect()),
            None => (bin, Vec::new()),
        };
        // A free port unless the caller names the address.
        let listen: &[&str] = if args.contains(&"-l") { &[] } else { &["-l", "127.0.0.1:0"] };
        let (ready, writer) = std::io::pipe().unwrap();
        qpslab_sys::fd::inheritable(&writer).unwrap();
        let mut child = Command::new(program)
            .args(pre)
            .arg("serve")
            .args(listen)
            .args(["--ready-fd", &writer.as_raw_fd().to_string()])
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn qpslab serve");
        drop(writer);
        let mut stderr = child.stderr.take().unwrap();
        let mut line = String::new();
        let _ = std::io::BufReader::new(ready).read_line(&mut line);
        // serve wrote its startup lines before the readiness line: they are in the pipe now.
        let startup = read_available(&mut stderr);
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("serve exited before it was ready: {startup}");
        };
        assert_eq!(v["pid"], child.id(), "{line}");
        let addr = v["listen"][0].as_str().unwrap().to_string();
        Self { child, addr, startup, stderr }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill() on the PID of our own child.
        unsafe { libc::kill(self.child.id() as libc::pid_t, sig) };
    }

    /// Waits for exit (at most `limit`); returns the exit code, stdout and the rest of stderr.
    pub fn wait(mut self, limit: Duration) -> (Option<i32>, String, String) {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let mut out = String::new();
                self.child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
                let mut err = String::new();
                let _ = self.stderr.read_to_string(&mut err);
                return (status.code(), out, err);
            }
            assert!(started.elapsed() < limit, "serve did not exit within {limit:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// What is in `stderr`'s pipe now, without waiting for more.
fn read_available(stderr: &mut std::process::ChildStderr) -> String {
    use std::os::fd::AsRawFd;
    let fd = stderr.as_raw_fd();
    // SAFETY: F_GETFL/F_SETFL on a pipe this process owns.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) };
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = stderr.read(&mut buf) {
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    // SAFETY: as above.
    unsafe { libc::fcntl(fd, libc::F_SETFL, flags) };
    String::from_utf8_lossy(&got).into_owned()
}

impl Drop for ServeChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A network namespace with one end of a veth pair, removed on drop.
pub struct Netns {
    pub name: String,
    pub host_end: String,
    pub ns_end: String,
}

impl Netns {
    /// `what` tells this test's namespace from another test's (at most 4 characters).
    pub fn create(what: &str) -> Netns {
        let id = std::process::id() % 100_000;
        let tag = &what[..what.len().min(4)];
        let n = Netns {
            name: format!("qpslab-{what}-{id}"),
            host_end: format!("q{tag}{id}h"),
            ns_end: format!("q{tag}{id}n"),
        };
        let ns_end = n.ns_end.clone();
        let ip = |args: &[&str]| {
            let out = Command::new("ip").args(args).output().expect("ip (iproute2)");
            assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        ip(&["netns", "add", &n.name]);
        ip(&[
            "link",
            "add",
            &n.host_end,
            "type",
            "veth",
            "peer",
            "name",
            &ns_end,
            "netns",
            &n.name,
        ]);
        ip(&["-n", &n.name, "link", "set", &ns_end, "up"]);
        ip(&["link", "set", &n.host_end, "up"]);
        n
    }

    pub fn exec(&self, args: &[&str]) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.name, env!("CARGO_BIN_EXE_qpslab")])
            .env("QPSLAB_STORE", TEST_STORE)
            .args(args)
            .output()
            .unwrap()
    }

    pub fn read(&self, path: &str) -> String {
        let out =
            Command::new("ip").args(["netns", "exec", &self.name, "cat", path]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Netns {
    /// Gives the host's end `host/30` and the namespace's end the next address, and brings up
    /// the namespace's loopback: a second host on its own link.
    pub fn address(&self, host: &str, ns: &str) {
        let ip = |args: &[&str]| {
            let out = Command::new("ip").args(args).output().expect("ip (iproute2)");
            assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        ip(&["addr", "add", &format!("{host}/30"), "dev", &self.host_end]);
        ip(&["-n", &self.name, "addr", "add", &format!("{ns}/30"), "dev", &self.ns_end]);
        ip(&["-n", &self.name, "link", "set", "lo", "up"]);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.host_end]).output();
        let _ = Command::new("ip").args(["netns", "del", &self.name]).output();
    }
}

/// Two network namespaces of this test's own joined by a veth pair made inside them (nothing
/// of it in the host's namespace): `a` holds 10.77.N.1, `b` 10.77.N.2. Removed on drop.
pub struct NsPair {
    pub a: String,
    pub b: String,
}

impl NsPair {
    pub fn create(what: &str, n: u8) -> NsPair {
        let id = std::process::id() % 100_000;
        let p = NsPair { a: format!("qpslab-{what}a-{id}"), b: format!("qpslab-{what}b-{id}") };
        let (va, vb) = (format!("q{what}{id}a"), format!("q{what}{id}b"));
        for args in [
            vec!["netns", "add", &p.a],
            vec!["netns", "add", &p.b],
            vec![
                "link", "add", &va, "netns", &p.a, "type", "veth", "peer", "name", &vb, "netns",
                &p.b,
            ],
        ] {
            ip(&args);
        }
        let (aa, ab) = (format!("10.77.{n}.1/24"), format!("10.77.{n}.2/24"));
        ip(&["-n", &p.a, "addr", "add", &aa, "dev", &va]);
        ip(&["-n", &p.b, "addr", "add", &ab, "dev", &vb]);
        for (ns, dev) in [(&p.a, &va), (&p.b, &vb)] {
            ip(&["-n", ns, "link", "set", "lo", "up"]);
            ip(&["-n", ns, "link", "set", dev, "up"]);
        }
        p
    }

    /// Runs `args` in namespace `ns`.
    pub fn run(ns: &str, args: &[&str]) -> std::process::Output {
        Command::new("ip").args(["netns", "exec", ns]).args(args).output().unwrap()
    }
}

impl Drop for NsPair {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.a]).output();
        let _ = Command::new("ip").args(["netns", "del", &self.b]).output();
    }
}

pub fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("ip (iproute2)");
    assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A user's own nginx as Debian ships its habits, started by a test: `logs` access logs
/// (`access0.log`, ...) each written per request and `keepalive_requests 100`, one worker on
/// CPU 0, its files in a directory of its own. Stopped with SIGTERM on drop, nginx's fast shutdown, which takes its workers with it
/// (SIGKILL would leave them running).
pub struct NginxWithCosts {
    pub master: std::process::Child,
    pub dir: tempfile::TempDir,
    pub conf: std::path::PathBuf,
    /// The configuration file's text as written.
    pub original: String,
    pub url: String,
}

impl NginxWithCosts {
    pub fn start(logs: usize) -> Self {
        Self::start_with(logs, "worker_connections 1024;", "keepalive_requests 100;", "")
    }

    /// [`NginxWithCosts::start_with`], with `main` in the main context (one worker unless it
    /// says `worker_processes`).
    pub fn start_main(main: &str, events: &str, http: &str, location: &str) -> Self {
        Self::start_full(main, 0, events, http, location, "")
    }

    /// With `listen` after its listen directive's address (`backlog=8`) and `location` as
    /// [`NginxWithCosts::start_with`] takes it.
    pub fn start_listen(listen: &str, location: &str) -> Self {
        Self::start_full("", 0, "worker_connections 1024;", "", location, listen)
    }

    /// With `events` in the events block, `http` in the http block (naming an `http2_`
    /// directive there makes the listener HTTP/2 in clear text) and `location` as the body of
    /// its location `/` (`{dir}` in it: its directory, which holds an index.html), or `return
    /// 200 "ok"` when empty. Its `/nginx_status` is nginx's stub_status page, as on many
    /// production servers: the doctor reads it.
    pub fn start_with(logs: usize, events: &str, http: &str, location: &str) -> Self {
        Self::start_full("", logs, events, http, location, "")
    }

    fn start_full(
        main: &str,
        logs: usize,
        events: &str,
        http: &str,
        location: &str,
        listen: &str,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let d = dir.path().display();
        let access: String =
            (0..logs).map(|i| format!("  access_log {d}/access{i}.log;\n")).collect();
        let access = if logs == 0 { "  access_log off;\n".to_string() } else { access };
        let location = if location.is_empty() {
            "return 200 \"ok\";".to_string()
        } else {
            location.replace("{dir}", &d.to_string())
        };
        std::fs::write(dir.path().join("index.html"), "ok").unwrap();
        let h2 = if http.contains("http2_") { " http2" } else { "" };
        let listen = if listen.is_empty() { String::new() } else { format!(" {listen}") };
        let workers = if main.contains("worker_processes") { "" } else { "worker_processes 1;\n" };
        let original = format!(
            "{workers}daemon off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n{main}\n\
             events {{ {events} }}\n\
             http {{\n{access}  {http}\n\
             server {{ listen 127.0.0.1:{port}{h2}{listen}; location / {{ {location} }}\n\
             location = /nginx_status {{ stub_status; }} }}\n}}\n"
        );
        let conf = dir.path().join("nginx.conf");
        std::fs::write(&conf, &original).unwrap();
        let master = Command::new("taskset")
            .args(["-c", "0", "nginx", "-p"])
            .arg(dir.path())
            .arg("-c")
            .arg(&conf)
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("nginx (scripts/test installs nginx-light)");
        for _ in 0..50 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let url = format!("http://127.0.0.1:{port}/");
        NginxWithCosts { master, dir, conf, original, url }
    }
}

impl Drop for NginxWithCosts {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.master.id().to_string()]).status();
        for _ in 0..100 {
            if self.master.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(30));
        }
        let _ = self.master.kill();
        let _ = self.master.wait();
    }
}

/// Debian's chromium, headless, loads `html` from disk and dumps its DOM; fails on any console
/// message (a script error, a blocked fetch). `dir` holds its profile.
pub fn chromium_dom(html: &std::path::Path, dir: &std::path::Path) -> String {
    let out = Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"])
        .args(["--enable-logging=stderr", "--v=0", "--dump-dom"])
        .arg(format!("--user-data-dir={}", dir.join("chromium-profile").display()))
        .arg(format!("file://{}", html.display()))
        .stdin(std::process::Stdio::null())
        .output()
        .expect("chromium (Debian's package) runs");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(!log.contains(":CONSOLE"), "console messages: {log}");
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// A user's server of its own kind: it reads `workers = N` from its file and runs N worker
/// threads that take the requests of every connection from one queue, 10 ms each; on SIGHUP
/// it reads the file again and grows or shrinks the pool. Its rate is min(workers,
/// connections) x 100/s: the ground truth for `--server-config`.
const POOL_SERVER: &str = r#"
import queue, selectors, signal, socket, sys, threading, time
conf, port = sys.argv[1], int(sys.argv[2])
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', port)); s.listen(512)
work, pool = queue.Queue(), []
def worker(stop):
    while not stop.is_set():
        try:
            c = work.get(timeout=0.2)
        except queue.Empty:
            continue
        time.sleep(0.010)
        try:
            c.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok')
        except OSError:
            pass
def resize(*_):
    n = int(open(conf).read().split('=')[1].split()[0])
    while len(pool) < n:
        e = threading.Event(); pool.append(e)
        threading.Thread(target=worker, args=(e,), daemon=True).start()
    while len(pool) > n:
        pool.pop().set()
signal.signal(signal.SIGHUP, resize)
resize(); print('ready', flush=True)
"#;

/// The rest of a Python server script whose listener is `s` and whose work queue is `work`:
/// reads every connection's requests (heads up to a blank line) for 600 s at most and puts the
/// connection on `work` once per request, in arrival order; the workers answer.
pub const QUEUE_READER: &str = r#"
sel = selectors.DefaultSelector(); sel.register(s, selectors.EVENT_READ); bufs = {}
end = time.time() + 600
while time.time() < end:
    for key, _ in sel.select(0.5):
        if key.fileobj is s:
            c, _ = s.accept(); sel.register(c, selectors.EVENT_READ); bufs[c] = b''
            continue
        c = key.fileobj
        try:
            d = c.recv(65536)
        except OSError:
            d = b''
        if not d:
            sel.unregister(c); c.close(); bufs.pop(c, None)
            continue
        bufs[c] += d
        while b'\r\n\r\n' in bufs[c]:
            _, bufs[c] = bufs[c].split(b'\r\n\r\n', 1)
            work.put(c)
"#;

/// A loopback port free now (the kernel's pick, its listener closed).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// [`POOL_SERVER`] on 127.0.0.1:`port`, reading its workers from `conf`, started and ready.
pub fn pool_server(conf: &std::path::Path, port: u16) -> std::process::Child {
    let mut server = Command::new("python3")
        .args(["-c", &format!("{POOL_SERVER}{QUEUE_READER}")])
        .args([&conf.display().to_string(), &port.to_string()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let mut ready = String::new();
    let out = server.stdout.take().expect("its stdout");
    std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut ready).expect("a line");
    assert_eq!(ready.trim(), "ready");
    server
}

/// Every readable setting of network namespace `ns` that a host change could touch: its
/// sysctls (`/proc/sys/net` is the namespace's own) and its interface's queue masks, one
/// `path=value` line each.
pub fn ns_settings(ns: &str, dev: &str) -> String {
    let script = format!(
        "find /proc/sys/net /sys/class/net/{dev}/queues -type f 2>/dev/null | sort | \
         while read f; do printf '%s=%s\\n' \"$f\" \"$(cat \"$f\" 2>/dev/null)\"; done"
    );
    let out = NsPair::run(ns, &["sh", "-c", &script]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(text.lines().count() > 100, "{text}");
    text
}

/// Asserts two settings snapshots are equal, naming only the lines that differ.
pub fn same(now: &str, before: &str, what: &str) {
    let was: std::collections::BTreeSet<&str> = before.lines().collect();
    let is: std::collections::BTreeSet<&str> = now.lines().collect();
    let changed: Vec<_> = was.symmetric_difference(&is).collect();
    assert!(changed.is_empty(), "{what}: settings differ: {changed:#?}");
}

/// A cgroup of this test's under a controller's hierarchy (v1, or v2 where the controller has
/// no v1 mount): with a CPU quota (v1 `cpu.cfs_quota_us`, v2 `cpu.max`) or a memory limit
/// (v1 `memory.limit_in_bytes`, v2 `memory.max`); removed on drop once its processes are gone.
pub struct Cgroup {
    pub dir: std::path::PathBuf,
}

impl Cgroup {
    /// A new cgroup of `controller`'s hierarchy: its directory, and whether it is v2.
    pub fn create(controller: &str, name: &str) -> (Cgroup, bool) {
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let mounts = qpslab_sys::cgroup::parse_mountinfo(&info);
        let v1 = mounts.iter().find(|m| !m.v2 && m.controllers.iter().any(|c| c == controller));
        let (mount, v2) = match v1 {
            Some(m) => (m, false),
            None => (mounts.iter().find(|m| m.v2).expect("a cgroup v1 or a v2 mount"), true),
        };
        let dir = std::path::Path::new(&mount.point)
            .join(format!("qpslab-gt-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir(&dir);
        std::fs::create_dir(&dir).unwrap();
        (Cgroup { dir }, v2)
    }

    pub fn with_quota(name: &str, quota_us: u64) -> Cgroup {
        let (cg, v2) = Cgroup::create("cpu", name);
        if v2 {
            std::fs::write(cg.dir.join("cpu.max"), format!("{quota_us} 100000\n")).unwrap();
        } else {
            std::fs::write(cg.dir.join("cpu.cfs_period_us"), "100000\n").unwrap();
            std::fs::write(cg.dir.join("cpu.cfs_quota_us"), format!("{quota_us}\n")).unwrap();
        }
        cg
    }

    pub fn with_memory_limit(name: &str, bytes: u64) -> Cgroup {
        let (cg, v2) = Cgroup::create("memory", name);
        let file = if v2 { "memory.max" } else { "memory.limit_in_bytes" };
        std::fs::write(cg.dir.join(file), format!("{bytes}\n")).unwrap();
        cg
    }

    /// Moves process `pid` (all its threads) into the cgroup.
    pub fn add(&self, pid: u32) {
        std::fs::write(self.dir.join("cgroup.procs"), format!("{pid}\n")).unwrap();
    }

    /// A shell command that joins the cgroup, then becomes `qpslab ARGS`.
    pub fn wrap(&self, args: &[&str]) -> Command {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(format!("echo $$ > {}/cgroup.procs && exec \"$0\" \"$@\"", self.dir.display()))
            .arg(env!("CARGO_BIN_EXE_qpslab"))
            .args(args)
            .env("QPSLAB_STORE", TEST_STORE);
        c
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Daemons still in it (a test's sshd) go back to the parent: the cgroup goes whatever
        // is still running. Processes leave it as they exit; wait for that briefly.
        if let (Ok(procs), Some(parent)) =
            (std::fs::read_to_string(self.dir.join("cgroup.procs")), self.dir.parent())
        {
            for pid in procs.lines() {
                let _ = std::fs::write(parent.join("cgroup.procs"), format!("{pid}\n"));
            }
        }
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// nginx with a rate limit (limit_req, 200 r/s, no burst) on a file it serves (`return`
/// answers before limit_req's phase): a flat 200 ok/s, the rest 503 at once.
pub fn rate_limited_nginx() -> NginxWithCosts {
    NginxWithCosts::start_with(
        0,
        "worker_connections 1024;",
        "limit_req_zone $binary_remote_addr zone=one:1m rate=200r/s;",
        "limit_req zone=one; root {dir};",
    )
}

/// nginx whose workers hold 40 descriptors (`worker_rlimit_nofile 40`): 100 connections run
/// it out ("Too many open files").
pub fn descriptor_starved_nginx() -> NginxWithCosts {
    NginxWithCosts::start_main("worker_rlimit_nofile 40;", "worker_connections 1024;", "", "")
}
