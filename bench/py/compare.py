"""bench/compare: JCCL collectives against Open MPI, MPICH-free peers and torch.distributed gloo, in one run.

For every configuration (2 ranks over shm; 4 ranks oversubscribed on the 2 cores; 2 ranks forced over TCP) it runs
JCCL's CollectiveBench and the peers' programs (shared/peers: mpi_coll.c, mpi_coll.py, gloo_coll.py) in alternating
order, for --rounds rounds (the order is reversed every other round), each run gated on a quiet machine and
retried once when other tenants used > 15 % of the CPU (shared/peers/measure.py's rule). Every program uses the
same method (mpi_coll.c: warm-up 3, estimate 5, iters = 0.2 s / estimate, 5 blocks, block time = MAX over ranks,
median over blocks). A table cell is the median over rounds of the per-run medians, [min-max] over rounds.
It also measures the memcpy / reduce ceilings (memcpy_bw, reduce_bw) and start-up (in-process and launcher wall
time) in the same run, and writes the section between <!-- bench/compare:begin --> and <!-- bench/compare:end -->
of docs/performance-results.md with the machine, the versions, the tables, the JCCL/peer ratios and each target met or not.
"""
import argparse
import glob
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as B  # noqa: E402

MIB = B.MIB
FULL_AR = [8, 1024, 65536, MIB, 16 * MIB, 64 * MIB]
BC_AG = [MIB, 16 * MIB]
INPLACE = "allreduce_inplace"   # CollectiveBench's in-place all-reduce (send buffer = receive buffer)
OMPI = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "pml", "ob1"]
HERE = os.path.dirname(os.path.abspath(__file__))
NETNS_PREFIX = os.environ.get("JCCL_BENCH_NETNS_PREFIX", "jbench")   # not "jccl": the tcp tests use that one
BENCH_JAR = os.path.join(B.ROOT, "jccl-benchmarks", "target", "jccl-benchmarks-0.2.0.jar")
BENCH_CP = f"{BENCH_JAR}:{os.path.join(B.ROOT, 'jccl-benchmarks', 'target', 'lib')}/*"
JVM_FLAGS = ["--enable-native-access=ALL-UNNAMED", "--add-modules", "jdk.incubator.vector"]

NAMES = {
    "jccl-shm": "JCCL shm", "jccl-tcp": "JCCL tcp", "jccl-netns": "JCCL tcp (netns)",
    "ompi-c": "Open MPI C", "ompi-mpi4py": "Open MPI mpi4py", "ompi-c-tcp": "Open MPI C (btl tcp)",
    "torch-gloo": "torch gloo", "torch-gloo-netns": "torch gloo (netns)",
}


def spec_of(sizes_ar, sizes_bcag):
    s = "allreduce:" + ",".join(str(x) for x in sizes_ar)
    if sizes_bcag:
        s += ";bcast:" + ",".join(str(x) for x in sizes_bcag) + ";allgather:" + ",".join(str(x) for x in sizes_bcag)
    return s


def why(err):
    """The most telling stderr lines of a failed run: exceptions first, else the last lines."""
    lines = [x.strip() for x in (err or "").splitlines()
             if x.strip() and not x.startswith("WARNING: Using incubator") and not x.startswith("\tat ")]
    key = [x for x in lines if "Exception" in x or "Error" in x or "error" in x or "rank" in x]
    return " / ".join((key or lines)[:3] if key else lines[-3:])[:400]


# tcp_stream cases (mode, buffer bytes): the patterns of a 2-rank broadcast (one way) and ring (both ways at once)
STREAM_CASES = (("oneway-spin", 16 * MIB), ("oneway-block", 16 * MIB), ("bidir", 16 * MIB), ("bidir", 64 * MIB))


def factor(op, n):
    return 2.0 * (n - 1) / n if op.startswith("allreduce") else (n - 1) / n if op == "allgather" else 1.0


