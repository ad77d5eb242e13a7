"""Minimal stand-in for `./jccl run -np N`: starts N copies of a command with the environment the JCCL launcher
sets (JCCL_RANK, JCCL_WORLD_SIZE, JCCL_LOCAL_RANK, JCCL_LOCAL_SIZE, JCCL_JOB_ID, JCCL_STORE_ADDR, MASTER_ADDR,
MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE); rank 0 serves the store. First failure kills the rest.
usage: launch.py N -- command args...
"""
import os
import secrets
import signal
import socket
import subprocess
import sys


def main():
    n = int(sys.argv[1])
    cmd = sys.argv[3:] if sys.argv[2] == "--" else sys.argv[2:]
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    job = secrets.token_hex(6)
    procs = []
    for r in range(n):
        env = dict(os.environ, JCCL_RANK=str(r), JCCL_WORLD_SIZE=str(n), JCCL_LOCAL_RANK=str(r),
                   JCCL_LOCAL_SIZE=str(n), JCCL_JOB_ID=job, JCCL_STORE_ADDR=f"127.0.0.1:{port}",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r), WORLD_SIZE=str(n),
                   LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(n))
        procs.append(subprocess.Popen(cmd, env=env))
    status = 0
    by_pid = {p.pid: p for p in procs}
    while by_pid:
        pid, wstatus = os.wait()
        if by_pid.pop(pid, None) is None:
            continue
        rc = os.waitstatus_to_exitcode(wstatus)
        if rc != 0 and status == 0:
            status = rc if rc > 0 else 128 - rc
            for q in by_pid.values():
                q.send_signal(signal.SIGKILL)
    return status


if __name__ == "__main__":
    sys.exit(main())
