"""bench/ab: two builds of JCCL side by side in one session (A/B), for changes that must not move performance.

Each side is a complete jccl-benchmarks classpath: --a/--b DIR (the jars in DIR, classpath DIR/*), or --a-tree/--b-tree
PATH (a work tree's jccl-benchmarks/target/jccl-benchmarks-0.2.0.jar + jccl-benchmarks/target/lib/*; B
defaults to the work tree holding bench/). Nothing is built. Unless --no-snapshot, both classpaths are copied into
the results directory first, so a rebuild of the work tree during the session cannot change (or break) a side.

Configurations (each rank started as bench/compare --launcher direct does: py/launch.py N -- java FLAGS -cp CP
io.jccl.benchmarks.CollectiveBench impl spec blocks target jit_warmup):
  shm2  2 ranks, JCCL_TRANSPORT=shm0, allreduce 8 B, 64 KiB, 16 MiB
  np4   4 ranks (oversubscribed on a 2-core machine), JCCL_TRANSPORT=shm0, allreduce 8 B
  tcp2  2 ranks, JCCL_TRANSPORT=tcp0 JCCL_SHM_DISABLE=1 JCCL_DIRECT_DISABLE=1, allreduce 1 MiB
Every round runs, per configuration, A then B (odd rounds) or B then A (even rounds), the two runs of a pair next
to each other; each run waits for a quiet machine first (benchlib.Quiet) and is retried once when it fails or when
other tenants used more than --max-foreign % of the CPU (benchlib.run_measured; the less contaminated good attempt
counts). A run that still fails is reported, not fatal.

Table cell: the median over rounds of each side's per-run median_us [min-max over rounds]; B/A = ratio of those
medians; per-round B/A = the ratio within each round's pair, min-max. Raw output, rows.csv (one row per run and
case), meta.json and ab.md go to bench/results/ab-<stamp>/ (ignored by git); --out FILE.md gets a copy of the table.
"""
import argparse
import csv
import datetime
import glob
import hashlib
import json
import math
import os
import shutil
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as B  # noqa: E402
from compare import JVM_FLAGS, why  # noqa: E402  (the same JVM flags as bench/compare's JCCL ranks)

HERE = os.path.dirname(os.path.abspath(__file__))
MAIN = "io.jccl.benchmarks.CollectiveBench"
TREE_JAR = os.path.join("jccl-benchmarks", "target", "jccl-benchmarks-0.2.0.jar")
TREE_LIB = os.path.join("jccl-benchmarks", "target", "lib")
SHM_ENV = {"JCCL_TRANSPORT": "shm0"}
TCP_ENV = {"JCCL_TRANSPORT": "tcp0", "JCCL_SHM_DISABLE": "1", "JCCL_DIRECT_DISABLE": "1"}
CONFIGS = {  # name -> (ranks, transport env, CollectiveBench ops spec)
    "shm2": (2, SHM_ENV, "allreduce:8,65536,16777216"),
    "np4": (4, SHM_ENV, "allreduce:8"),
    "tcp2": (2, TCP_ENV, "allreduce:1048576"),
}
STRIPPED_ENV = ("JCCL_TRANSPORT", "JCCL_SHM_DISABLE", "JCCL_DIRECT_DISABLE")  # set per configuration only
CSV_FIELDS = ["round", "config", "side", "label", "position", "rc", "attempt", "wall_s", "foreign_pct",
              "impl", "op", "nranks", "bytes", "iters", "blocks", "median_us", "min_us", "max_us",
              "algbw_GBps", "busbw_GBps", "algorithm"]


# ------------------------------------------------------------------------------------------------ classpaths

def side_jars(dir_=None, tree=None):
    """(jar paths, classpath string as given) of one side; raises SystemExit with a clear message when incomplete."""
    if dir_:
        d = os.path.abspath(dir_)
        jars = sorted(glob.glob(os.path.join(d, "*.jar")) + glob.glob(os.path.join(d, "*.JAR")))
        if not any(os.path.basename(j).startswith("jccl-benchmarks") for j in jars):
            raise SystemExit(f"ab: {d} holds no jccl-benchmarks*.jar (a side's DIR must hold the whole classpath)")
        return jars, os.path.join(d, "*")
    t = os.path.abspath(tree)
    jar, lib = os.path.join(t, TREE_JAR), os.path.join(t, TREE_LIB)
    if not os.path.isfile(jar) or not os.path.isdir(lib):
        raise SystemExit(f"ab: {t} has no built {TREE_JAR} and {TREE_LIB}/ (bench/ab does not build: run "
                         f"./mvnw -o install -DskipTests there first)")
    return [jar] + sorted(glob.glob(os.path.join(lib, "*.jar"))), f"{jar}:{lib}/*"


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def snapshot(jars, dst):
    """Copies jars (flat) into dst; returns {jar name: sha256}. Two jars of one name would be ambiguous: refused."""
    os.makedirs(dst, exist_ok=True)
    sums = {}
    for j in jars:
        name = os.path.basename(j)
        if name in sums:
            raise SystemExit(f"ab: two jars named {name} in one classpath; use --no-snapshot")
        shutil.copy2(j, os.path.join(dst, name))
        sums[name] = sha256(os.path.join(dst, name))
    return sums


