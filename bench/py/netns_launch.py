"""Starts rank i of a 2..4-rank job inside network namespace <prefix>-h<i+1> (scripts/netns.sh's test bed), so the
ranks talk over veth + bridge as if on separate hosts. --style jccl sets JCCL_RANK, JCCL_WORLD_SIZE,
JCCL_LOCAL_RANK=0, JCCL_LOCAL_SIZE=1, JCCL_STORE_ADDR (rank 0's address), JCCL_JOB_ID and JCCL_HOST_ID=h<i+1> (so
JCCL does not take the namespaces for one host); --style torch sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
GLOO_SOCKET_IFNAME=eth0. The first rank to fail kills the others; exit status = first non-zero status.
usage: netns_launch.py --np 2 --style jccl|torch [--prefix jbench] -- command args...
"""
import argparse
import os
import secrets
import signal
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--style", choices=("jccl", "torch"), required=True)
    ap.add_argument("--prefix", default=os.environ.get("JCCL_NETNS_PREFIX", "jbench"))
    ap.add_argument("--port", type=int, default=29650)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    master = "10.77.0.1"
    job = secrets.token_hex(6)
    procs = {}
    for r in range(a.np):
        ns = f"{a.prefix}-h{r + 1}"
        if a.style == "jccl":
            env = {"JCCL_RANK": r, "JCCL_WORLD_SIZE": a.np, "JCCL_LOCAL_RANK": 0, "JCCL_LOCAL_SIZE": 1,
                   "JCCL_STORE_ADDR": f"{master}:{a.port}", "JCCL_JOB_ID": job, "JCCL_HOST_ID": f"h{r + 1}"}
        else:
            env = {"RANK": r, "WORLD_SIZE": a.np, "LOCAL_RANK": 0, "MASTER_ADDR": master, "MASTER_PORT": a.port,
                   "GLOO_SOCKET_IFNAME": "eth0", "OMP_NUM_THREADS": 1}
        full = ["ip", "netns", "exec", ns, "env"] + [f"{k}={v}" for k, v in env.items()] + cmd
        p = subprocess.Popen(full, stdout=None if r == 0 else subprocess.DEVNULL)
        procs[p.pid] = p
    status = 0
    while procs:
        pid, ws = os.wait()
        if procs.pop(pid, None) is None:
            continue
        rc = os.waitstatus_to_exitcode(ws)
        if rc != 0 and status == 0:
            status = rc if rc > 0 else 128 - rc
            for q in procs.values():
                q.send_signal(signal.SIGKILL)
    return status


if __name__ == "__main__":
    sys.exit(main())