class Harness:
    def __init__(self, a):
        self.a = a
        self.peers = B.ensure_peers(skip_setup=a.skip_setup)
        self.build = os.path.join(self.peers, "build")
        self.quiet = B.Quiet(max_wait=a.quiet_wait, budget=a.quiet_budget)
        self.samples = {}      # (config, impl, op, bytes) -> [median_us per run]
        self.failures = []     # (config, impl, round, message)
        self.startup = {}      # key -> [ms]
        self.startup_warmed = False
        self.ceil = {}         # (kind, bytes, threads) -> [GB/s]
        self.runs = []         # (label, wall, foreign)
        self.port = 29600 + os.getpid() % 300
        self.algo = {}         # (config, impl, op, bytes) -> algorithm JCCL picked
        self.env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                        OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", MASTER_ADDR="127.0.0.1")

    # ------------------------------------------------------------------ commands
    def jccl_cmd(self, np_, impl, spec, transport_env, main="io.jccl.benchmarks.CollectiveBench", args=None,
                 netns=False):
        java = [B.java_bin(), *JVM_FLAGS, *self.a.jvm_opt, "-cp", BENCH_CP, main]
        java += args if args is not None else [impl, spec, str(self.a.blocks), str(self.a.target),
                                               str(self.a.jit_warmup)]
        env = dict(self.env)
        env.update(transport_env)
        if netns:
            self.port += 1
            cmd = [B.PY, os.path.join(HERE, "netns_launch.py"), "--np", str(np_), "--style", "jccl",
                   "--prefix", NETNS_PREFIX, "--port", str(self.port), "--", *java]
        elif self.a.launcher == "jccl":
            cmd = [os.path.join(B.ROOT, "jccl"), "run", "-np", str(np_), "--no-prefix", "--", *java]
            env["JCCL_NO_BUILD"] = "1"
        else:  # direct: what ./jccl run sets, without the launcher JVM
            cmd = [B.PY, os.path.join(HERE, "launch.py"), str(np_), "--", *java]
        return cmd, env

    def peer_cmd(self, impl, np_, spec):
        b = self.build
        if impl == "ompi-c":
            return [*OMPI, "--mca", "btl", "self,vader", "-np", str(np_), f"{b}/mpi_coll_ompi", impl, spec,
                    str(self.a.blocks), str(self.a.target)]
        if impl == "ompi-c-tcp":
            return [*OMPI, "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo", "-np", str(np_),
                    f"{b}/mpi_coll_ompi", impl, spec, str(self.a.blocks), str(self.a.target)]
        if impl == "ompi-mpi4py":
            return [*OMPI, "--mca", "btl", "self,vader", "-np", str(np_), B.PY,
                    os.path.join(self.peers, "src", "mpi_coll.py"), "--impl", impl, "--ops", spec,
                    "--blocks", str(self.a.blocks), "--target", str(self.a.target)]
        if impl == "torch-gloo-netns":
            self.port += 1
            return [B.PY, os.path.join(HERE, "netns_launch.py"), "--np", str(np_), "--style", "torch", "--prefix",
                    NETNS_PREFIX, "--port", str(self.port), "--", B.PY, os.path.join(self.peers, "src", "gloo_coll.py"),
                    "--worker", "--np", str(np_), "--ops", spec, "--blocks", str(self.a.blocks), "--target",
                    str(self.a.target), "--impl", impl]
        if impl == "torch-gloo":
            return [B.PY, os.path.join(self.peers, "src", "gloo_coll.py"), "--np", str(np_), "--ops", spec,
                    "--blocks", str(self.a.blocks), "--target", str(self.a.target)]
        raise ValueError(impl)

    # ------------------------------------------------------------------ running
    def run_coll(self, config, impl, np_, spec, rnd, cmd, env):
        label = f"{config} {impl} np{np_} round{rnd}"
        self.quiet.wait(label)
        r = B.run_measured(label, cmd, env=env, timeout=self.a.timeout, retries=self.a.retries,
                           max_foreign=self.a.max_foreign, raw_name=f"{config}.{impl}.np{np_}.round{rnd}.txt")
        self.runs.append((label, r.wall, r.foreign, r.rc))
        rows = B.parse_coll_csv(r.out)
        for line in r.out.splitlines():
            if line.startswith("# algorithm "):
                try:
                    what, algo = line[len("# algorithm "):].split(":", 1)
                    op, nbytes = what.split()
                    self.algo[(config, impl, op, int(nbytes))] = algo.strip()
                except ValueError:
                    pass
        want = len([1 for part in spec.split(";") for _ in part.split(":")[1].split(",")])
        if r.rc != 0 or len(rows) < want:
            self.failures.append((config, impl, rnd, f"exit {r.rc}, {len(rows)}/{want} rows; " + why(r.err)))
        for row in rows:
            self.samples.setdefault((config, impl, row["op"], row["bytes"]), []).append(row["us"])

    def ceilings(self, label):
        if "tcp" in self.a.configs:
            # The loopback TCP ceiling for a 2-rank ring: both directions at once (iperf3 --bidir, 1 stream each).
            self.port += 1
            self.quiet.wait(f"iperf3 bidir {label}")
            r = B.run_measured(f"iperf3 bidir {label}", B.iperf3_cmd(self.port, 3, bidir=True),
                               raw_name=f"iperf3.bidir.{label}.json", timeout=60, retries=self.a.retries)
            fwd, rev = B.parse_iperf3(r.out), B.parse_iperf3(r.out, "sum_received_bidir_reverse")
            if fwd is not None and rev is not None:
                self.ceil.setdefault(("tcp_bidir", MIB, 1), []).append(min(fwd, rev))
                self.ceil.setdefault(("tcp_bidir", MIB, 2), []).append(fwd + rev)
            self.port += 1
            self.quiet.wait(f"iperf3 {label}")
            r = B.run_measured(f"iperf3 {label}", B.iperf3_cmd(self.port, 3), raw_name=f"iperf3.{label}.json",
                               timeout=60, retries=self.a.retries)
            one_way = B.parse_iperf3(r.out)
            if one_way is not None:
                self.ceil.setdefault(("tcp_one_way", MIB, 1), []).append(one_way)
        self.stream_ceilings(label)
        self.pair_ceilings(label)
        for prog, kind in (("memcpy_bw", "memcpy"), ("reduce_bw", "reduce")):
            self.quiet.wait(f"{prog} {label}")
            r = B.run_measured(f"{prog} {label}", [os.path.join(self.build, prog), str(self.a.c_trials)],
                               raw_name=f"{prog}.{label}.csv", timeout=300, retries=self.a.retries)
            for line in r.out.splitlines():
                p = line.split(",")
                if len(p) >= 4 and p[0] == kind:
                    self.ceil.setdefault((kind, int(p[1]), int(p[2])), []).append(float(p[3]))

    def stream_ceilings(self, label, netns=True):
        """TCP ceilings with the collectives' buffer sizes (bench/c/tcp_stream.c): one connection, one thread per end,
        non-blocking sockets, as tcp0 runs. Over loopback ("tcp") and between the two namespaces ("netns")."""
        where = [(cfg, path) for cfg, path in (("tcp", "lo"), ("netns", "netns"))
                 if cfg in self.a.configs and (netns or cfg != "netns")]
        if not where:
            return
        exe = B.c_binary("tcp_stream")
        for cfg, path in where:
            for mode, size in STREAM_CASES:
                self.port += 1
                if path == "lo":
                    srv, cli = f"{exe} serve {self.port}", f"{exe} run 127.0.0.1 {self.port} {mode} {size} 2"
                else:
                    srv = f"ip netns exec {NETNS_PREFIX}-h1 {exe} serve {self.port}"
                    cli = f"ip netns exec {NETNS_PREFIX}-h2 {exe} run 10.77.0.1 {self.port} {mode} {size} 2"
                what = f"tcp_stream {path} {mode} {B.hsize(size)} {label}"
                self.quiet.wait(what)
                r = B.run_measured(what, ["bash", "-c", f"{srv} & {cli}; wait"], timeout=60, retries=self.a.retries,
                                   raw_name=f"tcp_stream.{path}.{mode}.{size}.{label}.csv")
                for line in r.out.splitlines():
                    p = line.split(",")
                    if len(p) == 5 and p[0] == "tcp_stream":
                        fwd, rev = float(p[3]), float(p[4])
                        self.ceil.setdefault((f"stream_{cfg}_{mode}", size, 1),
                                             []).append(min(fwd, rev) if mode == "bidir" else fwd)

    def pair_ceilings(self, label):
        """The two-rank all-reduce's memory ceiling in C (bench/c/pair_allreduce_bw.c): two threads, the whole-vector,
        split, split-with-streaming-stores and in-place patterns, at the sizes where the shm targets are
        memory-bound."""
        if "shm" not in self.a.configs:
            return
        exe = B.c_binary("pair_allreduce_bw", flags=("-O3", "-march=native", "-pthread"))
        for size, reps in ((16 * MIB, 40), (64 * MIB, 20)):
            what = f"pair_allreduce_bw {B.hsize(size)} {label}"
            self.quiet.wait(what)
            r = B.run_measured(what, [exe, str(size), str(reps)], timeout=120, retries=self.a.retries,
                               raw_name=f"pair_allreduce_bw.{size}.{label}.csv")
            for line in r.out.splitlines():
                p = line.split(",")
                if len(p) == 5 and p[0] == "pair_allreduce":
                    self.ceil.setdefault((f"pair_{p[1]}", int(p[2]), 1), []).append(float(p[3]))

    def stream_ceiling(self, cfg, op, nbytes):
        """The TCP ceiling of a 2-rank collective's busbw at nbytes (GB/s, median over the run's measurements):
        a broadcast streams one way (the faster receiver pattern); a ring all-reduce or all-gather sends and
        receives at once (for 2 ranks busbw = bytes each way / time, so the bound is the per-direction figure)."""
        size = 64 * MIB if nbytes >= 64 * MIB else 16 * MIB
        modes = ("oneway-spin", "oneway-block") if op == "bcast" else ("bidir",)
        vals = [B.median(self.ceil.get((f"stream_{cfg}_{m}", size, 1), [])) for m in modes]
        vals = [v for v in vals if v is not None]
        return max(vals) if vals else None

    def startup_round(self, rnd):
        """JCCL: StartupProbe under the launcher (in-process ms, and wall of the whole command). Open MPI (vader):
        mpi_init under mpirun, same two figures."""
        n = self.a.startup_launches
        for impl in (["jccl", "ompi-vader"] if rnd % 2 == 0 else ["ompi-vader", "jccl"]):
            self.quiet.wait(f"startup {impl} round{rnd}")
            if impl == "jccl" and not self.startup_warmed:
                # The first launch of a new build trains the AOT caches (./jccl's launcher cache and the probe's
                # rank cache, docs/tools.md "Start-up"); it is timed apart as "first launch" and not in the medians.
                self.startup_warmed = True
                cmd, env = self.jccl_cmd(2, None, None, self.transport_env("shm"),
                                         main="io.jccl.benchmarks.StartupProbe", args=[])
                r = B.run_measured("startup jccl first-launch", cmd, env=env, timeout=120, retries=0,
                                   raw_name="startup.jccl.first-launch.txt")
                if r.rc == 0:
                    self.startup.setdefault(("jccl", "first_wall"), []).append(r.wall * 1e3)
            for i in range(n):
                if impl == "jccl":
                    cmd, env = self.jccl_cmd(2, None, None, self.transport_env("shm"),
                                             main="io.jccl.benchmarks.StartupProbe", args=[])
                else:
                    cmd, env = [*OMPI, "--mca", "btl", "self,vader", "-np", "2", f"{self.build}/mpi_init_ompi"], self.env
                r = B.run_measured(f"startup {impl} round{rnd}.{i}", cmd, env=env, timeout=60, retries=0,
                                   raw_name=f"startup.{impl}.round{rnd}.{i}.txt")
                if r.rc != 0:
                    self.failures.append(("startup", impl, rnd, f"exit {r.rc}: " + why(r.err)))
                    break
                self.startup.setdefault((impl, "wall"), []).append(r.wall * 1e3)
                for line in r.out.splitlines():
                    p = line.strip().split(",")
                    if p[0] == "jccl_init" and len(p) >= 5:
                        self.startup.setdefault((impl, "create"), []).append(float(p[2]))
                        self.startup.setdefault((impl, "ready"), []).append(float(p[3]))
                        self.startup.setdefault((impl, "since_start"), []).append(float(p[4]))
                    elif p[0] == "mpi_init" and len(p) >= 4:
                        self.startup.setdefault((impl, "create"), []).append(float(p[2]))
                        self.startup.setdefault((impl, "ready"), []).append(float(p[3]))

    def transport_env(self, kind):
        pairs = self.a.jccl_env_shm if kind == "shm" else self.a.jccl_env_tcp
        return dict(kv.split("=", 1) for kv in pairs)

    def plan(self):
        a = self.a
        ar = FULL_AR
        s2 = spec_of(ar, BC_AG)
        jobs = []  # (config, impl, np, spec, kind) ; kind: jccl-shm / jccl-tcp / peer
        if "shm" in a.configs:
            # gloo has only the in-place all-reduce (torch's all_reduce(tensor)); JCCL runs both, and its in-place
            # one is what the gloo ratio compares (CollectiveBench's allreduce_inplace).
            s2_shm = s2 + ";" + INPLACE + ":" + ",".join(str(x) for x in ar)
            jobs += [("shm", "jccl-shm", 2, s2_shm, "shm"), ("shm", "ompi-c", 2, s2, None),
                     ("shm", "ompi-mpi4py", 2, s2, None), ("shm", "torch-gloo", 2, s2, None)]
        if "tcp" in a.configs:
            jobs += [("tcp", "jccl-tcp", 2, s2, "tcp"), ("tcp", "ompi-c-tcp", 2, s2, None)]
            if "shm" not in a.configs:
                jobs += [("shm", "torch-gloo", 2, s2, None)]
        if "netns" in a.configs:
            jobs += [("netns", "jccl-netns", 2, s2, "netns"), ("netns", "torch-gloo-netns", 2, s2, None)]
        if "np4" in a.configs:
            jobs += [("np4", "jccl-shm", 4, s2, "shm"), ("np4", "ompi-mpi4py", 4, s2, None)]
            if a.gloo_np4:
                jobs += [("np4", "torch-gloo", 4, s2, None)]
        return jobs

    def netns(self, action):
        script = os.path.join(B.ROOT, "scripts", "netns.sh")
        env = dict(os.environ, JCCL_NETNS_PREFIX=NETNS_PREFIX)
        r = B.run_measured(f"netns {action}", ["bash", script, *action.split()], env=env, timeout=120, retries=0,
                           raw_name=f"netns.{action.split()[0]}.txt")
        return r.rc == 0

    def go(self):
        if "netns" in self.a.configs:
            if not os.path.exists(os.path.join(B.ROOT, "scripts", "netns.sh")) or os.geteuid() != 0 \
                    or not self.netns("up 2"):
                B.log("netns test bed not available (scripts/netns.sh up 2 failed or not root): skipping netns")
                self.failures.append(("netns", "setup", 0, "scripts/netns.sh up 2 failed or not root; skipped"))
                self.a.configs.remove("netns")
        try:
            self.go_rounds()
        finally:
            if "netns" in self.a.configs:
                self.netns("down")

    def go_rounds(self):
        jobs = self.plan()
        self.ceilings("start")
        for rnd in range(self.a.rounds):
            order = jobs if rnd % 2 == 0 else list(reversed(jobs))
            # alternate JCCL and peers: interleave the JCCL jobs between the peer jobs
            jj = [j for j in order if j[4]]
            pp = [j for j in order if not j[4]]
            seq = []
            while jj or pp:
                if jj:
                    seq.append(jj.pop(0))
                if pp:
                    seq.append(pp.pop(0))
            B.log(f"=== round {rnd + 1}/{self.a.rounds}: " + ", ".join(f"{c}:{i}" for c, i, *_ in seq))
            # The machine's memory and loopback state drifts within a run (the C two-rank all-reduce measured
            # 3.2 ms at the start of one run and 6.7 ms at its end): the ceilings the verdicts quote are measured
            # in every round too, next to the runs they bound.
            self.pair_ceilings(f"round{rnd + 1}")
            self.stream_ceilings(f"round{rnd + 1}", netns=rnd < self.a.netns_rounds)
            for config, impl, np_, spec, kind in seq:
                if config == "netns" and rnd >= self.a.netns_rounds:
                    continue
                if kind:
                    cmd, env = self.jccl_cmd(np_, impl, spec, self.transport_env("tcp" if kind == "netns" else kind),
                                             netns=kind == "netns")
                else:
                    cmd, env = self.peer_cmd(impl, np_, spec), self.env
                self.run_coll(config, impl, np_, spec, rnd, cmd, env)
            if "startup" in self.a.configs:
                self.startup_round(rnd)
        self.ceilings("end")

    # ------------------------------------------------------------------ report
    def med(self, config, impl, op, nbytes):
        return B.median(self.samples.get((config, impl, op, nbytes), []))

    def cell_us(self, config, impl, op, nbytes):
        v = self.samples.get((config, impl, op, nbytes), [])
        return B.spread(v) if v else "—"

    def busbw(self, config, impl, op, nbytes, n):
        t = self.med(config, impl, op, nbytes)
        return None if t is None else factor(op, n) * nbytes / (t * 1e-6) / 1e9

    def best_ompi(self, config, op, nbytes):
        """Faster of Open MPI C and Open MPI mpi4py (median times): the strict comparison."""
        ts = [t for t in (self.med(config, "ompi-c", op, nbytes), self.med(config, "ompi-mpi4py", op, nbytes))
              if t is not None]
        return min(ts) if ts else None

    def memcpy_for(self, nbytes):
        size = MIB if nbytes <= MIB else 16 * MIB if nbytes <= 16 * MIB else 256 * MIB
        return B.median(self.ceil.get(("memcpy", size, 1), [])), size


