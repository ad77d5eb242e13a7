#!/usr/bin/python3
# Captures RoCEv2 packets JCCL sends on an interface (default lo) for some seconds and checks each with tools JCCL
# did not write: scapy decodes the BTH and computes the ICRC (scapy.contrib.roce), and the IPv4 header shows what the
# kernel put on the wire (identification, DF) — the fields the receiver assumes when it verifies the ICRC.
# Needs root (AF_PACKET) and python3-scapy. Usage: roce-capture-check.py [iface] [seconds] [udp-port ...]
# Prints "ready" once capturing. With no ports, every UDP datagram whose payload parses as a BTH with TVer 0 and
# P_Key 0xFFFF is checked. Then one line per destination QP: "flow dqpn=0x... sports=[...]", the UDP source ports
# its packets came from (RoCEv2 senders use the flow-label port of the QP pair).
import sys
from scapy.all import sniff, bind_layers, IP, UDP
from scapy.contrib.roce import BTH

iface = sys.argv[1] if len(sys.argv) > 1 else "lo"
seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 10
ports = {int(p) for p in sys.argv[3:]}

def plausible(p):
    if IP not in p or UDP not in p:
        return False
    if ports and p[UDP].dport not in ports:
        return False
    payload = bytes(p[UDP].payload)
    return len(payload) >= 16 and payload[1] & 0x0F == 0 and payload[2:4] == b"\xff\xff"

packets = sniff(iface=iface, timeout=seconds, lfilter=plausible,
                started_callback=lambda: print("ready", flush=True))
checked = bad_icrc = nonzero_id = no_df = 0
opcodes = {}
sports = {}
for p in packets:
    raw = bytes(p[IP])
    bind_layers(UDP, BTH, dport=p[UDP].dport)
    ip = IP(raw)
    bth = ip[BTH]
    checked += 1
    opcodes[bth.opcode] = opcodes.get(bth.opcode, 0) + 1
    sports.setdefault(bth.dqpn, set()).add(p[UDP].sport)
    if bth.compute_icrc(None) != raw[-4:]:
        bad_icrc += 1
    if ip.id != 0:
        nonzero_id += 1
    if not ip.flags.DF:
        no_df += 1
print("packets %d, opcodes %s, ICRC mismatches %d, IPv4 id != 0: %d, without DF: %d"
      % (checked, {hex(k): v for k, v in sorted(opcodes.items())}, bad_icrc, nonzero_id, no_df))
for dqpn, ports_seen in sorted(sports.items()):
    print("flow dqpn=0x%x sports=%s" % (dqpn, sorted(ports_seen)))
sys.exit(0 if checked > 0 and bad_icrc == 0 and nonzero_id == 0 and no_df == 0 else 1)