# ------------------------------------------------------------------------------------------------ parsing

def parse_rows(out):
    """CollectiveBench's CSV rows (benchlib's parser; a lenient one for a build whose CSV gained columns) and the
    algorithm JCCL named for each case ('# algorithm OP BYTES: NAME')."""
    rows = B.parse_coll_csv(out)
    if not rows:
        for line in out.splitlines():
            p = line.strip().split(",")
            if len(p) < 9 or p[0] == "impl" or line.startswith("#"):
                continue
            try:
                rows.append({"impl": p[0], "op": p[1], "n": int(p[2]), "bytes": int(p[3]), "iters": int(p[4]),
                             "blocks": int(p[5]), "us": float(p[6]), "min_us": float(p[7]), "max_us": float(p[8]),
                             "algbw": float(p[9]) if len(p) > 9 else None,
                             "busbw": float(p[10]) if len(p) > 10 else None})
            except ValueError:
                continue
    algo = {}
    for line in out.splitlines():
        if line.startswith("# algorithm "):
            try:
                what, name = line[len("# algorithm "):].split(":", 1)
                op, nbytes = what.split()
                algo[(op, int(nbytes))] = name.strip()
            except ValueError:
                pass
    return rows, algo


def spec_cases(spec):
    return [(part.split(":")[0].strip(), int(s)) for part in spec.split(";") if ":" in part
            for s in part.split(":", 1)[1].split(",") if s.strip()]


# ------------------------------------------------------------------------------------------------ running

class AB:
    def __init__(self, a, res):
        self.a, self.res = a, res
        self.quiet = B.Quiet(max_wait=a.quiet_wait, budget=a.quiet_budget) if not a.no_quiet else None
        self.rows = []        # dicts with CSV_FIELDS
        self.failures = []    # (round, config, side label, message)
        self.runs = []        # (label, wall, foreign, rc)
        env = {k: v for k, v in os.environ.items() if k not in STRIPPED_ENV}
        env.update(OMP_NUM_THREADS="1")
        env.update(dict(kv.split("=", 1) for kv in a.env))
        self.base_env = env
        self.csv_path = os.path.join(res, "rows.csv")
        with open(self.csv_path, "w", newline="") as f:
            csv.DictWriter(f, CSV_FIELDS).writeheader()

    def cmd(self, side, np_, spec):
        java = [B.java_bin(), *JVM_FLAGS, *self.a.jvm_opt, "-cp", self.a.cp[side], MAIN, f"jccl-{side}", spec,
                str(self.a.blocks), str(self.a.target), str(self.a.jit_warmup)]
        return [B.PY, os.path.join(HERE, "launch.py"), str(np_), "--", *java]

    def run_one(self, rnd, config, side, position):
        np_, tenv, spec = CONFIGS[config]
        label = f"{config} {side}({self.a.label[side]}) round{rnd}"
        env = dict(self.base_env)
        env.update(tenv)
        if self.quiet:
            self.quiet.wait(label)
        r = B.run_measured(label, self.cmd(side, np_, spec), env=env, timeout=self.a.timeout, retries=1,
                           max_foreign=self.a.max_foreign, raw_name=f"{config}.{side}.round{rnd}.txt")
        self.runs.append((label, r.wall, r.foreign, r.rc))
        rows, algo = parse_rows(r.out or "")
        want = spec_cases(spec)
        got = {(x["op"], x["bytes"]) for x in rows}
        if r.rc != 0 or not all(c in got for c in want):
            self.failures.append((rnd, config, f"{side} ({self.a.label[side]})",
                                  f"exit {r.rc} (attempt {r.attempt + 1}), {len(got & set(want))}/{len(want)} rows; "
                                  + why(r.err)))
        new = []
        for x in rows:
            new.append({"round": rnd, "config": config, "side": side, "label": self.a.label[side],
                        "position": position, "rc": r.rc, "attempt": r.attempt, "wall_s": f"{r.wall:.2f}",
                        "foreign_pct": f"{r.foreign:.1f}", "impl": x["impl"], "op": x["op"], "nranks": x["n"],
                        "bytes": x["bytes"], "iters": x["iters"], "blocks": x["blocks"], "median_us": x["us"],
                        "min_us": x["min_us"], "max_us": x["max_us"], "algbw_GBps": x["algbw"],
                        "busbw_GBps": x["busbw"], "algorithm": algo.get((x["op"], x["bytes"]), "")})
        with open(self.csv_path, "a", newline="") as f:  # as it goes: an interrupted session keeps its rows
            csv.DictWriter(f, CSV_FIELDS).writerows(new)
        self.rows += new

    def go(self):
        for rnd in range(1, self.a.rounds + 1):
            order = ("A", "B") if rnd % 2 == 1 else ("B", "A")
            B.log(f"=== round {rnd}/{self.a.rounds}: {' then '.join(order)} for each of {', '.join(self.a.configs)}")
            for config in self.a.configs:
                for pos, side in enumerate(order, 1):
                    self.run_one(rnd, config, side, pos)