def verdict(ok):
    return "n/a" if ok is None else ("**met**" if ok else "**not met**")


def report(h, a, t_start):
    md = []
    A = md.append
    A("## Collectives: JCCL vs Open MPI and Gloo (bench/compare)\n")
    A(f"Generated by `bench/compare {' '.join(sys.argv[1:])}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
      f" in {(time.monotonic() - t_start) / 60:.1f} min; {a.rounds} round(s), JCCL and peers alternating "
      f"(order reversed every other round). Cells: median over rounds of each run's median block time "
      f"(mpi_coll.c method: warm-up 3, estimate 5, iters = {a.target} s / estimate, {a.blocks} blocks, block time = "
      f"MAX over ranks), `[min–max]` over rounds. JCCL ranks first run each case at least 20000 times "
      f"and at least {a.jit_warmup} s, stopping at {a.jit_warmup} s ({10 * a.jit_warmup:.1f} s up to 64 KiB), then idle together until the JIT has compiled nothing for 0.1 s (0.25–3 s) "
      f"(JIT warm-up, and its queued compilations done; `--jit-warmup 0` = none). GB/s = 1e9 B/s. busbw = nccl-tests factor × bytes / median time "
      f"(allreduce 2(n−1)/n, allgather (n−1)/n, broadcast 1); allgather size = total output. Ratios > 1 mean JCCL is "
      f"better (busbw ratio = peer time / JCCL time).\n")
    A("```\n" + "\n".join(B.machine_lines() + B.version_lines()) + "\n```\n")
    # ceilings
    rows = []
    for kind, sizes, label in (("memcpy", (MIB, 16 * MIB, 256 * MIB), "memcpy (glibc) GB/s copied"),
                               ("reduce", (MIB, 16 * MIB, 64 * MIB), "reduce a+=b f32 GB/s read+written")):
        for s in sizes:
            rows.append([label, B.hsize(s), B.spread(h.ceil.get((kind, s, 1), [])),
                         B.spread(h.ceil.get((kind, s, 2), []))])
    A("### Memory ceilings measured in this run (memcpy_bw, reduce_bw; start and end of the run)\n")
    A(B.md_table(["test", "size", "1 thread", "2 threads (aggregate)"], rows))

    targets = []  # (group, text, measured, ok)

    def tcell(v):
        return B.fmt(v) if v is not None else "—"

    # ---- 2 ranks shm
    if "shm" in a.configs:
        A("### 2 ranks, shared memory: allreduce float32 sum (out-of-place; in place beside gloo)\n")
        A("Open MPI: `mpirun --allow-run-as-root --mca pml ob1 --mca btl self,vader` (vader + CMA). gloo is TCP on "
          "loopback (it has no shared-memory transport) and allreduces in place: torch's `all_reduce(tensor)` has "
          "no other form, and DDP's gradient buckets use it. JCCL runs both forms: out of place against Open MPI's "
          "out-of-place `MPI_Allreduce`, in place (`JCCL in-place`, send buffer = receive buffer) against gloo. "
          "`JCCL oop/gloo` is the out-of-place figure over gloo's in-place one, for reference.\n")
        impls = ["jccl-shm", "ompi-c", "ompi-mpi4py", "torch-gloo"]
        rows = []
        for s in FULL_AR:
            bj = h.busbw("shm", "jccl-shm", "allreduce", s, 2)
            bji = h.busbw("shm", "jccl-shm", INPLACE, s, 2)
            bo = h.busbw("shm", "ompi-c", "allreduce", s, 2)
            bg = h.busbw("shm", "torch-gloo", "allreduce", s, 2)
            mc, msz = h.memcpy_for(s)
            rows.append([B.hsize(s), h.algo.get(("shm", "jccl-shm", "allreduce", s), "?")]
                        + [h.cell_us("shm", i, "allreduce", s) for i in impls]
                        + [h.cell_us("shm", "jccl-shm", INPLACE, s)]
                        + [tcell(bj), tcell(bo), tcell(bg), B.fmt(B.ratio(bj, bo), 2), B.fmt(B.ratio(bji, bg), 1),
                           B.fmt(B.ratio(bj, bg), 1), B.fmt(B.ratio(bj, mc), 2)])
        A(B.md_table(["size", "JCCL algo", "JCCL µs", "Open MPI C µs", "mpi4py µs", "gloo µs", "JCCL in-place µs",
                      "JCCL busbw", "OMPI C busbw", "gloo busbw", "JCCL/OMPI C", "JCCL in-place/gloo",
                      "JCCL oop/gloo", "JCCL busbw / memcpy 1T"], rows))
        A("`JCCL busbw / memcpy 1T`: JCCL's busbw divided by single-thread glibc memcpy GB/s (bytes copied) measured "
          "in this run at 1 MiB (for sizes ≤ 1 MiB), 16 MiB, or 256 MiB (for 64 MiB).\n")
        pair_sizes = [n for n in (16 * MIB, 64 * MIB) if h.ceil.get(("pair_split", n, 1))]
        if pair_sizes:
            A("The two-rank all-reduce in C on the same machine (`bench/c/pair_allreduce_bw.c`; at the start, in every "
              "round and at the end of the run, median [min–max] µs): two threads over four shared buffers, `whole` = each computes the whole vector, `split` = "
              "each computes its half into both outputs (the least memory traffic; JCCL's path when all four buffers "
              "are `Communicator.allocate()` memory), `split-nt` = the same with streaming stores, which Java code "
              "cannot issue, `inplace` = split with each output its own input (no store needs a read for "
              "ownership: the line was just read); `allgather copies` = the two-rank all-gather of that total output size, each "
              "thread copying its own input and the peer's into its output with glibc memcpy.\n")
            A(B.md_table(["size", "whole µs", "split µs", "split-nt µs", "JCCL µs", "inplace µs", "JCCL in-place µs",
                          "allgather copies µs", "JCCL allgather µs"],
                         [[B.hsize(n)] + [B.spread(h.ceil.get((f"pair_{pt}", n, 1), []), 0)
                                          for pt in ("whole", "split", "split-nt")]
                          + [tcell(h.med("shm", "jccl-shm", "allreduce", n)),
                             B.spread(h.ceil.get(("pair_inplace", n, 1), []), 0),
                             tcell(h.med("shm", "jccl-shm", INPLACE, n)),
                             B.spread(h.ceil.get(("pair_allgather", n, 1), []), 0),
                             tcell(h.med("shm", "jccl-shm", "allgather", n))] for n in pair_sizes]))
        for s in (8, 1024):
            tj, to = h.med("shm", "jccl-shm", "allreduce", s), h.med("shm", "ompi-c", "allreduce", s)
            tb = h.best_ompi("shm", "allreduce", s)
            targets.append(("2 ranks shm", f"allreduce time at {B.hsize(s)} ≤ Open MPI C",
                            f"{tcell(tj)} µs vs {tcell(to)} µs", None if tj is None or to is None else tj <= to,
                            None if tj is None or tb is None else tj <= tb))
        for s in (65536, MIB, 16 * MIB, 64 * MIB):
            bj, bo = h.busbw("shm", "jccl-shm", "allreduce", s, 2), h.busbw("shm", "ompi-c", "allreduce", s, 2)
            r = B.ratio(bj, bo)
            tj, tb = h.med("shm", "jccl-shm", "allreduce", s), h.best_ompi("shm", "allreduce", s)
            targets.append(("2 ranks shm", f"allreduce busbw at {B.hsize(s)} ≥ 2× Open MPI C",
                            f"{tcell(bj)} vs {tcell(bo)} GB/s = {B.fmt(r, 2)}×" if r is not None
                            else f"{tcell(bj)} vs {tcell(bo)} GB/s", None if r is None else r >= 2,
                            None if tj is None or tb is None else tb / tj >= 2))
        for s in FULL_AR:
            # Like for like: JCCL's in-place all-reduce against gloo's (the only form gloo has); the out-of-place
            # ratio is quoted beside it.
            bji, bj = h.busbw("shm", "jccl-shm", INPLACE, s, 2), h.busbw("shm", "jccl-shm", "allreduce", s, 2)
            bg = h.busbw("shm", "torch-gloo", "allreduce", s, 2)
            r, roop = B.ratio(bji, bg), B.ratio(bj, bg)
            text = (f"in place {B.fmt(r, 1)}× (out of place {B.fmt(roop, 1)}×)" if r is not None
                    else f"out of place {B.fmt(roop, 1)}×" if roop is not None else "—")
            inplace = B.median(h.ceil.get(("pair_inplace", s, 1), []))
            tg = h.med("shm", "torch-gloo", "allreduce", s)
            if r is not None and r < 10 and inplace is not None and tg is not None:
                # How far the machine itself is from the target: the same pattern in C.
                text += f"; 10× needs ≤ {B.fmt(tg / 10, 0)} µs, C in place {B.fmt(inplace, 0)} µs"
            targets.append(("2 ranks shm", f"allreduce busbw at {B.hsize(s)} ≥ 10× gloo (both in place)", text,
                            None if r is None else r >= 10))
        A("### 2 ranks, shared memory: broadcast and allgather — µs per op (busbw GB/s)\n")
        rows = []
        for op in ("bcast", "allgather"):
            for s in BC_AG:
                cells = []
                for i in impls:
                    t, b = h.med("shm", i, op, s), h.busbw("shm", i, op, s, 2)
                    cells.append("—" if t is None else f"{h.cell_us('shm', i, op, s)} ({B.fmt(b)})")
                bj, bo = h.busbw("shm", "jccl-shm", op, s, 2), h.busbw("shm", "ompi-c", op, s, 2)
                bg = h.busbw("shm", "torch-gloo", op, s, 2)
                rows.append([op, B.hsize(s), h.algo.get(("shm", "jccl-shm", op, s), "?")] + cells
                            + [B.fmt(B.ratio(bj, bo), 2), B.fmt(B.ratio(bj, bg), 1)])
                r = B.ratio(bj, bo)
                tj, tb = h.med("shm", "jccl-shm", op, s), h.best_ompi("shm", op, s)
                text = (f"{tcell(bj)} vs {tcell(bo)} GB/s = {B.fmt(r, 2)}×" if r is not None
                        else f"{tcell(bj)} vs {tcell(bo)} GB/s")
                copy = B.median(h.ceil.get(("pair_allgather", s, 1), [])) if op == "allgather" else None
                to = h.med("shm", "ompi-c", op, s)
                if r is not None and r < 1.5 and copy is not None and to is not None:
                    # How far the machine itself is from the target: the same copies in C.
                    text += f"; 1.5× needs ≤ {B.fmt(to / 1.5, 0)} µs, C copies {B.fmt(copy, 0)} µs"
                targets.append(("2 ranks shm", f"{op} busbw at {B.hsize(s)} ≥ 1.5× Open MPI C", text,
                                None if r is None else r >= 1.5,
                                None if tj is None or tb is None else tb / tj >= 1.5))
        A(B.md_table(["op", "size", "JCCL algo", "JCCL", "Open MPI C", "mpi4py", "gloo", "JCCL/OMPI C", "JCCL/gloo"],
                     rows))

    # ---- 4 ranks oversubscribed
    if "np4" in a.configs:
        A("### 4 ranks OVERSUBSCRIBED on 2 cores: allreduce float32 sum — µs per op\n")
        A("Open MPI mpi4py as in shared/peers (ob1 + vader, `--oversubscribe`: Open MPI yields when idle). "
          "Only tells how badly things degrade; not a scaling result.\n")
        impls = ["jccl-shm", "ompi-mpi4py"] + (["torch-gloo"] if a.gloo_np4 else [])
        rows = []
        for s in FULL_AR:
            tj, tp = h.med("np4", "jccl-shm", "allreduce", s), h.med("np4", "ompi-mpi4py", "allreduce", s)
            rows.append([B.hsize(s), h.algo.get(("np4", "jccl-shm", "allreduce", s), "?")]
                        + [h.cell_us("np4", i, "allreduce", s) for i in impls]
                        + [tcell(h.busbw("np4", "jccl-shm", "allreduce", s, 4)),
                           tcell(h.busbw("np4", "ompi-mpi4py", "allreduce", s, 4)), B.fmt(B.ratio(tp, tj), 2)])
            targets.append(("4 ranks oversubscribed", f"allreduce time at {B.hsize(s)} ≤ Open MPI mpi4py",
                            f"{tcell(tj)} vs {tcell(tp)} µs", None if tj is None or tp is None else tj <= tp))
        A(B.md_table(["size", "JCCL algo"] + [f"{NAMES[i]} µs" for i in impls] + ["JCCL busbw", "mpi4py busbw",
                                                                       "mpi4py time / JCCL time"], rows))
        rows = []
        for op in ("bcast", "allgather"):
            for s in BC_AG:
                rows.append([op, B.hsize(s)] + [
                    "—" if h.med("np4", i, op, s) is None else
                    f"{h.cell_us('np4', i, op, s)} ({B.fmt(h.busbw('np4', i, op, s, 4))})" for i in impls])
        A("4 ranks oversubscribed, broadcast / allgather — µs per op (busbw GB/s):\n")
        A(B.md_table(["op", "size"] + [NAMES[i] for i in impls], rows))

    # ---- tcp (one host, forced) and netns (two namespaces = two hosts)
    for cfg, jimpl, gcfg, gimpl, title, desc in (
            ("tcp", "jccl-tcp", "shm", "torch-gloo", "2 ranks over TCP on loopback (JCCL forced to tcp0)",
             "gloo is the same run as in the shm table (gloo always uses TCP); Open MPI C with `--mca btl self,tcp` "
             "for reference."),
            ("netns", "jccl-netns", "netns", "torch-gloo-netns",
             f"2 ranks on two network-namespace hosts (scripts/netns.sh: veth + bridge, no shaping; "
             f"{min(a.rounds, a.netns_rounds)} round(s))",
             "Rank i runs in namespace h(i+1) (10.77.0.i+1, eth0); JCCL gets `JCCL_HOST_ID=h1/h2` so it treats them "
             "as two hosts (tcp0, no direct path); gloo with `GLOO_SOCKET_IFNAME=eth0`.")):
        if cfg not in a.configs:
            continue
        A(f"### {title}\n")
        A(f"JCCL with `{' '.join(a.jccl_env_tcp)}`; {desc} µs per op (busbw GB/s).\n")
        if cfg == "tcp" and h.ceil.get(("tcp_bidir", MIB, 1)):
            A(f"Loopback TCP ceiling in this run (start and end): iperf3 `--bidir -l 1M`, one stream each way at once, "
              f"{B.spread(h.ceil[('tcp_bidir', MIB, 1)])} GB/s per direction "
              f"({B.spread(h.ceil.get(('tcp_bidir', MIB, 2), []))} GB/s both together). A 2-rank ring all-reduce "
              f"sends N bytes each way (N/2 reduce-scatter + N/2 all-gather) while receiving as much, so its busbw "
              f"(= N / t for 2 ranks) cannot exceed the per-direction figure, before any reduction work; nor can a "
              f"2-rank all-gather's (each rank sends N/2 while receiving N/2). One stream one way (iperf3 `-l 1M`, the "
              f"bound for a broadcast's busbw): {B.spread(h.ceil.get(('tcp_one_way', MIB, 1), []))} GB/s.\n")
        if any(h.ceil.get((f"stream_{cfg}_{m}", n, 1)) for m, n in STREAM_CASES):
            A(f"TCP ceilings in this run ({'loopback' if cfg == 'tcp' else 'between the two namespaces'}; "
              "`bench/c/tcp_stream.c`: one connection, one thread per end, non-blocking sockets, 4 MiB socket "
              "buffers, 1 MiB per call, page-aligned pre-touched buffers of the collective's size; at the start, in "
              "every round and at the end of the run, median [min–max] GB/s; bidir per direction). A broadcast's busbw is bounded by the faster one-way figure, a "
              "2-rank ring all-reduce's or all-gather's by the bidir one (each rank sends N bytes, resp. N/2, while "
              "receiving as much; busbw = that / time), before any reduction work.\n")
            A(B.md_table(["pattern", "buffer", "GB/s"],
                         [[m, B.hsize(n), B.spread(h.ceil.get((f"stream_{cfg}_{m}", n, 1), []))]
                          for m, n in STREAM_CASES]))
        impls = [(cfg, jimpl), (gcfg, gimpl)] + ([("tcp", "ompi-c-tcp")] if cfg == "tcp" else [])
        rows = []
        for op, sizes in (("allreduce", FULL_AR), ("bcast", BC_AG), ("allgather", BC_AG)):
            for s in sizes:
                cells = ["—" if h.med(c, i, op, s) is None else
                         f"{h.cell_us(c, i, op, s)} ({B.fmt(h.busbw(c, i, op, s, 2))})" for c, i in impls]
                bj, bg = h.busbw(cfg, jimpl, op, s, 2), h.busbw(gcfg, gimpl, op, s, 2)
                rows.append([op, B.hsize(s), h.algo.get((cfg, jimpl, op, s), "?")] + cells
                            + [B.fmt(B.ratio(bj, bg), 2)])
                if s >= MIB:
                    r = B.ratio(bj, bg)
                    text = f"{B.fmt(r, 2)}×" if r is not None else "—"
                    ceiling = h.stream_ceiling(cfg, op, s) if s >= 16 * MIB else None
                    if r is not None and r < 2 and ceiling is not None:
                        # Say whether the target is above what one TCP connection carries here at all.
                        text += (f"; 2× needs {B.fmt(2 * bg)} GB/s, TCP ceiling {B.fmt(ceiling)} "
                                 f"({'above' if 2 * bg > ceiling else 'below'} it), JCCL at "
                                 f"{B.fmt(100 * bj / ceiling, 0)} % of it")
                    targets.append((f"2 ranks {cfg}", f"{op} busbw at {B.hsize(s)} ≥ 2× gloo", text,
                                    None if r is None else r >= 2))
        A(B.md_table(["op", "size", "JCCL algo", "JCCL", "gloo"] + (["Open MPI C btl tcp"] if cfg == "tcp" else [])
                     + ["JCCL/gloo busbw"], rows))
        tj, tg = h.med(cfg, jimpl, "allreduce", 8), h.med(gcfg, gimpl, "allreduce", 8)
        targets.append((f"2 ranks {cfg}", "allreduce time at 8 B ≤ 1/10 of gloo",
                        f"{tcell(tj)} vs {tcell(tg)} µs (= {B.fmt(B.ratio(tj, tg), 3)})",
                        None if tj is None or tg is None else tj <= tg / 10))

    # ---- startup
    if "startup" in a.configs:
        A("### Start-up, 2 local ranks\n")
        A("In-process: from `main` to communicator ready and to the end of the first barrier, MAX over ranks "
          "(JCCL: `StartupProbe`; Open MPI: mpi_init.c, `MPI_Init` and `MPI_Init` + `MPI_Barrier`). Wall: the whole "
          f"launch (`./jccl run -np 2 … StartupProbe` / `mpirun -np 2 --mca btl self,vader mpi_init`), "
          f"{a.startup_launches} launches per round. Median [min–max] over all launches, ms.\n")
        rows = []
        for impl, name in (("jccl", "JCCL (shm)"), ("ompi-vader", "Open MPI (btl self,vader)")):
            rows.append([name, B.spread(h.startup.get((impl, "create"), []), 1),
                         B.spread(h.startup.get((impl, "ready"), []), 1),
                         B.spread(h.startup.get((impl, "since_start"), []), 0) if impl == "jccl" else "—",
                         B.spread(h.startup.get((impl, "wall"), []), 0)])
        A(B.md_table(["impl", "init / communicator ms", "+ first barrier ms", "process start → barrier done ms",
                      "launch wall ms"], rows))
        first = h.startup.get(("jccl", "first_wall"), [])
        A("JCCL ranks and the `jccl run` launcher start from JDK AOT caches (`-XX:AOTCache`, built by the first "
          "launch after a build: one untimed launch before the medians"
          + (f", its wall {B.spread(first, 0)} ms" if first else "") + "; `JCCL_AOT=0` turns them off).\n")
        ready = B.median(h.startup.get(("jccl", "ready"), []))
        wall = B.median(h.startup.get(("jccl", "wall"), []))
        targets.append(("start-up", "communicator creation + first barrier ≤ 100 ms of main (2 local ranks)",
                        f"{tcell(ready)} ms", None if ready is None else ready <= 100))
        targets.append(("start-up", "`jccl run -np 2` of a one-barrier program ≤ 1.5 s wall",
                        f"{tcell(wall)} ms", None if wall is None else wall <= 1500))

    A("### Targets\n")
    targets = [t if len(t) == 5 else (*t, "") for t in targets]
    A("Verdicts against the peer the issue names (Open MPI = the C program unless it says mpi4py). The last column "
      "repeats the Open MPI targets against the faster of Open MPI C and Open MPI mpi4py in this run (stricter: "
      "mpi4py is sometimes faster than C here, see the tables).\n")
    A(B.md_table(["configuration", "target", "measured", "verdict", "vs faster Open MPI"],
                 [[g, t, m, verdict(ok), "" if st == "" else verdict(st)] for g, t, m, ok, st in targets]))
    met = sum(1 for t in targets if t[3])
    nm = sum(1 for t in targets if t[3] is None)
    A(f"{met} of {len(targets)} targets met in this run{'; ' + str(nm) + ' not measured' if nm else ''}.\n")
    if h.failures:
        A("### Failed runs\n")
        A(B.md_table(["configuration", "impl", "round", "what happened"],
                     [[c, i, str(r + 1), m.replace("|", "\\|")[:300]] for c, i, r, m in h.failures]))
    A("### Contamination\n")
    fo = [f for _, _, f, _ in h.runs]
    A(f"{len(h.runs)} benchmark runs; other tenants' CPU share during them (measure.py's foreign %): median "
      f"{B.fmt(B.median(fo), 1)} %, max {B.fmt(max(fo) if fo else None, 1)} %. Per-run log: "
      f"`{os.path.relpath(B.results_dir('compare'), B.ROOT)}/measure.log` (not committed).\n")
    return "\n".join(md), targets


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="1 round, 3 blocks of 0.05 s, 1 start-up launch, no retries")
    ap.add_argument("--configs", default="shm,np4,tcp,netns,startup",
                    help="comma list of shm,np4,tcp,netns,startup (netns needs root and scripts/netns.sh)")
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--target", type=float, default=0.2, help="seconds per block (mpi_coll.c's target)")
    ap.add_argument("--jit-warmup", type=float, default=1.0,
                    help="JCCL only: before mpi_coll.c's method, run each case at least 20000 times and at least this "
                         "many seconds, stopping at this many seconds (10x up to 64 KiB); 0 = exactly mpi_coll.c (the "
                         "first sizes then run cold)")
    ap.add_argument("--gloo-np4", action="store_true", help="also run gloo with 4 ranks (not a target)")
    ap.add_argument("--netns-rounds", type=int, default=1,
                    help="rounds of the netns configuration (default 1: it is the slowest, the run must fit a window)")
    ap.add_argument("--startup-launches", type=int, default=5)
    ap.add_argument("--launcher", choices=("jccl", "direct"), default="jccl",
                    help="start JCCL ranks with ./jccl run (default) or directly with the same environment")
    ap.add_argument("--jccl-env-shm", nargs="*", default=["JCCL_TRANSPORT=shm0"])
    ap.add_argument("--jccl-env-tcp", nargs="*", default=["JCCL_TRANSPORT=tcp0", "JCCL_SHM_DISABLE=1", "JCCL_DIRECT_DISABLE=1"])
    ap.add_argument("--jvm-opt", action="append", default=[], help="extra JVM option for JCCL ranks")
    ap.add_argument("--c-trials", default="3")
    ap.add_argument("--retries", type=int, default=1)
    ap.add_argument("--max-foreign", type=float, default=15.0)
    ap.add_argument("--quiet-wait", type=float, default=20.0)
    ap.add_argument("--quiet-budget", type=float, default=300.0)
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds per benchmark run (rows printed before a timeout are kept)")
    ap.add_argument("--skip-setup", action="store_true", help="do not apt-install missing peer packages")
    ap.add_argument("--no-doc", action="store_true", help="do not touch docs/performance-results.md")
    ap.add_argument("--out", help="results directory (default bench/results/compare-<stamp>)")
    ap.add_argument("--from-json", help="only rebuild the report from a previous run's samples.json")
    a = ap.parse_args()
    a.configs = [c.strip() for c in a.configs.split(",") if c.strip()]
    if a.quick:
        a.rounds, a.blocks, a.target, a.startup_launches, a.retries, a.c_trials = 1, 3, 0.05, 1, 0, "1"
        a.quiet_wait = 5
    t_start = time.monotonic()
    res = B.results_dir("compare", a.out)
    B.log(f"results in {res}")
    h = Harness(a)
    if a.from_json:
        d = json.load(open(a.from_json))
        h.samples = {tuple(int(x) if x.isdigit() else x for x in k.split("|")): v for k, v in d["samples"].items()}
        h.startup = {tuple(k.split("|")): v for k, v in d["startup"].items()}
        h.ceil = {(k.split("|")[0], int(k.split("|")[1]), int(k.split("|")[2])): v for k, v in d["ceilings"].items()}
        h.failures = [tuple(x) for x in d["failures"]]
        h.runs = [tuple(x) for x in d["runs"]]
        h.algo = {tuple(int(x) if x.isdigit() else x for x in k.split("|")): v for k, v in d.get("algo", {}).items()}
    else:
        h.go()
    text, targets = report(h, a, t_start)
    with open(os.path.join(res, "compare.md"), "w") as f:
        f.write(text)
    with open(os.path.join(res, "samples.json"), "w") as f:
        json.dump({"samples": {"|".join(map(str, k)): v for k, v in h.samples.items()},
                   "startup": {"|".join(k): v for k, v in h.startup.items()},
                   "ceilings": {"|".join(map(str, k)): v for k, v in h.ceil.items()},
                   "failures": h.failures, "runs": h.runs,
                   "algo": {"|".join(map(str, k)): v for k, v in h.algo.items()}}, f, indent=1)
    print(text)
    if not a.no_doc:
        B.update_section(os.path.join(B.ROOT, "docs", "performance-results.md"), "bench/compare", text)
        B.log("updated docs/performance-results.md (bench/compare section)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
