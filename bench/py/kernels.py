"""bench/kernels: JMH reduction-kernel and copy benchmarks beside the C ceilings measured in the same run.

C ceilings (shared/peers, gcc): memcpy_bw (glibc memcpy, -O2) and reduce_bw (f32 a[i]+=b[i], -O3 -march=native),
1 thread, run once before and once after the JMH run; the table shows the median of their per-run medians.
All GB/s here count bytes read + written (1e9 B/s): reduce = 3 x array bytes per pass, copy = 2 x bytes.
(memcpy_bw itself prints bytes copied; that is doubled here so both columns use one convention.)
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as B  # noqa: E402

JAR = os.path.join(B.ROOT, "jccl-benchmarks", "target", "jccl-benchmarks-0.2.0.jar")
LIB = os.path.join(B.ROOT, "jccl-benchmarks", "target", "lib")


def c_ceilings(peers, trials, label):
    """{('memcpy'|'reduce', bytes): GB/s read+written}, 1 thread."""
    res = {}
    for prog, kind in (("memcpy_bw", "memcpy"), ("reduce_bw", "reduce")):
        r = B.run_measured(f"{prog} {label}", [os.path.join(peers, "build", prog), str(trials)],
                           raw_name=f"{prog}.{label}.csv", timeout=300)
        if not r.ok():
            continue
        for line in r.out.splitlines():
            p = line.split(",")
            if len(p) >= 4 and p[0] == kind and p[2] == "1":
                v = float(p[3])
                res[(kind, int(p[1]))] = v * 2 if kind == "memcpy" else v  # memcpy_bw prints bytes copied
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--impl", default="vector", help="kernel sets, comma-separated: vector,scalar (default vector)")
    ap.add_argument("--forks", default="1")
    ap.add_argument("--wi", default="2", help="warm-up iterations (1 s each)")
    ap.add_argument("--i", default="3", help="measurement iterations (1 s each)")
    ap.add_argument("--c-trials", default="3", help="trials per C ceiling run")
    ap.add_argument("--filter", default="ReduceKernelBench|CopyBench", help="JMH benchmark regexp")
    ap.add_argument("--out", help="results directory (default bench/results/kernels-<stamp>)")
    ap.add_argument("--doc", action="store_true", help="also write the table into docs/performance-results.md")
    a = ap.parse_args()
    res_dir = B.results_dir("kernels", a.out)
    peers = B.ensure_peers()
    quiet = B.Quiet()

    quiet.wait("c ceilings before")
    c1 = c_ceilings(peers, a.c_trials, "before")
    quiet.wait("jmh")
    jmh_json = os.path.join(res_dir, "raw", "jmh.json")
    cmd = [B.java_bin(), "--add-modules", "jdk.incubator.vector", "--enable-native-access=ALL-UNNAMED",
           "-cp", f"{JAR}:{LIB}/*", "org.openjdk.jmh.Main", "-f", a.forks, "-wi", a.wi, "-w", "1s", "-i", a.i,
           "-r", "1s", "-p", f"impl={a.impl}", "-rf", "json", "-rff", jmh_json, a.filter]
    r = B.run_measured("jmh", cmd, raw_name="jmh.txt", timeout=3600, retries=0)
    if not r.ok():
        print(r.out[-3000:], r.err[-3000:], file=sys.stderr)
        return 1
    quiet.wait("c ceilings after")
    c2 = c_ceilings(peers, a.c_trials, "after")

    def ceiling(key):
        return B.median([c.get(key) for c in (c1, c2)])

    rows = []
    for res in json.load(open(jmh_json)):
        name = res["benchmark"].rsplit(".", 2)
        cls, meth = name[-2], name[-1]
        p = res.get("params", {})
        nbytes = int(p["bytes"])
        ops = res["primaryMetric"]["score"]
        try:
            err = float(res["primaryMetric"].get("scoreError"))
        except (TypeError, ValueError):
            err = None
        if cls == "ReduceKernelBench":
            gbs = ops * 3 * nbytes / 1e9
            label = f"{p['type']} sum a+=b ({p['impl']})"
            c = ceiling(("reduce", nbytes))
            cname = "reduce_bw f32"
            order = (0, ["fp32", "bf16", "fp16"].index(p["type"]) if p["type"] in ("fp32", "bf16", "fp16") else 9,
                     p["impl"], nbytes)
        else:
            gbs = ops * 2 * nbytes / 1e9
            label = {"segmentCopy": "MemorySegment.copy", "memcpyDowncall": "FFM memcpy downcall"}.get(meth, meth)
            c = ceiling(("memcpy", nbytes))
            cname = "glibc memcpy"
            order = (1, meth, "", nbytes)
        errs = "" if err is None or err != err else f" ±{err * (3 if cls == 'ReduceKernelBench' else 2) * nbytes / 1e9:.1f}"
        rows.append((order, [label, B.hsize(nbytes), f"{gbs:.1f}{errs}", f"{B.fmt(c)} ({cname})",
                             B.fmt(B.ratio(gbs, c), 2)]))
    rows.sort(key=lambda x: x[0])
    header = ["kernel", "size", "Java GB/s (r+w)", "C ceiling GB/s (r+w)", "Java / C"]
    table = B.md_table(header, [r for _, r in rows])
    info = "\n".join(B.machine_lines() + B.version_lines(torch=False, mpi=False, ucx=False)[:1])
    text = (f"JMH: forks {a.forks}, warm-up {a.wi} x 1 s, measurement {a.i} x 1 s, 1 thread; C ceilings 1 thread, "
            f"{a.c_trials} trials, run before and after JMH (median). Other tenants' CPU share during the JMH run: "
            f"{r.foreign:.0f} %. ± = JMH's 99.9 % error of the mean (3 iterations: wide).\n\n{table}")
    print(text)
    with open(os.path.join(res_dir, "kernels.md"), "w") as f:
        f.write("```\n" + info + "\n```\n\n" + text)
    if a.doc:
        body = ("### Kernels (bench/kernels)\n\n```\n" + info + "\n```\n\n" + text +
                "\nGB/s = bytes read + written per second (reduce: 3 × array bytes per pass; copy: 2 × bytes). "
                "bf16/fp16 rows are compared with the f32 C loop by bytes moved.\n")
        B.update_section(os.path.join(B.ROOT, "docs", "performance-results.md"), "bench/kernels", body)
    print(f"results: {res_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
