"""bench/tools: JCCL's own tools (`jccl tests`, `jccl perf`) beside the peers' output in the same formats, one run.

nccl-tests format, 2 ranks on one host: `./jccl tests {all_reduce,all_gather,broadcast}_perf` (shm0) against the
same measurement and table for Open MPI (`bench/c/mpi_nccl_tests.c` under `mpirun --mca btl self,vader`) and, for
all_reduce, torch gloo (`bench/py/gloo_nccl_tests.py`), same flags (-b -e -f -n -w -c). perftest format:
`./jccl perf write_bw|write_lat -a --local -d shm0` against ucx_perftest (ucp_put_bw / ucp_put_lat over shared
memory) at selected sizes, and `./jccl perf write_bw|send_lat -a --local -d tcp0` against iperf3 and the
busy-polled C ping-pong (tcp_bench) on loopback. JCCL and peers alternate for --rounds rounds (order reversed every
other round), each run gated on a quiet machine (benchlib). The section between <!-- bench/tools:begin --> and
<!-- bench/tools:end --> of docs/performance-results.md gets the raw tables of the median round verbatim and a side-by-side
table of medians over rounds with JCCL/peer ratios.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as B  # noqa: E402

MIB = B.MIB
HERE = os.path.dirname(os.path.abspath(__file__))
OMPI = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "pml", "ob1", "--mca", "btl", "self,vader",
        "-np", "2"]
COLL_TESTS = ["all_reduce_perf", "all_gather_perf", "broadcast_perf"]
UCX_SIZES = [8, 4096, 65536, MIB, 8 * MIB]
UCX_SHM = {"UCX_TLS": "posix,cma,self", "UCX_NET_DEVICES": "all", "UCX_LOG_LEVEL": "warn"}
UCX_TCP = {"UCX_TLS": "tcp", "UCX_NET_DEVICES": "lo", "UCX_LOG_LEVEL": "warn"}


def parse_nccl_table(text):
    """Rows of an nccl-tests table: size -> (oop_us, oop_busbw, oop_wrong, ip_us, ip_busbw, ip_wrong)."""
    rows = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        c = line.split()
        if len(c) != 13:
            continue
        try:
            rows[int(c[0])] = (float(c[5]), float(c[7]), c[8], float(c[9]), float(c[11]), c[12])
        except ValueError:
            continue
    return rows


def table_text(text):
    """The table part of an nccl-tests / perftest output (drops launcher noise and JVM warnings)."""
    keep = []
    for line in text.splitlines():
        if line.startswith("WARNING:") or "incubator" in line:
            continue
        keep.append(line.rstrip())
    return "\n".join(keep).strip("\n")


def avg_busbw(text):
    for line in text.splitlines():
        if line.startswith("# Avg bus bandwidth"):
            try:
                return float(line.split(":")[1])
            except ValueError:
                return None
    return None


def rat(a, b):
    r = B.ratio(a, b)
    return "n/a" if r is None else f"{r:.2f}" if r < 100 else f"{r:.0f}"


class Tools:
    def __init__(self, a):
        self.a = a
        self.peers = B.ensure_peers(skip_setup=a.skip_setup)
        self.quiet = B.Quiet(max_wait=a.quiet_wait, budget=a.quiet_budget)
        self.res = B.results_dir("tools", a.out)
        self.raw = {}        # (kind, name, round) -> text
        self.coll = {}       # (impl, test, size) -> [oop_us per round]
        self.coll_ip = {}    # (impl, test, size) -> [ip_us per round]
        self.wrong = []      # (impl, test, round, size) with #wrong != 0
        self.perf = {}       # (impl, dev, test, size) -> [value per round]
        self.fail = []
        self.port = 15300 + (os.getpid() % 400) * 4
        self.env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                        OMP_NUM_THREADS="1", JCCL_NO_BUILD="1", GLOO_SOCKET_IFNAME="lo")
        self.mpi_bin = self.build_mpi()

    def build_mpi(self):
        return B.c_binary("mpi_nccl_tests", compiler="mpicc.openmpi")

    def measured(self, label, cmd, env=None, timeout=600):
        self.quiet.wait(label)
        r = B.run_measured(label, cmd, env=env or self.env, timeout=timeout, retries=self.a.retries,
                           max_foreign=self.a.max_foreign, raw_name=label.replace(" ", ".") + ".txt")
        if r.rc != 0:
            tail = [x for x in (r.err or "").strip().splitlines() if x.strip()][-2:]
            self.fail.append((label, f"exit {r.rc}: " + " / ".join(tail)[:300]))
        return r

    # ------------------------------------------------------------------ nccl-tests
    def nccl_flags(self):
        a = self.a
        return ["-b", a.min_bytes, "-e", a.max_bytes, "-f", str(a.factor), "-n", str(a.iters), "-w", str(a.warmup)]

    def coll_run(self, impl, test, rnd):
        if impl == "jccl":
            cmd = [os.path.join(B.ROOT, "jccl"), "tests", test, "--np", "2", *self.nccl_flags()]
        elif impl == "ompi":
            cmd = [*OMPI, self.mpi_bin, test, *self.nccl_flags()]
        else:
            cmd = [B.PY, os.path.join(HERE, "gloo_nccl_tests.py"), "--np", "2", *self.nccl_flags()]
        r = self.measured(f"{impl} {test} r{rnd}", cmd, timeout=900)
        self.raw[("coll", impl, test, rnd)] = r.out
        for size, (oop, _, w1, ip, _, w2) in parse_nccl_table(r.out).items():
            self.coll.setdefault((impl, test, size), []).append(oop)
            self.coll_ip.setdefault((impl, test, size), []).append(ip)
            if w1 not in ("0", "N/A") or w2 not in ("0", "N/A"):
                self.wrong.append((impl, test, rnd, size))

    # ------------------------------------------------------------------ perftest
    def jccl_perf(self, test, dev, rnd):
        js = os.path.join(self.res, "raw", f"jccl.perf.{dev}.{test}.r{rnd}.json")
        # perftest's own iteration counts; the warm-up per size (JIT; capped for large sizes by the tool) is raised
        # from its by-size default, which leaves the small sizes of an -a sweep timed in interpreted/C1 code.
        # (shm only: over tcp0 a 20000-run warm-up per size of a latency sweep outlasts the 300 s limit.)
        warm = ["--warmup", "20000"] if dev == "shm0" else []
        cmd = [os.path.join(B.ROOT, "jccl"), "perf", test, "-a", "--local", "-d", dev, *warm, "--json", js]
        r = self.measured(f"jccl perf {dev} {test} r{rnd}", cmd, timeout=300)
        self.raw[("perf", dev, test, rnd)] = r.out
        try:
            d = json.load(open(js))
        except (OSError, ValueError):
            return
        for row in d["results"] if isinstance(d["results"], list) else [d["results"]]:
            size = row.get("MsgSize", row.get("bytes"))
            if test.endswith("_lat"):
                v = row["t_typical"]
            else:
                unit = row.get("bw_unit", "MiB/sec")
                v = row["BW_average"] * (MIB / 1e9 if unit.startswith("MiB") else 1 / 8)
            self.perf.setdefault(("jccl", dev, test, int(size)), []).append(v)

    def ucx(self, test, size, env, rnd):
        lat = test.endswith("_lat")
        n = (20000 if size <= 65536 else 2000) if lat else (100000 if size <= 65536 else 2000)
        if env is UCX_TCP:
            n = max(200, n // 10)
        self.port += 1
        r = self.measured(f"ucx {test} {size} r{rnd}", B.ucx_perftest_cmd(self.port, test, size, n),
                          env=dict(self.env, **env))
        latency, bandwidth = B.parse_ucx_final(r.out)
        v = latency if lat else bandwidth
        if v is not None:
            self.perf.setdefault(("ucx-tcp" if env is UCX_TCP else "ucx", "", test, size), []).append(v)

    def iperf3(self, rnd):
        self.port += 1
        gbps = B.parse_iperf3(self.measured(f"iperf3 r{rnd}", B.iperf3_cmd(self.port, 3)).out)
        if gbps is not None:
            self.perf.setdefault(("iperf3", "", "stream", MIB), []).append(gbps)

    def tcp_bench(self, rnd):
        r = self.measured(f"tcp_bench r{rnd}", [os.path.join(self.peers, "build", "tcp_bench"), "3"],
                          env=dict(self.env, TCP_BENCH_PIN="1"))
        rtt = B.parse_tcp_bench(r.out).get(("tcp_pingpong", "spin"))
        if rtt is not None:
            # tcp_bench reports the round trip; perftest's send_lat t_typical is one-way (half the round trip)
            self.perf.setdefault(("tcp_bench", "", "pingpong_spin_rtt", 8), []).append(rtt)

    # ------------------------------------------------------------------ plan
    def go(self):
        a = self.a
        # One untimed launch first: after a build it records the ranks' AOT cache (jccl run / jccl tests), which
        # the timed launches then start from.
        self.measured("jccl tests untimed first launch", [os.path.join(B.ROOT, "jccl"), "tests", "all_reduce_perf",
                                                          "--np", "2", "-b", "8", "-e", "8", "-n", "1", "-w", "1",
                                                          "--jit_warmup", "10"], timeout=300)
        for rnd in range(a.rounds):
            flip = rnd % 2 == 1
            B.log(f"=== round {rnd + 1}/{a.rounds}")
            if "coll" in a.parts:
                for test in COLL_TESTS:
                    impls = ["jccl", "ompi"] + (["gloo"] if test == "all_reduce_perf" and a.gloo else [])
                    for impl in (list(reversed(impls)) if flip else impls):
                        self.coll_run(impl, test, rnd)
            if "shm" in a.parts:
                for jt, ut in (("write_bw", "ucp_put_bw"), ("write_lat", "ucp_put_lat")):
                    for side in (["ucx", "jccl"] if flip else ["jccl", "ucx"]):
                        if side == "jccl":
                            self.jccl_perf(jt, "shm0", rnd)
                        else:
                            for size in UCX_SIZES:
                                self.ucx(ut, size, UCX_SHM, rnd)
            if "tcp" in a.parts:
                steps = [lambda: self.jccl_perf("write_bw", "tcp0", rnd), lambda: self.iperf3(rnd),
                         lambda: self.ucx("ucp_put_bw", MIB, UCX_TCP, rnd),
                         lambda: self.jccl_perf("send_lat", "tcp0", rnd), lambda: self.tcp_bench(rnd)]
                for step in (list(reversed(steps)) if flip else steps):
                    step()

    # ------------------------------------------------------------------ report
    def median_round(self, kind, name, test):
        """The round whose JCCL average bus bandwidth (or, for perftest, first row) is the median: its raw tables
        are shown."""
        rounds = [k[3] for k in self.raw if k[0] == kind and k[1] == name and k[2] == test]
        if not rounds:
            return None
        if kind == "coll":
            scored = sorted(rounds, key=lambda r: avg_busbw(self.raw[(kind, name, test, r)]) or 0)
        else:
            scored = sorted(rounds)
        return scored[len(scored) // 2]

    def report(self, t0):
        a = self.a
        med = B.median
        md = ["## The tools beside the peers' tools (bench/tools)\n"]
        A = md.append
        A(f"Generated by `bench/tools {' '.join(sys.argv[1:])}` on "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} in {(time.monotonic() - t0) / 60:.1f} min; "
          f"{a.rounds} round(s), JCCL and peers alternating (order reversed every other round). The raw tables are "
          f"the programs' own output, verbatim, from one round (JCCL's median round by average bus bandwidth, and "
          f"the peers' tables from that same round); the side-by-side tables give the median over rounds, "
          f"`[min–max]` over rounds.\n")
        A("```\n" + "\n".join(B.machine_lines() + B.version_lines(torch=a.gloo)) + "\n```\n")
        if "coll" in a.parts:
            A("### nccl-tests format, 2 ranks on one host\n")
            A(f"JCCL: `./jccl tests TEST --np 2 {' '.join(self.nccl_flags())}` (shm0; the JCCL-only JIT warm-up pass "
              f"`--jit_warmup 20000`: the whole table once, unmeasured, then idle until the JIT is quiet; one untimed launch before the rounds trains the "
              f"ranks' AOT cache). Open MPI: `mpirun -np 2 --mca pml ob1 --mca btl "
              f"self,vader bench/.work/bin/mpi_nccl_tests TEST` with the same flags (bench/c/mpi_nccl_tests.c: "
              f"nccl-tests' loop and table around MPI_Allreduce / MPI_Allgather / MPI_Bcast, MPI_IN_PLACE for "
              f"in-place, page-aligned buffers). gloo: `bench/py/gloo_nccl_tests.py` (torch.distributed, in place; its "
              f"out-of-place is copy + all_reduce). All time columns are the mean over `-n` runs, averaged over ranks "
              f"(nccl-tests' `-a 1`).\n")
            for test in COLL_TESTS:
                rnd = self.median_round("coll", "jccl", test)
                if rnd is None:
                    continue
                A(f"#### {test}: JCCL (round {rnd + 1})\n")
                A("```\n" + table_text(self.raw[("coll", "jccl", test, rnd)]) + "\n```\n")
                for impl, title in (("ompi", "Open MPI"), ("gloo", "torch gloo")):
                    if ("coll", impl, test, rnd) in self.raw:
                        A(f"#### {test}: {title} (same round)\n")
                        A("```\n" + table_text(self.raw[("coll", impl, test, rnd)]) + "\n```\n")
                sizes = sorted({k[2] for k in self.coll if k[1] == test})
                has_gloo = any(k[0] == "gloo" and k[1] == test for k in self.coll)
                header = ["size", "JCCL µs (oop)", "Open MPI µs (oop)", "JCCL µs (in-place)", "Open MPI µs (in-place)"]
                header += ["gloo µs (in-place)"] if has_gloo else []
                header += ["OMPI/JCCL time (oop)", "OMPI/JCCL time (in-place)"] + (["gloo/JCCL (in-place)"]
                                                                                 if has_gloo else [])
                rows = []
                for s in sizes:
                    j, o = self.coll.get(("jccl", test, s), []), self.coll.get(("ompi", test, s), [])
                    ji, oi = self.coll_ip.get(("jccl", test, s), []), self.coll_ip.get(("ompi", test, s), [])
                    gi = self.coll_ip.get(("gloo", test, s), [])
                    row = [B.hsize(s), B.spread(j), B.spread(o), B.spread(ji), B.spread(oi)]
                    row += [B.spread(gi)] if has_gloo else []
                    row += [rat(med(o), med(j)), rat(med(oi), med(ji))]
                    row += [rat(med(gi), med(ji))] if has_gloo else []
                    rows.append(row)
                A(f"{test}, medians over rounds (ratios > 1: JCCL faster):\n")
                A(B.md_table(header, rows) + "\n")
        if "shm" in a.parts or "tcp" in a.parts:
            A("### perftest format\n")
            A("JCCL: `./jccl perf TEST -a --local -d DEV` (perftest's `-a`: 2 B to 8 MiB, its default iterations; on "
              "shm0 with `--warmup 20000`, the JIT warm-up per size raised, capped by the tool for large sizes; "
              "both ends in one process pair on this host). ucx_perftest: server `-c 0`, client `-c 1`, `-v`; "
              "UCX_TLS=posix,cma,self for shared memory, tcp on lo. Bandwidth GB/s = 1e9 B/s (perftest prints "
              "MiB/sec); latency µs, one-way (perftest's t_typical, ucx_perftest's typical latency).\n")
        for dev, tests in (("shm0", ("write_bw", "write_lat")), ("tcp0", ("write_bw", "send_lat"))):
            if ("shm" if dev == "shm0" else "tcp") not in a.parts:
                continue
            for test in tests:
                rnd = self.median_round("perf", dev, test)
                if rnd is None:
                    continue
                A(f"#### `jccl perf {test} -a --local -d {dev}` (round {rnd + 1})\n")
                A("```\n" + table_text(self.raw[("perf", dev, test, rnd)]) + "\n```\n")
            if dev == "shm0":
                rows = []
                for s in UCX_SIZES:
                    jb, ub = self.perf.get(("jccl", dev, "write_bw", s), []), self.perf.get(("ucx", "", "ucp_put_bw",
                                                                                             s), [])
                    jl, ul = self.perf.get(("jccl", dev, "write_lat", s), []), self.perf.get(("ucx", "", "ucp_put_lat",
                                                                                              s), [])
                    rows.append([B.hsize(s), B.spread(jb), B.spread(ub), rat(med(jb), med(ub)), B.spread(jl),
                                 B.spread(ul), rat(med(ul), med(jl))])
                A("shm0 against ucx_perftest at the same sizes, same run (medians over rounds):\n")
                A(B.md_table(["size", "JCCL write_bw GB/s", "ucp_put_bw GB/s", "JCCL/UCX bw", "JCCL write_lat µs",
                              "ucp_put_lat µs", "UCX/JCCL lat"], rows) + "\n")
            else:
                jb, ip = self.perf.get(("jccl", dev, "write_bw", MIB), []), self.perf.get(("iperf3", "", "stream",
                                                                                          MIB), [])
                ub = self.perf.get(("ucx-tcp", "", "ucp_put_bw", MIB), [])
                jl = self.perf.get(("jccl", dev, "send_lat", 8), [])
                pp = self.perf.get(("tcp_bench", "", "pingpong_spin_rtt", 8), [])
                jrtt = [2 * x for x in jl]
                A("tcp0 against iperf3, ucx_perftest over TCP and the busy-polled C ping-pong, same run (medians):\n")
                A(B.md_table(["what", "JCCL", "peer", "JCCL/peer"], [
                    ["1 MiB WRITE GB/s vs one iperf3 stream (`-l 1M`)", B.spread(jb), B.spread(ip),
                     rat(med(jb), med(ip))],
                    ["1 MiB WRITE GB/s vs ucx_perftest ucp_put_bw (tcp)", B.spread(jb), B.spread(ub),
                     rat(med(jb), med(ub))],
                    ["8 B SEND round trip µs (2 × t_typical) vs tcp_bench busy-poll ping-pong", B.spread(jrtt),
                     B.spread(pp), rat(med(jrtt), med(pp))],
                ]) + "\n")
        if self.wrong:
            A("**Wrong results:** " + "; ".join(f"{i} {t} round {r + 1} size {s}" for i, t, r, s in self.wrong) + "\n")
        if self.fail:
            A("**Failed runs:** " + "; ".join(f"{label}: {msg}" for label, msg in self.fail) + "\n")
        return "\n".join(md)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--parts", default="coll,shm,tcp", help="coll (nccl-tests), shm and tcp (perftest)")
    ap.add_argument("-b", dest="min_bytes", default="4")
    ap.add_argument("-e", dest="max_bytes", default="64M")
    ap.add_argument("-f", dest="factor", type=int, default=4)
    ap.add_argument("-n", dest="iters", type=int, default=100)
    ap.add_argument("-w", dest="warmup", type=int, default=20)
    ap.add_argument("--no-gloo", dest="gloo", action="store_false", help="leave torch gloo out")
    ap.add_argument("--quick", action="store_true", help="1 round, 4 B - 1 MiB, -n 20, no retries")
    ap.add_argument("--retries", type=int, default=1)
    ap.add_argument("--max-foreign", type=float, default=15.0)
    ap.add_argument("--quiet-wait", type=float, default=20.0)
    ap.add_argument("--quiet-budget", type=float, default=300.0)
    ap.add_argument("--skip-setup", action="store_true")
    ap.add_argument("--no-doc", action="store_true")
    ap.add_argument("--out")
    a = ap.parse_args()
    a.parts = [p.strip() for p in a.parts.split(",")]
    if a.quick:
        a.rounds, a.retries, a.quiet_wait, a.max_bytes, a.iters = 1, 0, 5, "1M", 20
    t0 = time.monotonic()
    t = Tools(a)
    B.log(f"results in {t.res}")
    t.go()
    text = t.report(t0)
    with open(os.path.join(t.res, "tools.md"), "w") as f:
        f.write(text)
    print(text)
    if not a.no_doc:
        B.update_section(os.path.join(B.ROOT, "docs", "performance-results.md"), "bench/tools", text)
        B.log("updated docs/performance-results.md (bench/tools section)")
    return 1 if t.wrong else 0


if __name__ == "__main__":
    sys.exit(main())
