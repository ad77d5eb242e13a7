#!/usr/bin/python3
"""nccl-tests' all_reduce_perf measurement and table for torch.distributed's gloo backend (CPU, TCP), so gloo prints
the very table `jccl tests all_reduce_perf` prints, with the same flags, in the same run (bench/tools).

Usage: gloo_nccl_tests.py [--np 2] [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [-c 0|1]
Started without RANK it launches --np local ranks of itself (env:// rendezvous on 127.0.0.1, GLOO_SOCKET_IFNAME=lo).
Method as nccl-tests (-a 1): per size, -w warm-up runs, a barrier, -n timed runs, time = elapsed / n averaged over
ranks, then a checked run (#wrong summed over ranks). float32 sum, page-aligned tensors (numpy-backed).
torch's all_reduce works in place; "out-of-place" is what a torch user writes for it: out.copy_(in), all_reduce(out).
"""
import argparse
import os
import socket
import subprocess
import sys
import time


def size_arg(s):
    s = s.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(s[:-1] if mult > 1 else s) * mult


def launch(a):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(a.np),
               GLOO_SOCKET_IFNAME=os.environ.get("GLOO_SOCKET_IFNAME", "lo"), OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__)] + sys.argv[1:], env=dict(env, RANK=str(r)))
             for r in range(a.np)]
    rc = 0
    for p in procs:
        rc |= p.wait()
    return rc


def aligned(count):
    import numpy as np
    import torch
    raw = np.empty(count + 1024, dtype=np.float32)
    off = (-raw.ctypes.data % 4096) // 4
    return torch.from_numpy(raw[off:off + count])


def fmt_time(us):
    return f"{us:7.0f}" if us >= 10000 else f"{us:7.1f}" if us >= 100 else f"{us:7.2f}"


def worker(a):
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    out = sys.stdout
    maxcount = max(1, a.e // 4)
    send, recv = aligned(maxcount), aligned(maxcount)
    if rank == 0:
        out.write(f"# nThread 1 nGpus 1 minBytes {a.b} maxBytes {a.e} step: {a.f}(factor) warmup iters: {a.w} "
                  f"iters: {a.n} agg iters: 1 validation: {a.c} graph: 0\n#\n# torch {torch.__version__} gloo, "
                  f"{n} ranks\n#\n")
        out.write("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n"
                  % ("", "", "", "", ""))
        out.write("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n" % (
            "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
            "#wrong"))
        out.write("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n" % (
            "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""))
        out.flush()
    total_wrong, bus = 0, []
    size = a.b
    while size <= a.e:
        count = size // 4
        if count >= 1:
            row = "%12d  %12d  %8s  %6s  %6d" % (count * 4, count, "float", "sum", -1)
            for inplace in (False, True):
                s, r = send[:count], recv[:count]

                def run():
                    if not inplace:
                        r.copy_(s)
                    dist.all_reduce(r)
                for _ in range(a.w):
                    run()
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(a.n):
                    run()
                us = torch.tensor([(time.perf_counter() - t0) * 1e6 / a.n], dtype=torch.float64)
                dist.all_reduce(us)
                us = us.item() / n
                wrong_text = "N/A"
                if a.c:
                    idx = torch.arange(count, dtype=torch.int64)
                    vals = (1 + (rank + idx) % 3).to(torch.float32)
                    if inplace:
                        r.copy_(vals)
                    else:
                        s.copy_(vals)
                    run()
                    expect = torch.zeros(count, dtype=torch.float32)
                    for q in range(n):
                        expect += (1 + (q + idx) % 3).to(torch.float32)
                    w = torch.tensor([int((r != expect).sum().item())], dtype=torch.int64)
                    dist.all_reduce(w)
                    total_wrong += int(w.item())
                    wrong_text = str(int(w.item()))
                algbw = count * 4 / 1e9 / (us / 1e6)
                busbw = algbw * 2 * (n - 1) / n
                bus.append(busbw)
                row += "  %7s  %6.2f  %6.2f  %5s" % (fmt_time(us), algbw, busbw, wrong_text)
            if rank == 0:
                out.write(row + "\n")
                out.flush()
        size *= a.f
    if rank == 0:
        out.write(f"# Out of bounds values : {total_wrong} {'OK' if total_wrong == 0 else 'FAILED'}\n"
                  f"# Avg bus bandwidth    : {sum(bus) / len(bus) if bus else 0:g} \n#\n")
        out.flush()
    dist.destroy_process_group()
    return 1 if total_wrong else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("-b", type=size_arg, default=32 << 20)
    ap.add_argument("-e", type=size_arg, default=32 << 20)
    ap.add_argument("-f", type=int, default=2)
    ap.add_argument("-n", type=int, default=20)
    ap.add_argument("-w", type=int, default=5)
    ap.add_argument("-c", type=int, default=1)
    a = ap.parse_args()
    a.f = max(2, a.f)
    return worker(a) if "RANK" in os.environ else launch(a)


if __name__ == "__main__":
    sys.exit(main())
