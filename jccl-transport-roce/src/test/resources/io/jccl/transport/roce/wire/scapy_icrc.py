# Reads IPv4 datagrams (hex, one per line) on stdin and prints, per line, the ICRC bytes (hex, as they go on the
# wire) that scapy.contrib.roce computes for each: an ICRC implementation JCCL did not write. Exit 3: no scapy.
import sys

try:
    from scapy.layers.inet import IP
    from scapy.contrib.roce import BTH
except ImportError as e:
    print("no scapy: %s" % e, file=sys.stderr)
    sys.exit(3)

for line in sys.stdin:
    line = line.strip()
    if not line:
        continue
    packet = IP(bytes.fromhex(line))
    if BTH not in packet:
        print("not decoded as RoCEv2 (BTH): " + packet.summary(), file=sys.stderr)
        sys.exit(2)
    print(packet[BTH].compute_icrc(None).hex(), flush=True)
