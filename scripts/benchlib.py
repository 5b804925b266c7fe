"""Shared pieces of the benchmark scripts: nginx as a pinned target, wrk output, process CPU
time, callgrind totals. Traffic goes to 127.0.0.1 only."""

import os
import re
import shutil
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QPSLAB = os.path.join(ROOT, "target", "release", "qpslab")
# Optional contenders: another qpslab build to compare against (an earlier commit, for a
# before/after A/B) and h1load (github.com/wtarreau/h1load, built beside the project).
QPSLAB_BASE = os.environ.get("QPSLAB_BASE")
H1LOAD = os.environ.get("H1LOAD")
TICKS = os.sysconf("SC_CLK_TCK")


def build():
    subprocess.run(["cargo", "build", "--release", "--locked", "-q"], cwd=ROOT, check=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_listening(port, proc, what):
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.05)
    proc.kill()
    sys.exit(f"{what} did not start listening on port {port}")


def nginx_conf(workdir, port, h2=False):
    """nginx's configuration for one process: `return 200`; with `h2`, h2c with prior
    knowledge and `return 200 "ok\\n"`, no limit on requests per connection."""
    conf = os.path.join(workdir, "nginx-h2.conf" if h2 else "nginx.conf")
    streams = ("    http2_max_requests 100000000;\n    http2_max_concurrent_streams 128;\n"
               if h2 else "")
    listen = " http2" if h2 else ""
    body = ' "ok\\n"' if h2 else ""
    with open(conf, "w") as f:
        f.write(f"""daemon off;
master_process off;
worker_processes 1;
pid {workdir}/nginx.pid;
error_log {workdir}/error.log;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    keepalive_requests 100000000;
{streams}    client_body_temp_path {workdir};
    server {{ listen 127.0.0.1:{port}{listen} backlog=4096; location / {{ return 200{body}; }} }}
}}
""")
    return conf


def start_nginx(workdir, port, cpu, prefix=()):
    """nginx, one process (master_process off), `return 200`, pinned to `cpu`."""
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    conf = nginx_conf(workdir, port)
    # taskset outside any prefix (valgrind), so the prefix runs nginx itself, not taskset.
    cmd = ["taskset", "-c", str(cpu)] + list(prefix) + [nginx, "-p", workdir, "-c", conf]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_listening(port, proc, "nginx")
    return proc


def wrk_requests(out):
    m = re.search(r"(\d+) requests in ([\d.]+)(m?s)", out)
    if not m:
        sys.exit(f"cannot read wrk output:\n{out}")
    secs = float(m.group(2)) / (1000 if m.group(3) == "ms" else 1)
    return int(m.group(1)), secs


def process_cpu_seconds(pid):
    """user + sys CPU seconds of a whole process (all threads), from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def callgrind_totals(path):
    with open(path) as f:
        for line in f:
            if line.startswith("totals:") or line.startswith("summary:"):
                return int(line.split()[1])
    sys.exit(f"no callgrind totals in {path}")


def ratios(per, a, b):
    """'mean A/B ratio (range over rounds)' for two contenders' per-round figures."""
    mean = sum(per[a]) / len(per[a]) / (sum(per[b]) / len(per[b]))
    each = [x / y for x, y in zip(per[a], per[b])]
    return f"{a}/{b} {mean:.2f}x ({min(each):.2f}-{max(each):.2f} by round)"


def start_qpslab_h2(workdir, port, cpu):
    """qpslab serve, one worker on `cpu`: h2c with prior knowledge as well as HTTP/1.1."""
    return subprocess.Popen([QPSLAB, "serve", "-l", f"127.0.0.1:{port}", "-w", "1", "--cpus",
                             str(cpu)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def start_nginx_h2(workdir, port, cpu):
    """nginx, one process on `cpu`, h2c with prior knowledge, `return 200 "ok\\n"`."""
    conf = nginx_conf(workdir, port, h2=True)
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    return subprocess.Popen(["taskset", "-c", str(cpu), nginx, "-p", workdir, "-c", conf],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def start_h2o(workdir, port, cpu):
    """h2o, one thread on `cpu`, a 3-byte static file."""
    www = os.path.join(workdir, "www")
    os.makedirs(www, exist_ok=True)
    with open(os.path.join(www, "index.html"), "w") as f:
        f.write("ok\n")
    os.chmod(workdir, 0o755)
    conf = os.path.join(workdir, "h2o.conf")
    with open(conf, "w") as f:
        f.write(f"""listen:
  host: 127.0.0.1
  port: {port}
num-threads: 1
user: nobody
hosts:
  default:
    paths:
      /:
        file.dir: {www}
""")
    return subprocess.Popen(["taskset", "-c", str(cpu), "h2o", "-c", conf],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


# HTTP/2 targets by name, each `start(workdir, port, cpu)` -> its process (not yet listening).
H2_TARGETS = {"qpslab": start_qpslab_h2, "h2o": start_h2o, "nginx": start_nginx_h2}
