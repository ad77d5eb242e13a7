"""bench/verbs: JCCL verbs (./jccl perf ... --local) against ucx_perftest over shared memory and against
iperf3, the busy-polled C ping-pong (tcp_bench) and ucx_perftest over TCP on loopback — in one run.

Headline pairs run --rounds times in alternating order (JCCL, peer, JCCL, peer ...); the 8 B - 8 MiB sweep of WRITE,
READ and SEND (bandwidth and latency) runs --sweep-rounds times. Every run is gated on a quiet machine and retried
once when other tenants used > 15 % CPU. Latency = median (perftest t_typical / ucx 50th percentile): one-way
(half round trip) for WRITE and SEND ping-pong, a full round trip for READ (perftest and ucx_perftest both). Bandwidth
= perftest BW_average / ucx_perftest overall (both MiB/s) converted to GB/s (1e9 B/s). ucx_perftest: server pinned to
CPU0, client to CPU1 (as shared/peers/run_ucx.sh); ./jccl perf --local does not pin.
Writes the section between <!-- bench/verbs:begin --> and <!-- bench/verbs:end --> of docs/performance-results.md.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as B  # noqa: E402

MIB = B.MIB
SWEEP = [8, 512, 32768, MIB, 8 * MIB]
UCX_TLS = {"shm": {"UCX_TLS": "posix,cma,self", "UCX_NET_DEVICES": "all"},
           "tcp": {"UCX_TLS": "tcp", "UCX_NET_DEVICES": "lo"}}
# JCCL perftest name -> (ucx test, metric)
UCX_EQUIV = {"write_bw": "ucp_put_bw", "read_bw": "ucp_get", "send_bw": "tag_bw",
             "write_lat": "ucp_put_lat", "read_lat": "ucp_get", "send_lat": "tag_lat"}


def iters(test, size, scale):
    if test.endswith("_lat"):
        n = 100000 if size <= 4096 else 20000 if size <= 262144 else 5000 if size <= MIB else 1000
    else:
        n = 200000 if size <= 512 else 50000 if size <= 32768 else 10000 if size <= MIB else 1000
    return max(100, int(n * scale))


class Verbs:
    def __init__(self, a):
        self.a = a
        self.peers = B.ensure_peers(skip_setup=a.skip_setup)
        self.quiet = B.Quiet(max_wait=a.quiet_wait, budget=a.quiet_budget)
        self.res = B.results_dir("verbs", a.out)
        self.s = {}          # key -> [values]
        self.fail = []
        self.port = 14100 + (os.getpid() % 500) * 4
        self.foreign = []

    def add(self, key, v):
        if v is not None:
            self.s.setdefault(key, []).append(v)

    def measured(self, label, cmd, env=None, timeout=180):
        self.quiet.wait(label)
        r = B.run_measured(label, cmd, env=env, timeout=timeout, retries=self.a.retries,
                           max_foreign=self.a.max_foreign, raw_name=label.replace(" ", ".").replace("/", "_") + ".txt")
        self.foreign.append(r.foreign)
        if r.rc != 0:
            tail = [x for x in (r.err or "").strip().splitlines() if x.strip()][-2:]
            self.fail.append((label, f"exit {r.rc}: " + " / ".join(tail)[:300]))
        return r

    # ------------------------------------------------------------------ JCCL
    def jccl(self, test, dev, size, rnd, scale=1.0, timeout=120):
        n = iters(test, size, scale)
        js = os.path.join(self.res, "raw", f"jccl.{dev}.{test}.{size}.r{rnd}.json")
        cmd = [os.path.join(B.ROOT, "jccl"), "perf", test, "--local", "-d", dev, "-s", str(size), "-n", str(n),
               "--warmup", str(max(16, n // 10)), "--json", js]
        env = dict(os.environ, JCCL_NO_BUILD="1")
        r = self.measured(f"jccl {dev} {test} {size} r{rnd}", cmd, env=env, timeout=timeout)
        if r.rc != 0 or not os.path.exists(js):
            return None
        try:
            d = json.load(open(js))
        except ValueError:
            return None
        row = d["results"][0] if isinstance(d["results"], list) else d["results"]
        if test.endswith("_lat"):
            return row["t_typical"]
        unit = row.get("bw_unit", "MiB/sec")
        return row["BW_average"] * (MIB / 1e9 if unit.startswith("MiB") else 1 / 8)

    # ------------------------------------------------------------------ peers
    def ucx(self, test, tr, size, rnd, scale=1.0):
        """ucx_perftest server CPU0 / client CPU1. Returns (latency us 50%ile, bandwidth GB/s overall)."""
        jtest = [k for k, v in UCX_EQUIV.items() if v == test]
        n = iters(jtest[0] if jtest else test, size, scale * (1 if tr == "shm" else 0.1))
        self.port += 1
        env = dict(os.environ, **UCX_TLS[tr], UCX_LOG_LEVEL="warn")
        r = self.measured(f"ucx {tr} {test} {size} r{rnd}", B.ucx_perftest_cmd(self.port, test, size, n), env=env)
        return B.parse_ucx_final(r.out)

    def iperf3(self, rnd):
        self.port += 1
        r = self.measured(f"iperf3 r{rnd}", B.iperf3_cmd(self.port, self.a.iperf_seconds))
        return B.parse_iperf3(r.out)

    def tcp_bench(self, rnd):
        env = dict(os.environ, TCP_BENCH_PIN="1")
        r = self.measured(f"tcp_bench r{rnd}", [os.path.join(self.peers, "build", "tcp_bench"), "3"], env=env)
        return B.parse_tcp_bench(r.out)

    # ------------------------------------------------------------------ plan
    def go(self):
        a = self.a
        for rnd in range(a.rounds):
            B.log(f"=== headline round {rnd + 1}/{a.rounds}")
            flip = rnd % 2 == 1
            if "shm" in a.parts:
                pairs = [(("write_lat", 8), ("ucp_put_lat", 8)), (("send_lat", 8), ("tag_lat", 8)),
                         (("write_bw", MIB), ("ucp_put_bw", MIB))]
                for (jt, js), (ut, us) in pairs:
                    for side in (["ucx", "jccl"] if flip else ["jccl", "ucx"]):
                        if side == "jccl":
                            self.add(("jccl", "shm0", jt, js), self.jccl(jt, "shm0", js, rnd))
                        else:
                            lat, bw = self.ucx(ut, "shm", us, rnd)
                            self.add(("ucx", "shm", ut, us), lat if ut.endswith("_lat") else bw)
            if "tcp" in a.parts:
                steps = ["jccl_bw", "iperf3", "jccl_lat", "tcp_bench", "ucx_put"]
                for step in (list(reversed(steps)) if flip else steps):
                    if step == "jccl_bw":
                        self.add(("jccl", "tcp0", "write_bw", MIB), self.jccl("write_bw", "tcp0", MIB, rnd))
                    elif step == "jccl_lat":
                        self.add(("jccl", "tcp0", "send_lat", 8), self.jccl("send_lat", "tcp0", 8, rnd, 0.2))
                    elif step == "iperf3":
                        self.add(("iperf3",), self.iperf3(rnd))
                    elif step == "tcp_bench":
                        tb = self.tcp_bench(rnd)
                        self.add(("tcp_bench", "pp_spin"), tb.get(("tcp_pingpong", "spin")))
                        self.add(("tcp_bench", "pp_block"), tb.get(("tcp_pingpong", "block")))
                        self.add(("tcp_bench", "stream_spin"), tb.get(("tcp_stream", "spin")))
                        self.add(("tcp_bench", "stream_block"), tb.get(("tcp_stream", "block")))
                    else:
                        _, bw = self.ucx("ucp_put_bw", "tcp", MIB, rnd)
                        self.add(("ucx", "tcp", "ucp_put_bw", MIB), bw)
                        lat, bw = self.ucx("tag_bw", "tcp", MIB, rnd)
                        self.add(("ucx", "tcp", "tag_bw", MIB), bw)
        for rnd in range(a.sweep_rounds):
            B.log(f"=== sweep round {rnd + 1}/{a.sweep_rounds}")
            for dev, tr in (("shm0", "shm"), ("tcp0", "tcp")):
                if tr not in a.parts:
                    continue
                for test in ("write_bw", "read_bw", "send_bw", "write_lat", "read_lat", "send_lat"):
                    for size in a.sweep:
                        scale = a.sweep_scale * (1 if tr == "shm" else 0.1)
                        self.add(("sweep", "jccl", dev, test, size), self.jccl(test, dev, size, f"s{rnd}", scale,
                                                                                     timeout=self.a.sweep_timeout))
                        if tr == "shm" or size in (8, MIB):
                            ut = UCX_EQUIV[test]
                            lat, bw = self.ucx(ut, tr, size, f"s{rnd}", a.sweep_scale)
                            self.add(("sweep", "ucx", tr, test, size), lat if test.endswith("_lat") else bw)

    # ------------------------------------------------------------------ report
    def report(self, t0):
        a = self.a
        m = lambda *k: B.median(self.s.get(k, []))  # noqa: E731
        sp = lambda *k: B.spread(self.s.get(k, []))  # noqa: E731
        md = ["## Verbs: JCCL providers vs UCX, iperf3 and C sockets (bench/verbs)\n"]
        A = md.append
        A(f"Generated by `bench/verbs {' '.join(sys.argv[1:])}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} "
          f"in {(time.monotonic() - t0) / 60:.1f} min. Headline cells: median over {a.rounds} round(s) "
          f"(JCCL and peer alternating, order reversed every other round), `[min–max]` over rounds. JCCL: "
          f"`./jccl perf TEST --local -d DEV -s SIZE -n N --warmup N/10`; ucx_perftest: server `-c 0`, client `-c 1`, "
          f"`-n N -w N/10`. Latency = median, one-way (half round trip) for WRITE/SEND, round trip for READ. "
          f"GB/s = 1e9 B/s.\n")
        A("```\n" + "\n".join(B.machine_lines() + B.version_lines(torch=False, mpi=False)) + "\n```\n")
        targets = []

        def tgt(group, text, meas, ok):
            targets.append((group, text, meas, "n/a" if ok is None else ("**met**" if ok else "**not met**")))

        if "shm" in a.parts:
            A("### shm0 vs ucx_perftest over shared memory (`UCX_TLS=posix,cma,self`)\n")
            rows = []
            for jt, js, ut, us, unit in (("write_lat", 8, "ucp_put_lat", 8, "µs"), ("send_lat", 8, "tag_lat", 8, "µs"),
                                         ("write_bw", MIB, "ucp_put_bw", MIB, "GB/s")):
                j, u = m("jccl", "shm0", jt, js), m("ucx", "shm", ut, us)
                rows.append([f"{jt} {B.hsize(js)}", f"{sp('jccl', 'shm0', jt, js)} {unit}", f"{ut} {B.hsize(us)}",
                             f"{sp('ucx', 'shm', ut, us)} {unit}", B.fmt(B.ratio(j, u), 2)])
            A(B.md_table(["JCCL test", "JCCL", "UCX test", "UCX", "JCCL / UCX"], rows))
            j, u = m("jccl", "shm0", "write_lat", 8), m("ucx", "shm", "ucp_put_lat", 8)
            r = B.ratio(j, u)
            tgt("verbs shm", "8 B WRITE one-way latency ≤ 1.5× ucp_put_lat", f"{B.fmt(j)} vs {B.fmt(u)} µs = "
                f"{B.fmt(r, 2)}×", None if r is None else r <= 1.5)
            j, u = m("jccl", "shm0", "send_lat", 8), m("ucx", "shm", "tag_lat", 8)
            r = B.ratio(j, u)
            tgt("verbs shm", "8 B SEND/RECV latency ≤ 1.5× tag_lat", f"{B.fmt(j)} vs {B.fmt(u)} µs = {B.fmt(r, 2)}×",
                None if r is None else r <= 1.5)
            j, u = m("jccl", "shm0", "write_bw", MIB), m("ucx", "shm", "ucp_put_bw", MIB)
            r = B.ratio(j, u)
            tgt("verbs shm", "1 MiB WRITE bandwidth ≥ 0.9× ucp_put_bw", f"{B.fmt(j)} vs {B.fmt(u)} GB/s = "
                f"{B.fmt(r, 2)}×", None if r is None else r >= 0.9)
        if "tcp" in a.parts:
            A("### tcp0 on loopback vs iperf3, C ping-pong (tcp_bench) and ucx_perftest over TCP\n")
            A("iperf3: `-A 0` / `-A 1`, `-t " + str(a.iperf_seconds) + " -l 1M`, one stream. tcp_bench: "
              "server CPU0 / client CPU1, 8 B ping-pong with TCP_NODELAY (busy-polled O_NONBLOCK, and blocking), "
              "1 MiB stream. ucx_perftest: `UCX_TLS=tcp UCX_NET_DEVICES=lo` (puts are emulated with active messages "
              "there). JCCL send_lat reports half the round trip; the round trip (2×) is compared.\n")
            jbw, ip, up = m("jccl", "tcp0", "write_bw", MIB), m("iperf3",), m("ucx", "tcp", "ucp_put_bw", MIB)
            jl = m("jccl", "tcp0", "send_lat", 8)
            jrtt = None if jl is None else 2 * jl
            pp = m("tcp_bench", "pp_spin")
            rows = [["JCCL write_bw 1 MiB (tcp0)", f"{sp('jccl', 'tcp0', 'write_bw', MIB)} GB/s", ""],
                    ["iperf3, 1 stream, 1 MiB writes", f"{sp('iperf3')} GB/s", B.fmt(B.ratio(jbw, ip), 2)],
                    ["C stream 1 MiB, busy-poll (tcp_bench)", f"{sp('tcp_bench', 'stream_spin')} GB/s",
                     B.fmt(B.ratio(jbw, m('tcp_bench', 'stream_spin')), 2)],
                    ["C stream 1 MiB, blocking (tcp_bench)", f"{sp('tcp_bench', 'stream_block')} GB/s",
                     B.fmt(B.ratio(jbw, m('tcp_bench', 'stream_block')), 2)],
                    ["ucx_perftest ucp_put_bw 1 MiB (tcp)", f"{sp('ucx', 'tcp', 'ucp_put_bw', MIB)} GB/s",
                     B.fmt(B.ratio(jbw, up), 2)],
                    ["ucx_perftest tag_bw 1 MiB (tcp)", f"{sp('ucx', 'tcp', 'tag_bw', MIB)} GB/s",
                     B.fmt(B.ratio(jbw, m('ucx', 'tcp', 'tag_bw', MIB)), 2)],
                    ["JCCL send_lat 8 B round trip (2 × t_typical)", f"{B.fmt(jrtt)} µs "
                     f"(one-way {sp('jccl', 'tcp0', 'send_lat', 8)})", ""],
                    ["C ping-pong 8 B RTT, busy-poll", f"{sp('tcp_bench', 'pp_spin')} µs", B.fmt(B.ratio(jrtt, pp), 2)],
                    ["C ping-pong 8 B RTT, blocking", f"{sp('tcp_bench', 'pp_block')} µs",
                     B.fmt(B.ratio(jrtt, m('tcp_bench', 'pp_block')), 2)]]
            A(B.md_table(["measurement", "value", "JCCL / this"], rows))
            r = B.ratio(jbw, ip)
            tgt("verbs tcp", "1 MiB WRITE bandwidth ≥ 0.8× iperf3 (1 stream)",
                f"{B.fmt(jbw)} vs {B.fmt(ip)} GB/s = {B.fmt(r, 2)}×", None if r is None else r >= 0.8)
            r = B.ratio(jrtt, pp)
            tgt("verbs tcp", "8 B SEND/RECV round trip ≤ 1.5× busy-polled C ping-pong",
                f"{B.fmt(jrtt)} vs {B.fmt(pp)} µs = {B.fmt(r, 2)}×", None if r is None else r <= 1.5)
            r = B.ratio(jbw, up)
            tgt("verbs tcp", "1 MiB WRITE bandwidth ≥ 4× ucx_perftest ucp_put_bw (tcp)",
                f"{B.fmt(jbw)} vs {B.fmt(up)} GB/s = {B.fmt(r, 1)}×", None if r is None else r >= 4)
        if a.sweep_rounds:
            for dev, tr, title in (("shm0", "shm", "shm0 vs UCX shm"), ("tcp0", "tcp", "tcp0 (UCX tcp at 8 B and 1 MiB)")):
                if tr not in a.parts:
                    continue
                A(f"### Sweep, {title}: bandwidth GB/s (JCCL / UCX)\n")
                hdr = ["size"] + [f"{t.split('_')[0].upper()} (vs {UCX_EQUIV[t]})" for t in ("write_bw", "read_bw", "send_bw")]
                rows = []
                for size in a.sweep:
                    row = [B.hsize(size)]
                    for t in ("write_bw", "read_bw", "send_bw"):
                        j, u = m("sweep", "jccl", dev, t, size), m("sweep", "ucx", tr, t, size)
                        row.append(f"{B.fmt(j)} / {B.fmt(u)}" if u is not None else B.fmt(j))
                    rows.append(row)
                A(B.md_table(hdr, rows))
                A(f"### Sweep, {title}: latency µs (JCCL / UCX; WRITE and SEND one-way, READ round trip)\n")
                hdr = ["size"] + [f"{t.split('_')[0].upper()} (vs {UCX_EQUIV[t]})" for t in ("write_lat", "read_lat", "send_lat")]
                rows = []
                for size in a.sweep:
                    row = [B.hsize(size)]
                    for t in ("write_lat", "read_lat", "send_lat"):
                        j, u = m("sweep", "jccl", dev, t, size), m("sweep", "ucx", tr, t, size)
                        row.append(f"{B.fmt(j)} / {B.fmt(u)}" if u is not None else B.fmt(j))
                    rows.append(row)
                A(B.md_table(hdr, rows))
        A("### Targets\n")
        A(B.md_table(["area", "target", "measured", "verdict"], [list(t) for t in targets]))
        if self.fail:
            A("### Failed runs\n")
            A(B.md_table(["run", "what happened"], [[l, w.replace("|", "\\|")] for l, w in self.fail]))
        A(f"Other tenants' CPU share during the {len(self.foreign)} runs: median {B.fmt(B.median(self.foreign), 1)} %, "
          f"max {B.fmt(max(self.foreign) if self.foreign else None, 1)} % (`measure.log` in "
          f"`{os.path.relpath(self.res, B.ROOT)}`, not committed).\n")
        return "\n".join(md)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the headline pairs")
    ap.add_argument("--sweep-rounds", type=int, default=1, help="rounds of the 8 B - 8 MiB sweep (0: none)")
    ap.add_argument("--sweep", default=",".join(str(s) for s in SWEEP), help="sweep sizes, bytes")
    ap.add_argument("--sweep-scale", type=float, default=0.5, help="iteration scale of the sweep")
    ap.add_argument("--sweep-timeout", type=float, default=45, help="seconds per JCCL sweep run")
    ap.add_argument("--parts", default="shm,tcp")
    ap.add_argument("--quick", action="store_true", help="1 round, sweep of 8 B / 1 MiB at 0.1x iterations, no retries")
    ap.add_argument("--iperf-seconds", type=int, default=3)
    ap.add_argument("--retries", type=int, default=1)
    ap.add_argument("--max-foreign", type=float, default=15.0)
    ap.add_argument("--quiet-wait", type=float, default=20.0)
    ap.add_argument("--quiet-budget", type=float, default=300.0, help="max seconds all quiet gates may wait")
    ap.add_argument("--skip-setup", action="store_true")
    ap.add_argument("--no-doc", action="store_true")
    ap.add_argument("--out")
    a = ap.parse_args()
    a.parts = [p.strip() for p in a.parts.split(",")]
    a.sweep = [int(x) for x in a.sweep.split(",") if x]
    if a.quick:
        a.rounds, a.retries, a.quiet_wait, a.iperf_seconds = 1, 0, 5, 1
        a.sweep, a.sweep_scale = [8, MIB], 0.1
    t0 = time.monotonic()
    v = Verbs(a)
    B.log(f"results in {v.res}")
    v.go()
    text = v.report(t0)
    with open(os.path.join(v.res, "verbs.md"), "w") as f:
        f.write(text)
    with open(os.path.join(v.res, "samples.json"), "w") as f:
        json.dump({"|".join(map(str, k)): x for k, x in v.s.items()}, f, indent=1)
    print(text)
    if not a.no_doc:
        B.update_section(os.path.join(B.ROOT, "docs", "performance-results.md"), "bench/verbs", text)
        B.log("updated docs/performance-results.md (bench/verbs section)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
