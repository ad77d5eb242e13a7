#!/usr/bin/python3
# Captures RoCEv2 packets JCCL sends on an interface (default lo) and checks each with tools JCCL did not write:
# scapy decodes the BTH and computes the ICRC (scapy.contrib.roce), and the IPv4 header shows what the kernel put on
# the wire (identification, DF) — the fields the receiver assumes when it verifies the ICRC.
#
# UDP GSO: a send of several packets (UDP_SEGMENT) crosses loopback as one buffer, which a packet socket sees whole.
# The capture asks the kernel for each buffer's segmentation metadata (PACKET_VNET_HDR: gso_type, gso_size) and
# cuts a GSO buffer into the datagrams Linux would put on a wire (inet_gso_segment / __udp_gso_segment): segment k
# carries gso_size bytes of the UDP payload (the last the rest), IPv4 identification base + k, its own total and
# UDP lengths. Every packet's ICRC is then checked as scapy computes it, so a sender that got segment k's ICRC wrong
# (computed for identification 0, say) fails here.
#
# Needs root (AF_PACKET) and python3-scapy.
# Usage: roce-capture-check.py [iface] [seconds] [udp-port ...]   (seconds 0: until standard input closes)
# Environment: PCAP=<file> also writes the (segmented) datagrams as an Ethernet pcap (tshark -r reads it);
# CHECK=0 skips scapy's checks (no scapy needed: only the pcap).
# Prints "ready" once capturing. With no ports, every UDP datagram whose payload parses as a BTH with TVer 0 and
# P_Key 0xFFFF is checked. Then one line per destination QP: "flow dqpn=0x... sports=[...]", the UDP source ports
# its packets (GSO segments included) came from (RoCEv2 senders use the flow-label port of the QP pair).
import os
import select
import socket
import struct
import sys
import time
check = os.environ.get("CHECK", "1") != "0"
if check:
    from scapy.all import bind_layers, IP, UDP
    from scapy.contrib.roce import BTH

iface = sys.argv[1] if len(sys.argv) > 1 else "lo"
seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 10
ports = {int(p) for p in sys.argv[3:]}
pcap = os.environ.get("PCAP")

ETH_P_ALL = 3
SOL_PACKET = 263       # <linux/socket.h>
PACKET_VNET_HDR = 15  # <linux/if_packet.h>
PACKET_OUTGOING = 4   # loopback shows each frame twice: on transmit (outgoing) and on receive
# Only the transmit copy is kept: it reaches this socket inside the sender's send call (dev_queue_xmit_nit), while
# the receive copy waits for the backlog's softirq, which a loaded host may run late (frames sent just before the
# end of a capture were missing).
KEEP = PACKET_OUTGOING
VIRTIO_NET_HDR_GSO_UDP_L4 = 5
VNET_HDR = 10         # struct virtio_net_hdr: flags, gso_type, hdr_len, gso_size, csum_start, csum_offset

SO_ATTACH_FILTER = 26


def port_filter(wanted):
    """A classic BPF program: IPv4, UDP, not a later fragment, source or destination port in wanted. In the kernel,
    as tshark's capture filter was: the rest of loopback (other programs' traffic) never fills this socket's buffer."""
    program = []  # (code, jt, jf, k) with jt/jf as labels, resolved below
    drop, accept = "drop", "accept"
    program.append((0x28, None, None, 12))            # ldh [12]            ethertype
    program.append((0x15, None, drop, 0x0800))        # jeq #IPv4
    program.append((0x30, None, None, 23))            # ldb [23]            IP protocol
    program.append((0x15, None, drop, 17))            # jeq #UDP
    program.append((0x28, None, None, 20))            # ldh [20]            flags and fragment offset
    program.append((0x45, drop, None, 0x1FFF))        # jset #0x1fff        a later fragment: no UDP header
    program.append((0xB1, None, None, 14))            # ldxb 4*([14]&0xf)   IP header length
    for offset in (14, 16):                           # source port, destination port
        program.append((0x48, None, None, offset))    # ldh [x+offset]
        for p in sorted(wanted):
            program.append((0x15, accept, None, p))   # jeq #port
    program.append((0x06, None, None, 0))             # drop: ret #0
    program.append((0x06, None, None, 1 << 18))       # accept: ret #262144
    at = {drop: len(program) - 2, accept: len(program) - 1}
    raw = b""
    for i, (code, jt, jf, k) in enumerate(program):
        jump = lambda label: 0 if label is None else at[label] - i - 1
        raw += struct.pack("HBBI", code, jump(jt), jump(jf), k)
    return len(program), raw


sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
if ports:
    import ctypes
    count, instructions = port_filter(ports)
    filter_buffer = ctypes.create_string_buffer(instructions)
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, struct.pack("@HP", count, ctypes.addressof(filter_buffer)))
sock.setsockopt(SOL_PACKET, PACKET_VNET_HDR, 1)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
sock.bind((iface, 0))
print("ready", flush=True)