# ------------------------------------------------------------------------------------------------ report

def load_rows(path):
    rows = []
    with open(path, newline="") as f:
        for x in csv.DictReader(f):
            x["round"], x["bytes"], x["median_us"] = int(x["round"]), int(x["bytes"]), float(x["median_us"])
            rows.append(x)
    return rows


def report(meta, rows, failures, runs, interrupted=False):
    lab = meta["labels"]
    md = [f"## bench/ab: B ({lab['B']}) against A ({lab['A']})\n"]
    md.append(f"- date: {meta['date']}; host: {meta['host']}; load average at start: {meta['loadavg']}")
    md.append(f"- rounds: {meta['rounds_done']} of {meta['rounds']} (order A,B in odd rounds, B,A in even ones)"
              f"{' — INTERRUPTED' if interrupted else ''}; CollectiveBench blocks {meta['blocks']}, target "
              f"{meta['target']} s, JIT warm-up {meta['jit_warmup']} s; launcher py/launch.py (direct)")
    for s in ("A", "B"):
        md.append(f"- {s} ({lab[s]}): `{meta['cp_given'][s]}`"
                  + (f" (run from the copy `{meta['cp'][s]}`)" if meta['cp'][s] != meta['cp_given'][s] else ""))
    if meta.get("same_jars"):
        md.append("- A and B are byte-identical classpaths: an A/A run, the ratios show this machine's noise floor")
    elif meta.get("differing"):
        md.append(f"- jars that differ: {', '.join(meta['differing'])}")
    md.append(f"- JDK: {meta['jdk']}; JVM flags: `{' '.join(meta['jvm_flags'])}`")
    if meta.get("inherited_env"):
        md.append(f"- inherited JCCL_* environment (both sides): `{' '.join(meta['inherited_env'])}`")
    md.append("")

    # (config, op, bytes) -> side -> round -> median_us ; algorithms per side
    samp, algo, noise = {}, {}, {}
    for x in rows:
        key = (x["config"], x["op"], x["bytes"])
        samp.setdefault(key, {"A": {}, "B": {}})[x["side"]][x["round"]] = x["median_us"]
        if float(x["min_us"]) > 0:
            noise.setdefault(key, {"A": [], "B": []})[x["side"]].append(float(x["max_us"]) / float(x["min_us"]))
        if x.get("algorithm"):
            algo.setdefault(key, {"A": set(), "B": set()})[x["side"]].add(x["algorithm"])
    order = {c: i for i, c in enumerate(CONFIGS)}
    table, by_config = [], {}
    for key in sorted(samp, key=lambda k: (order.get(k[0], 99), k[1], k[2])):
        a_r, b_r = samp[key]["A"], samp[key]["B"]
        am, bm = B.median(list(a_r.values())), B.median(list(b_r.values()))
        pair = [b_r[r] / a_r[r] for r in sorted(a_r) if r in b_r and a_r[r] > 0]
        ratio = B.ratio(bm, am)
        if ratio:
            by_config.setdefault(key[0], []).append(ratio)
        al = algo.get(key, {"A": set(), "B": set()})
        aa, bb = ", ".join(sorted(al["A"])) or "?", ", ".join(sorted(al["B"])) or "?"
        note = ""
        if len(pair) >= 3 and min(pair) > 1:
            note = f"B slower in all {len(pair)} rounds"
        elif len(pair) >= 3 and max(pair) < 1:
            note = f"B faster in all {len(pair)} rounds"
        if aa != bb:
            note = (note + "; " if note else "") + "**algorithm differs**"
        nz = noise.get(key, {"A": [], "B": []})
        table.append([key[0], key[1], B.hsize(key[2]), aa if aa == bb else f"A: {aa} / B: {bb}",
                      B.spread(list(a_r.values())), B.spread(list(b_r.values())),
                      f"{B.fmt(B.median(nz['A']), 2)} / {B.fmt(B.median(nz['B']), 2)}",
                      B.fmt(ratio, 3), f"{min(pair):.3f}–{max(pair):.3f}" if pair else "n/a",
                      f"{len(pair)}" + (f" (A {len(a_r)}, B {len(b_r)})" if len(a_r) != len(pair)
                                        or len(b_r) != len(pair) else ""), note])
    md.append(B.md_table(["config", "op", "size", "algorithm", f"A ({lab['A']}) µs", f"B ({lab['B']}) µs",
                          "blocks max/min A / B", "B/A", "B/A per round (min–max)", "rounds", "note"], table) if table
              else "No results (every run failed).\n")
    md.append("A µs / B µs: median over rounds of each run's CollectiveBench median_us [min–max over rounds]; B/A: "
              "the ratio of those medians (> 1: B slower); per round: B/A within each round's pair; blocks max/min: "
              "the slowest over the fastest of a run's timed blocks (median over rounds), how steady the machine "
              "was during the runs.\n")
    if meta["rounds_done"] < 3:
        md.append(f"**{meta['rounds_done']} round(s) only**: a single pair carries this shared machine's "
                  "run-to-run noise (two A/A `--quick` runs of shm2 on the 2-core development VM gave B/A "
                  "from 0.50 to 3.7: JIT and scheduling outcomes differ from one JVM to the next); it shows that "
                  "both sides run, not whether they perform alike. Judge a change on --rounds 5 or more, where the "
                  "per-round range shows the noise.\n")
    if by_config:
        md.append("Geometric mean of B/A per configuration: " + ", ".join(
            f"{c} {math.exp(statistics.mean(math.log(v) for v in vs)):.3f}" for c, vs in by_config.items()) + "\n")
    if runs:
        fo = [r[2] for r in runs]
        md.append(f"{len(runs)} runs; other tenants' CPU share during them (foreign %): median "
                  f"{B.fmt(B.median(fo), 1)} %, max {B.fmt(max(fo), 1)} %. Raw output and rows.csv: "
                  f"`{meta['results']}`.\n")
    if failures:
        md.append("Failed runs (after one retry):\n")
        md.append(B.md_table(["round", "config", "side", "what happened"], [list(f) for f in failures]))
    return "\n".join(md)


