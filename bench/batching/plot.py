#!/usr/bin/env python3
"""Draws BatchingBench CSVs as one SVG (standard library only, so CI and bare hosts can run it):
left, achieved throughput against offered load; right, p50 (dashed) and p99 (solid) latency against offered load
(log scale); one colour per device and max queue delay.
Usage: plot.py OUT.svg RESULTS.csv [RESULTS.csv ...]"""
import csv
import math
import sys

COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]


def load(paths):
    series = {}
    for path in paths:
        with open(path) as f:
            for row in csv.DictReader(line for line in f if not line.startswith("#")):
                if not row.get("device"):
                    continue
                key = (row["device"], int(row["delay_us"]))
                series.setdefault(key, []).append({k: float(v) for k, v in row.items() if k != "device"})
    for points in series.values():
        points.sort(key=lambda p: p["offered_rps"])
    return series


def panel(x0, y0, w, h, title, xlabel, ylabel, xs, ys_list, logy, out):
    xmax = max(xs) * 1.05
    pos = [y for ys in ys_list for y in ys if y > 0]
    if logy:
        lo = 10 ** math.floor(math.log10(min(pos))) if pos else 1
        hi = 10 ** math.ceil(math.log10(max(pos))) if pos else 10
        fy = lambda v: y0 + h - (math.log10(max(v, lo)) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)) * h
        ticks = [lo * 10 ** i for i in range(int(round(math.log10(hi / lo))) + 1)]
    else:
        hi = max(pos) * 1.1 if pos else 1
        fy = lambda v: y0 + h - v / hi * h
        ticks = [hi * i / 5 for i in range(6)]
    fx = lambda v: x0 + v / xmax * w
    out.append(f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#333"/>')
    out.append(f'<text x="{x0 + w / 2}" y="{y0 - 10}" text-anchor="middle" font-size="14">{title}</text>')
    out.append(f'<text x="{x0 + w / 2}" y="{y0 + h + 36}" text-anchor="middle" font-size="12">{xlabel}</text>')
    out.append(f'<text x="{x0 - 52}" y="{y0 + h / 2}" text-anchor="middle" font-size="12" '
               f'transform="rotate(-90 {x0 - 52} {y0 + h / 2})">{ylabel}</text>')
    for t in ticks:
        out.append(f'<line x1="{x0}" x2="{x0 + w}" y1="{fy(t):.1f}" y2="{fy(t):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{x0 - 4}" y="{fy(t) + 4:.1f}" text-anchor="end" font-size="10">{t:g}</text>')
    for t in sorted(set(xs)):
        out.append(f'<text x="{fx(t):.1f}" y="{y0 + h + 16}" text-anchor="middle" font-size="10">{t:g}</text>')
    return fx, fy


def main():
    out_path, paths = sys.argv[1], sys.argv[2:]
    series = load(paths)
    if not series:
        sys.exit("no data in " + ", ".join(paths))
    xs = [p["offered_rps"] for pts in series.values() for p in pts]
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="1000" height="470" font-family="sans-serif">',
           '<rect width="100%" height="100%" fill="white"/>']
    fx1, fy1 = panel(80, 40, 360, 300, "Throughput", "offered load (requests/s)", "achieved (requests/s)", xs,
                     [[p["achieved_rps"] for p in pts] for pts in series.values()] + [xs], False, out)
    fx2, fy2 = panel(580, 40, 360, 300, "Latency (p50 dashed, p99 solid)", "offered load (requests/s)",
                     "latency (us, log)", xs,
                     [[p["p50_us"] for p in pts] + [p["p99_us"] for p in pts] for pts in series.values()], True, out)
    out.append(f'<line x1="{fx1(0)}" y1="{fy1(0)}" x2="{fx1(max(xs))}" y2="{fy1(max(xs))}" stroke="#aaa" '
               f'stroke-dasharray="2,3"/>')
    for i, ((device, delay), pts) in enumerate(sorted(series.items())):
        c = COLOURS[i % len(COLOURS)]
        line = lambda fx, fy, key, dash: out.append(
            f'<polyline fill="none" stroke="{c}" stroke-width="2" {dash} points="'
            + " ".join(f"{fx(p['offered_rps']):.1f},{fy(max(p[key], 1e-9)):.1f}" for p in pts) + '"/>')
        line(fx1, fy1, "achieved_rps", "")
        line(fx2, fy2, "p99_us", "")
        line(fx2, fy2, "p50_us", 'stroke-dasharray="5,4"')
        ly = 400 + (i // 4) * 18
        lx = 80 + (i % 4) * 230
        out.append(f'<rect x="{lx}" y="{ly - 10}" width="14" height="4" fill="{c}"/>')
        out.append(f'<text x="{lx + 20}" y="{ly - 4}" font-size="12">{device}, max queue delay {delay} us</text>')
    out.append("</svg>")
    with open(out_path, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
