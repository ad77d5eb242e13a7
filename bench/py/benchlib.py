"""Shared helpers of bench/kernels, bench/compare and bench/verbs (stdlib only, Debian /usr/bin/python3).

- peers: copies ../shared/peers into bench/.work/peers, installs the peer packages (setup.sh, needs root + apt)
  only when one is missing, and compiles the C baselines (build.sh) when a binary is missing;
- quiet gating (wait_quiet) and foreign-CPU accounting per run (run_measured), as shared/peers/lib.sh and
  measure.py do: the machine is shared, so every run records how much CPU other tenants used meanwhile and is
  retried once when that was over 15 %;
- machine and version facts; markdown tables; replacing a marked section of docs/performance-results.md.
"""
import datetime
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "bench")
WORK = os.path.join(BENCH, ".work")
PY = "/usr/bin/python3"
HZ = os.sysconf("SC_CLK_TCK")
NCPU = os.cpu_count() or 1
MIB = 1 << 20

PEER_BINARIES = ("memcpy_bw", "reduce_bw", "tcp_bench", "wake_bench", "mpi_coll_ompi", "mpi_init_ompi",
                 "mpi_coll_mpich", "mpi_init_mpich")
PEER_PACKAGES = ("build-essential", "openmpi-bin", "libopenmpi-dev", "mpich", "libmpich-dev", "python3-mpi4py",
                 "python3-numpy", "python3-torch", "ucx-utils", "iperf3", "hyperfine")

_results_dir = None
_log_lines = []


def log(msg):
    line = f"[{time.strftime('%T')}] {msg}"
    print(line, file=sys.stderr, flush=True)
    _log_lines.append(line)
    if _results_dir:
        with open(os.path.join(_results_dir, "progress.log"), "a") as f:
            f.write(line + "\n")


def c_binary(name, compiler="gcc", flags=("-O2",)):
    """Compiles bench/c/NAME.c into bench/.work/bin when the binary is missing or older than its source; its path."""
    out = os.path.join(WORK, "bin")
    os.makedirs(out, exist_ok=True)
    exe, src = os.path.join(out, name), os.path.join(BENCH, "c", name + ".c")
    if not os.path.exists(exe) or os.path.getmtime(exe) < os.path.getmtime(src):
        subprocess.run([compiler, *flags, "-o", exe, src], check=True)
    return exe


def results_dir(kind, given=None):
    """bench/results/<kind>-<UTC stamp>/ (ignored by git), created once per process."""
    global _results_dir
    if _results_dir is None:
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        _results_dir = given or os.path.join(BENCH, "results", f"{kind}-{stamp}")
        os.makedirs(os.path.join(_results_dir, "raw"), exist_ok=True)
    return _results_dir


# ------------------------------------------------------------------------------------------------ peers

def shared_peers_dir():
    for cand in (os.environ.get("JCCL_SHARED_PEERS"), os.path.join(ROOT, "..", "shared", "peers"),
                 "/work/shared/peers"):
        if cand and os.path.isfile(os.path.join(cand, "build.sh")):
            return os.path.abspath(cand)
    return None