# ------------------------------------------------------------------------------------------------ main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ga = ap.add_mutually_exclusive_group()
    ga.add_argument("--a", metavar="DIR", help="side A: a folder holding the whole benchmarks classpath (DIR/*)")
    ga.add_argument("--a-tree", metavar="PATH", help="side A: a built JCCL work tree")
    gb = ap.add_mutually_exclusive_group()
    gb.add_argument("--b", metavar="DIR", help="side B: a folder holding the whole benchmarks classpath (DIR/*)")
    gb.add_argument("--b-tree", metavar="PATH", help="side B: a built JCCL work tree (default: the one holding bench/)")
    ap.add_argument("--label-a", default="before")
    ap.add_argument("--label-b", default="after")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--target", type=float, default=0.2, help="seconds per block (CollectiveBench's target)")
    ap.add_argument("--jit-warmup", type=float, default=1.0, help="CollectiveBench's JIT warm-up seconds per case")
    ap.add_argument("--configs", default="shm2,np4,tcp2", help="comma list of " + ",".join(CONFIGS))
    ap.add_argument("--quick", action="store_true",
                    help="smoke test: 1 round, 3 blocks, target 0.05, JIT warm-up 0.2, retry only failed runs")
    ap.add_argument("--out", metavar="FILE.md", help="also write the markdown report here")
    ap.add_argument("--results", metavar="DIR", help="results directory (default bench/results/ab-<stamp>)")
    ap.add_argument("--no-snapshot", action="store_true", help="run the classpaths in place (not from copies)")
    ap.add_argument("--jvm-opt", action="append", default=[], help="extra JVM option for both sides' ranks")
    ap.add_argument("--env", action="append", default=[], metavar="K=V", help="extra environment for both sides")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per run")
    ap.add_argument("--max-foreign", type=float, default=15.0,
                    help="re-run once when other tenants used more than this %% of the CPU (quick: 100)")
    ap.add_argument("--no-quiet", action="store_true", help="do not wait for a quiet machine before each run")
    ap.add_argument("--quiet-wait", type=float, default=20.0, help="seconds to wait for < 20 %% load before a run")
    ap.add_argument("--quiet-budget", type=float, default=300.0, help="seconds of quiet waiting in all")
    ap.add_argument("--report", metavar="RESULTS_DIR", help="only rebuild the report of an earlier session")
    a = ap.parse_args()

    if a.report:
        meta = json.load(open(os.path.join(a.report, "meta.json")))
        text = report(meta, load_rows(os.path.join(a.report, "rows.csv")), meta.get("failures", []),
                      meta.get("runs", []))
        print(text)
        if a.out:
            with open(a.out, "w") as f:
                f.write(text + "\n")
        return 0

    if not a.a and not a.a_tree:
        ap.error("side A is required: --a DIR or --a-tree PATH")
    if a.quick:
        a.rounds, a.blocks, a.target, a.jit_warmup, a.max_foreign, a.quiet_wait = 1, 3, 0.05, 0.2, 100.0, 5.0
    a.configs = [c.strip() for c in a.configs.split(",") if c.strip()]
    bad = [c for c in a.configs if c not in CONFIGS]
    if bad or not a.configs:
        ap.error(f"unknown configuration(s) {bad}; known: {', '.join(CONFIGS)}")
    for kv in a.env:
        if "=" not in kv:
            ap.error(f"--env {kv}: expected K=V")
    if a.rounds < 1:
        ap.error("--rounds must be >= 1")
    a.label = {"A": a.label_a, "B": a.label_b}

    jars = {"A": side_jars(a.a, a.a_tree), "B": side_jars(a.b, a.b_tree or B.ROOT)}
    res = B.results_dir("ab", a.results)
    B.log(f"results in {res}")
    a.cp, cp_given, sums = {}, {}, {}
    for s in ("A", "B"):
        js, given = jars[s]
        cp_given[s] = given
        if a.no_snapshot:
            a.cp[s] = given
            sums[s] = {os.path.basename(j): sha256(j) for j in js}
        else:
            dst = os.path.join(res, f"cp-{s}")
            sums[s] = snapshot(js, dst)
            a.cp[s] = os.path.join(dst, "*")
    differing = sorted(n for n in set(sums["A"]) | set(sums["B"]) if sums["A"].get(n) != sums["B"].get(n))
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "host": f"{os.uname().nodename}, {B.NCPU} CPUs", "loadavg": " ".join(open("/proc/loadavg").read().split()[:3]),
        "rounds": a.rounds, "rounds_done": 0, "blocks": a.blocks, "target": a.target, "jit_warmup": a.jit_warmup,
        "labels": a.label, "cp_given": cp_given, "cp": a.cp, "sha256": sums, "differing": differing,
        "same_jars": not differing, "configs": {c: CONFIGS[c] for c in a.configs},
        "jdk": " ".join(B.sh(B.java_bin() + " -version 2>&1").splitlines()[:1]),
        "jvm_flags": JVM_FLAGS + a.jvm_opt,
        "inherited_env": sorted(f"{k}={v}" for k, v in os.environ.items()
                                if k.startswith("JCCL_") and k not in STRIPPED_ENV) + a.env,
        "results": os.path.relpath(res, B.ROOT) if res.startswith(B.ROOT) else res,
    }
    for s in ("A", "B"):
        B.log(f"{s} ({a.label[s]}): {cp_given[s]} -> {a.cp[s]}")
    B.log("A and B are byte-identical" if not differing else f"jars that differ: {', '.join(differing)}")

    h = AB(a, res)
    interrupted = False
    try:
        h.go()
    except KeyboardInterrupt:
        interrupted = True
        B.log("interrupted: reporting the rounds so far")
    meta["rounds_done"] = max([x["round"] for x in h.rows], default=0)
    meta["failures"], meta["runs"] = h.failures, h.runs
    with open(os.path.join(res, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    text = report(meta, h.rows, h.failures, h.runs, interrupted)
    with open(os.path.join(res, "ab.md"), "w") as f:
        f.write(text + "\n")
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
        B.log(f"wrote {a.out}")
    print(text)
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