frames = []
deadline = time.monotonic() + seconds if seconds > 0 else None
watch = [sock] if seconds > 0 else [sock, sys.stdin]
while True:
    timeout = None if deadline is None else deadline - time.monotonic()
    if timeout is not None and timeout <= 0:
        break
    ready, _, _ = select.select(watch, [], [], timeout)
    if sys.stdin in ready and not sys.stdin.buffer.read1(4096):
        break
    if sock in ready:
        data, address = sock.recvfrom(1 << 17)
        if address[2] == KEEP:
            frames.append(data)
# what is still queued arrived before the end
sock.setblocking(False)
try:
    while True:
        data, address = sock.recvfrom(1 << 17)
        if address[2] == KEEP:
            frames.append(data)
except BlockingIOError:
    pass


def ipv4_checksum(header):
    total = sum(struct.unpack("!10H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def datagrams(frame):
    """The IPv4 datagrams (bytes) a captured frame stands for, with each one's segment index."""
    flags, gso_type, hdr_len, gso_size, csum_start, csum_offset = struct.unpack("<BBHHHH", frame[:VNET_HDR])
    eth = frame[VNET_HDR:]
    if len(eth) < 14 + 28 or eth[12:14] != b"\x08\x00":
        return []
    ip = eth[14:]
    ihl = (ip[0] & 0x0F) * 4
    if ip[0] >> 4 != 4 or ip[9] != 17:
        return []
    header, udp, payload = ip[:ihl], ip[ihl:ihl + 8], ip[ihl + 8:]
    if gso_type != VIRTIO_NET_HDR_GSO_UDP_L4 or gso_size == 0 or len(payload) <= gso_size:
        return [(0, bytes(ip[:struct.unpack("!H", ip[2:4])[0]]))]
    base_id = struct.unpack("!H", header[4:6])[0]
    out = []
    for k, at in enumerate(range(0, len(payload), gso_size)):
        segment = payload[at:at + gso_size]
        h = bytearray(header)
        struct.pack_into("!H", h, 2, ihl + 8 + len(segment))
        struct.pack_into("!H", h, 4, (base_id + k) & 0xFFFF)
        struct.pack_into("!H", h, 10, 0)
        struct.pack_into("!H", h, 10, ipv4_checksum(bytes(h[:20])))
        u = bytearray(udp)
        struct.pack_into("!H", u, 4, 8 + len(segment))
        out.append((k, bytes(h) + bytes(u) + bytes(segment)))
    return out


def plausible(raw):
    ihl = (raw[0] & 0x0F) * 4
    dport = struct.unpack("!H", raw[ihl + 2:ihl + 4])[0]
    if ports and dport not in ports:
        return False
    payload = raw[ihl + 8:]
    return len(payload) >= 16 and payload[1] & 0x0F == 0 and payload[2:4] == b"\xff\xff"


checked = bad_icrc = bad_id = no_df = gso_frames = gso_segments = 0
opcodes = {}
written = []
sports = {}
for frame in frames:
    parts = datagrams(frame)
    parts = [(k, raw) for k, raw in parts if plausible(raw)]
    if len(parts) > 1:
        gso_frames += 1
        gso_segments += len(parts)
    for k, raw in parts:
        written.append(raw)
        ihl = (raw[0] & 0x0F) * 4
        dqpn = int.from_bytes(raw[ihl + 8 + 5:ihl + 8 + 8], "big")  # BTH bytes 5..7
        sports.setdefault(dqpn, set()).add(struct.unpack("!H", raw[ihl:ihl + 2])[0])
        if not check:
            checked += 1
            continue
        ip = IP(raw)
        bind_layers(UDP, BTH, dport=ip[UDP].dport)
        ip = IP(raw)
        bth = ip[BTH]
        checked += 1
        opcodes[bth.opcode] = opcodes.get(bth.opcode, 0) + 1
        if bth.compute_icrc(None) != raw[-4:]:
            bad_icrc += 1
        if ip.id != k:  # 0 for a datagram sent alone; k for segment k of a GSO send (base 0)
            bad_id += 1
        if not ip.flags.DF:
            no_df += 1

if pcap:
    with open(pcap, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 1 << 17, 1))  # Ethernet
        now = time.time()
        for raw in written:
            frame = b"\x00" * 12 + b"\x08\x00" + raw
            f.write(struct.pack("<IIII", int(now), int(now * 1e6) % 1000000, len(frame), len(frame)))
            f.write(frame)

print("packets %d, opcodes %s, ICRC mismatches %d, IPv4 id != segment index: %d, without DF: %d, "
      "GSO sends %d carrying %d packets"
      % (checked, {hex(k): v for k, v in sorted(opcodes.items())}, bad_icrc, bad_id, no_df, gso_frames,
         gso_segments))
for dqpn, ports_seen in sorted(sports.items()):
    print("flow dqpn=0x%x sports=%s" % (dqpn, sorted(ports_seen)))
sys.exit(0 if checked > 0 and bad_icrc == 0 and bad_id == 0 and no_df == 0 else 1)