def _packages_missing():
    r = subprocess.run(["dpkg", "-s", *PEER_PACKAGES], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return r.returncode != 0


def ensure_peers(skip_setup=False):
    """Returns the writable peers directory (bench/.work/peers) with build/ complete. Raises on failure."""
    dst = os.path.join(WORK, "peers")
    src = shared_peers_dir()
    if not os.path.isdir(dst):
        if not src:
            raise RuntimeError("peer scripts not found: expected ../shared/peers (set JCCL_SHARED_PEERS)")
        log(f"copying {src} -> {dst}")
        os.makedirs(WORK, exist_ok=True)
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("build", "results", "results.prev"))
        for dirpath, dirnames, filenames in os.walk(dst):  # the shared copy may be read-only
            os.chmod(dirpath, 0o755)
            for fn in filenames:
                p = os.path.join(dirpath, fn)
                os.chmod(p, 0o755 if fn.endswith((".sh", ".py")) else 0o644)
    if not skip_setup and _packages_missing():
        log("peer packages missing: running peers/setup.sh (apt-get; needs root)")
        r = subprocess.run(["bash", os.path.join(dst, "setup.sh")], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        with open(os.path.join(WORK, "peers-setup.log"), "w") as f:
            f.write(r.stdout)
        if r.returncode != 0:
            raise RuntimeError("peers/setup.sh failed (see bench/.work/peers-setup.log):\n" + r.stdout[-2000:])
    build = os.path.join(dst, "build")
    if not all(os.access(os.path.join(build, b), os.X_OK) for b in PEER_BINARIES):
        log("compiling the peer C benchmarks (peers/build.sh)")
        r = subprocess.run(["bash", os.path.join(dst, "build.sh")], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        with open(os.path.join(WORK, "peers-build.log"), "w") as f:
            f.write(r.stdout)
        if r.returncode != 0:
            raise RuntimeError("peers/build.sh failed (see bench/.work/peers-build.log):\n" + r.stdout[-2000:])
    return dst


# ------------------------------------------------------------------------------------------------ quiet gating

def cpu_times():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    busy_all = sum(v[:8]) - v[3] - v[4]      # everything but idle + iowait (lib.sh's cpu_busy_pct)
    busy_proc = v[0] + v[1] + v[2]            # user+nice+system (measure.py: softirq is not charged to anyone)
    total = sum(v[:8])
    steal = v[7] if len(v) > 7 else 0
    return busy_all, busy_proc, total, steal


def busy_pct(dt=0.5):
    a = cpu_times()
    time.sleep(dt)
    b = cpu_times()
    tot = b[2] - a[2]
    return 0.0 if tot <= 0 else 100.0 * (b[0] - a[0]) / tot


class Quiet:
    """wait_quiet of shared/peers/lib.sh: wait up to max_wait s (and budget s in total) for < busy_pct % load."""

    def __init__(self, max_wait=20.0, budget=300.0, threshold=20.0):
        self.max_wait, self.budget, self.threshold, self.spent = max_wait, budget, threshold, 0.0

    def wait(self, label):
        t0 = time.monotonic()
        limit = min(self.max_wait, max(0.0, self.budget - self.spent))
        b = busy_pct(0.5)
        while b >= self.threshold and time.monotonic() - t0 < limit:
            time.sleep(0.5)
            b = busy_pct(0.5)
        waited = time.monotonic() - t0
        self.spent += waited
        if _results_dir:
            with open(os.path.join(_results_dir, "quiet.log"), "a") as f:
                f.write(f"{time.strftime('%T')} {label} bg_busy_pct={b:.0f} waited_s={waited:.1f}\n")
        return b


class Run:
    __slots__ = ("label", "rc", "out", "err", "wall", "own", "foreign", "steal", "attempt")

    def ok(self):
        return self.rc == 0


def _one_run(label, cmd, env, timeout, cwd, attempt):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    c0 = cpu_times()
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        try:  # the command's whole process group: launchers would leave ranks behind otherwise
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = p.communicate()
        rc, err = 124, (err or b"") + b"\nTIMEOUT\n"
    wall = time.monotonic() - t0
    c1 = cpu_times()
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    run = Run()
    run.label, run.rc, run.wall, run.own, run.attempt = label, rc, wall, own, attempt
    run.out = out.decode(errors="replace") if isinstance(out, bytes) else out
    run.err = err.decode(errors="replace") if isinstance(err, bytes) else err
    run.foreign = max(0.0, (c1[1] - c0[1]) / HZ - own) / (wall * NCPU) * 100 if wall > 0 else 0.0
    run.steal = (c1[3] - c0[3]) / HZ / (wall * NCPU) * 100 if wall > 0 else 0.0
    return run


def run_measured(label, cmd, env=None, timeout=600, cwd=None, retries=1, max_foreign=15.0, raw_name=None):
    """Runs cmd (list) like shared/peers/measure.py: records wall, own CPU, foreign CPU %; re-runs once when
    another tenant used more than max_foreign % of the machine (the least contaminated good attempt wins)."""
    best = None
    for attempt in range(retries + 1):
        if attempt:
            t_end = time.monotonic() + 15
            while time.monotonic() < t_end and busy_pct(0.5) >= 20:
                time.sleep(0.5)
        r = _one_run(label, cmd, env, timeout, cwd, attempt)
        line = (f"{time.strftime('%T')} {label} attempt={attempt} rc={r.rc} wall_s={r.wall:.2f} own_cpu_s={r.own:.2f} "
                f"foreign_pct={r.foreign:.1f} steal_pct={r.steal:.1f}")
        log(line[9:])
        if _results_dir:
            with open(os.path.join(_results_dir, "measure.log"), "a") as f:
                f.write(line + "\n")
            if raw_name:
                suffix = "" if attempt == 0 else f".attempt{attempt}"
                with open(os.path.join(_results_dir, "raw", raw_name + suffix), "w") as f:
                    f.write(f"# {line}\n# cmd: {' '.join(cmd)}\n{r.out}\n---stderr---\n{r.err}")
        if r.rc == 0 and (best is None or r.foreign < best.foreign):
            best = r
        if r.rc != 0:
            log(f"{label}: exit {r.rc}; stderr tail:\n{r.err[-1500:]}")
        if r.rc == 0 and r.foreign <= max_foreign:
            break
        if r.rc == 124:  # a timeout is a result: re-running it would only double the time lost
            break
    return best if best is not None else r


# ------------------------------------------------------------------------------------------------ facts

def sh(cmd, timeout=60):
    try:
        p = subprocess.run(cmd, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=timeout)
        return p.stdout.strip()
    except Exception as e:  # noqa: BLE001
        return f"({e})"


def java_bin():
    jh = os.environ.get("JAVA_HOME")
    return os.path.join(jh, "bin", "java") if jh else "java"


def machine_lines():
    lscpu = sh("lscpu")

    def field(name):
        m = re.search(r"^" + re.escape(name) + r":\s*(.*)$", lscpu, re.M)
        return m.group(1).strip() if m else "?"
    os_name = sh(". /etc/os-release; echo \"$PRETTY_NAME\"")
    mem_gib = sh("free -g | awk '/^Mem:/{print $2}'")
    return [
        f"date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"cpu: {field('Model name')}, {NCPU} vCPUs ({field('Thread(s) per core')} thread/core), "
        f"{field('Hypervisor vendor')} guest; flags: "
        + ("avx512f " if "avx512f" in field("Flags") else "") + ("avx2 " if "avx2" in field("Flags") else "")
        + ("fma" if " fma" in field("Flags") else ""),
        f"caches: L1d {field('L1d cache')}, L2 {field('L2 cache')}, L3 {field('L3 cache')}",
        f"memory: {mem_gib} GiB; kernel {sh('uname -r')}; {os_name}",
        f"load average at start: {open('/proc/loadavg').read().split()[:3]}",
    ]


def pkgver(name):
    return sh("dpkg-query -W -f='${Version}' " + name)


def version_lines(torch=True, mpi=True, ucx=True):
    out = []
    jv = " ".join(sh(java_bin() + " -version 2>&1").splitlines()[:3])
    out.append(f"JDK: {jv}")
    if mpi:
        out.append(f"Open MPI: {sh('ompi_info --version 2>/dev/null | head -1')}; "
                   f"mpi4py {pkgver('python3-mpi4py')}")
        out.append(f"MPICH: {pkgver('mpich')}")
    if torch:
        out.append(f"torch (gloo): {pkgver('python3-torch')}")
    if ucx:
        out.append(f"UCX: {sh('ucx_info -v 2>/dev/null | head -1').lstrip('# ')}")
    out.append(f"iperf3: {sh('iperf3 --version 2>/dev/null | head -1')}; gcc: {sh('gcc --version | head -1')}")
    out.append(f"JCCL: {sh('cd ' + ROOT + ' && git rev-parse --short HEAD')} "
               f"({sh('cd ' + ROOT + ' && git log -1 --format=%cd --date=iso')})")
    return out


# ------------------------------------------------------------------------------------------------ numbers / md

def median(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def hsize(b):
    b = int(b)
    if b >= MIB and b % MIB == 0:
        return f"{b // MIB} MiB"
    if b >= 1024 and b % 1024 == 0:
        return f"{b // 1024} KiB"
    return f"{b} B"


def fmt(v, digits=None):
    if v is None:
        return "n/a"
    if digits is not None:
        return f"{v:.{digits}f}"
    a = abs(v)
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def spread(vals, digits=None):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "n/a"
    s = fmt(statistics.median(vals), digits)
    if len(vals) > 1:
        s += f" [{fmt(min(vals), digits)}–{fmt(max(vals), digits)}]"
    return s


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def md_table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out) + "\n"


def update_section(path, name, body):
    """Replaces the text between <!-- name:begin --> and <!-- name:end --> in path (appends when absent)."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    text = open(path).read() if os.path.exists(path) else "# JCCL performance\n"
    block = f"{begin}\n{body.rstrip()}\n{end}"
    if begin in text and end in text:
        i, j = text.index(begin), text.index(end) + len(end)
        text = text[:i] + block + text[j:]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    with open(path, "w") as f:
        f.write(text)


def parse_coll_csv(text):
    """Rows of the mpi_coll.c CSV (impl,op,nranks,bytes,iters,blocks,median_us,min_us,max_us,algbw,busbw)."""
    rows = []
    for line in text.splitlines():
        parts = line.strip().split(",")
        if len(parts) != 11 or parts[0] == "impl" or line.startswith("#"):
            continue
        try:
            rows.append({"impl": parts[0], "op": parts[1], "n": int(parts[2]), "bytes": int(parts[3]),
                         "iters": int(parts[4]), "blocks": int(parts[5]), "us": float(parts[6]),
                         "min_us": float(parts[7]), "max_us": float(parts[8]), "algbw": float(parts[9]),
                         "busbw": float(parts[10])})
        except ValueError:
            continue
    return rows


# ------------------------------------------------------------------------------------------------ peer tools

def ucx_perftest_cmd(port, test, size, n):
    """ucx_perftest server pinned to CPU0 (background) and client on CPU1, -v CSV output (shared/peers/run_ucx.sh)."""
    return ["bash", "-c", f"ucx_perftest -p {port} -c 0 >/dev/null 2>&1 & spid=$!; sleep 0.4; "
            f"ucx_perftest 127.0.0.1 -p {port} -c 1 -t {test} -s {size} -n {n} -w {max(10, n // 10)} -v 2>&1;"
            f" rc=$?; wait $spid; exit $rc"]


def parse_ucx_final(out):
    """(typical latency us, overall bandwidth GB/s) from ucx_perftest -v's last CSV line, or (None, None)."""
    final = None
    for line in out.splitlines():
        p = line.strip().split(",")
        if len(p) == 8 and p[0].isdigit():
            try:
                final = [float(x) for x in p]
            except ValueError:
                pass
    if not final:
        return None, None
    return final[1], final[5] * MIB / 1e9


def iperf3_cmd(port, seconds, bidir=False):
    """iperf3 on loopback, 1 MiB writes, JSON output: one stream, server on CPU0 and client on CPU1; or with bidir
    one stream each way at once (unpinned: both directions need both CPUs)."""
    if bidir:
        return ["bash", "-c", f"iperf3 -s -1 -p {port} >/dev/null 2>&1 & spid=$!; sleep 0.5; "
                f"iperf3 -c 127.0.0.1 -p {port} --bidir -t {seconds} -l 1M -J; rc=$?; wait $spid; exit $rc"]
    return ["bash", "-c", f"iperf3 -s -1 -p {port} -A 0 >/dev/null 2>&1 & spid=$!; sleep 0.5; "
            f"iperf3 -c 127.0.0.1 -p {port} -A 1 -t {seconds} -l 1M -J; rc=$?; wait $spid; exit $rc"]


def parse_iperf3(out, key="sum_received"):
    """Received GB/s from iperf3 -J output (key sum_received_bidir_reverse: the reverse stream of --bidir), or None."""
    try:
        d = json.loads(out[out.index("{"):])
        return d["end"][key]["bits_per_second"] / 8 / 1e9
    except (ValueError, KeyError):
        return None


def parse_tcp_bench(out):
    """{(test, mode): value} from tcp_bench's CSV (tcp_stream GB/s, tcp_pingpong round trip us)."""
    found = {}
    for line in out.splitlines():
        p = line.strip().split(",")
        if len(p) >= 4 and p[0] in ("tcp_stream", "tcp_pingpong"):
            found[(p[0], p[1])] = float(p[3])
    return found
