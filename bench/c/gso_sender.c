// gso_sender: roce0's 1 MiB RDMA WRITE stream on loopback, in C, with the sender's msghdrs built exactly as
// roce0's TxBatch builds them: the yardstick for roce0's send path (issue 20, docs/transport-roce.md "Where the
// bandwidth goes"; jccl-transport-roce/scripts/roce-copy-profile.sh runs it beside roce0 under perf).
//
// Two threads on 127.0.0.1, both busy-polling non-blocking sockets, as jccl perf write_bw's two JVMs do:
//  * the sender: a 1 MiB source region (page aligned, as RoceProtectionDomain allocates it) sent as RoCE WRITE
//    packets of MTU 4096 (FIRST: 28 header bytes, MIDDLE/LAST: 12; 4096 payload; 4 ICRC bytes) in batches of 64
//    packets, one sendmmsg per batch, grouped into UDP GSO messages as TxBatch.commit groups them (FIRST with the
//    first MIDDLE, then 15 MIDDLEs per message: 65,507 bytes at most), each packet as three iovecs (header in its
//    slot, payload in the region, ICRC in its slot), from a send-only socket (SO_REUSEPORT, SO_RCVBUF minimum,
//    SO_SNDBUF 4 MiB, IP_MTU_DISCOVER DO, IP_TOS ECT(0)); at most WINDOW packets beyond the last ACK (roce0: 128),
//    AckReq on every 64th packet and each message's last, ACKs received on a second socket between batches.
//  * the receiver: a UDP GRO socket (IP_RECVTOS, 4 MiB buffers), recvmmsg into 32 slots of 64 KiB, each GRO
//    datagram cut at its segment size, each payload copied into a 1 MiB target region, a 16-byte ACK sent back
//    for each AckReq packet.
//
//   gso_sender [SECONDS] [LAYOUT] [SEGMENT_MODE]
//     LAYOUT: roce3   three iovecs per packet as roce0 (default)
//             flat    one iovec per packet: header, payload and ICRC copied into the packet's slot first (the
//                     layout roce0 had before "payload from the region")
//             flat1   one iovec per packet from the slot, nothing copied per packet (payload pre-filled)
//             c32     one 32-byte header iovec + the 4096-byte payload per packet (the earlier C sender)
//     SEGMENT_MODE: roce  segments as roce0 cuts them (4112-byte MIDDLEs, 15 per message)
//                   page  4096-byte payloads with no RoCE header or ICRC (LAYOUT c32 adds its 32-byte header iovec,
//                         any other LAYOUT sends the payload alone from the region; no AckReq: use WINDOW=0)
//   Environment: WINDOW (packets, default 128; 0 = no ACKs, no window), SRC_STRIDE (bytes between payloads in
//   the region, default 4096), SRC_OFFSET (added to each payload's address, default 0), READ_SRC=1 (read each
//   payload before sending it, as roce0's ICRC does), RX_COPY=0 (the receiver does not copy payloads), SPLIT=1
//   (one sendmmsg per message instead of per 64-packet batch), BATCH (packets per sendmmsg, default 64), YIELD=1
//   (sched_yield while the window is closed and no ACK came), RX_YIELD=N (the receiver yields after N empty
//   recvmmsg calls in a row), ACK_EVERY (AckReq on every this many packets, default 64 as roce0).
// Output: gso_sender,LAYOUT,SEGMENT_MODE,GB/s,sender CPU s per GB,receiver CPU s per GB,sendmmsg calls per MiB,
//         datagrams per MiB,EAGAIN per MiB,microseconds inside sendmmsg per MiB
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

#define MTU 4096
#define MSG_BYTES (1 << 20)
#define PACKETS (MSG_BYTES / MTU)
#define MAX_GSO 65507
#define MAX_SEGMENTS 64
#define RX_SLOTS 32
#define RX_SLOT_BYTES 65536

static int yield_when_blocked, rx_yield, ack_every = 64;
static int seconds = 3, window = 128, batch_packets = 64, read_src, rx_copy = 1, split, src_stride = MTU, src_offset;
static const char *layout = "roce3", *segmode = "roce";
static struct sockaddr_in rx_addr, ack_addr;
static int tx_fd, ack_fd, rx_fd;
static atomic_int stop;
static atomic_long acked; // packets acknowledged (the receiver's count)
static unsigned char *src, *dst;
static double rx_cpu;
static long eagain, calls, datagrams;
static double send_s; // wall time inside sendmmsg

static double now(clockid_t c) { struct timespec t; clock_gettime(c, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static void set(int fd, int level, int opt, int v) {
    if (setsockopt(fd, level, opt, &v, sizeof v) != 0) { fprintf(stderr, "setsockopt %d/%d: %s\n", level, opt, strerror(errno)); exit(1); }
}
static int open_udp(int port, int reuse) {
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    set(fd, IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO);
    set(fd, IPPROTO_IP, IP_TOS, 0x02);
    if (reuse) { set(fd, SOL_SOCKET, SO_REUSEPORT, 1); set(fd, SOL_SOCKET, SO_RCVBUF, 1); }
    else { set(fd, IPPROTO_IP, IP_RECVTOS, 1); set(fd, SOL_SOCKET, SO_RCVBUF, 4 << 20); }
    set(fd, SOL_SOCKET, SO_SNDBUF, 4 << 20);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(fd, (struct sockaddr *) &a, sizeof a) != 0) { perror("bind"); exit(1); }
    return fd;
}

// The receiver: GRO datagrams cut at the segment size, payloads copied into the target, ACKs for AckReq packets.
static void *receiver(void *arg) {
    (void) arg;
    static unsigned char ring[RX_SLOTS][RX_SLOT_BYTES];
    static char ctl[RX_SLOTS][64];
    struct mmsghdr h[RX_SLOTS];
    struct iovec iov[RX_SLOTS];
    for (int i = 0; i < RX_SLOTS; i++) {
        iov[i] = (struct iovec) {ring[i], RX_SLOT_BYTES};
        memset(&h[i], 0, sizeof h[i]);
        h[i].msg_hdr.msg_iov = &iov[i];
        h[i].msg_hdr.msg_iovlen = 1;
    }
    unsigned char ack[16] = {0x11};
    long packets = 0;
    int empty = 0; // recvmmsg calls in a row that found nothing
    double c0 = now(CLOCK_THREAD_CPUTIME_ID);
    while (!atomic_load(&stop)) {
        for (int i = 0; i < RX_SLOTS; i++) { h[i].msg_hdr.msg_control = ctl[i]; h[i].msg_hdr.msg_controllen = 64; }
        int n = recvmmsg(rx_fd, h, RX_SLOTS, MSG_DONTWAIT, NULL);
        if (n <= 0) {
            if (rx_yield && ++empty >= rx_yield) { sched_yield(); empty = 0; } // the sender may wait for this CPU
            continue;
        }
        empty = 0;
        for (int i = 0; i < n; i++) {
            int len = h[i].msg_len, seg = len;
            for (struct cmsghdr *c = CMSG_FIRSTHDR(&h[i].msg_hdr); c; c = CMSG_NXTHDR(&h[i].msg_hdr, c))
                if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) seg = *(int *) CMSG_DATA(c);
            for (int off = 0; off < len; off += seg) {
                int plen = len - off < seg ? len - off : seg;
                unsigned char *p = ring[i] + off;
                int hdr = p[0] == 0x06 ? 28 : p[0] == 0x07 || p[0] == 0x08 ? 12 : 0; // FIRST / MIDDLE, LAST / raw
                int payload = plen - hdr - (hdr ? 4 : 0);
                if (rx_copy) memcpy(dst + (packets % PACKETS) * MTU, p + hdr, payload > MTU ? MTU : payload);
                packets++;
                if (window && (p[8] & 0x80)) { // AckReq: ACK this PSN (the packet count)
                    memcpy(ack + 8, &packets, sizeof packets);
                    while (sendto(rx_fd, ack, sizeof ack, 0, (struct sockaddr *) &ack_addr, sizeof ack_addr) < 0 && errno == EAGAIN) {}
                }
            }
        }
    }
    rx_cpu = now(CLOCK_THREAD_CPUTIME_ID) - c0;
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1) seconds = atoi(argv[1]);
    if (argc > 2) layout = argv[2];
    if (argc > 3) segmode = argv[3];
    if (getenv("WINDOW")) window = atoi(getenv("WINDOW"));
    if (getenv("BATCH")) batch_packets = atoi(getenv("BATCH"));
    if (getenv("READ_SRC")) read_src = atoi(getenv("READ_SRC"));
    if (getenv("RX_COPY")) rx_copy = atoi(getenv("RX_COPY"));
    if (getenv("SPLIT")) split = atoi(getenv("SPLIT"));
    if (getenv("YIELD")) yield_when_blocked = atoi(getenv("YIELD"));
    if (getenv("RX_YIELD")) rx_yield = atoi(getenv("RX_YIELD"));
    if (getenv("ACK_EVERY")) ack_every = atoi(getenv("ACK_EVERY"));
    if (ack_every < 1) { fprintf(stderr, "ACK_EVERY >= 1\n"); return 2; }
    if (getenv("SRC_STRIDE")) src_stride = atoi(getenv("SRC_STRIDE"));
    if (getenv("SRC_OFFSET")) src_offset = atoi(getenv("SRC_OFFSET"));
    if (batch_packets < 1 || batch_packets > 256) { fprintf(stderr, "BATCH 1..256\n"); return 2; }
    int roce = strcmp(segmode, "roce") == 0;
    long src_bytes = (long) src_stride * PACKETS + 2 * MTU;
    src = aligned_alloc(4096, (src_bytes + 4095) & ~4095L);
    dst = aligned_alloc(4096, MSG_BYTES);
    memset(src, 0x5a, src_bytes);
    memset(dst, 0, MSG_BYTES);

    rx_fd = open_udp(0, 0);
    set(rx_fd, SOL_UDP, UDP_GRO, 1);
    ack_fd = open_udp(0, 0);
    tx_fd = open_udp(0, 1);
    socklen_t l = sizeof rx_addr;
    getsockname(rx_fd, (struct sockaddr *) &rx_addr, &l);
    l = sizeof ack_addr;
    getsockname(ack_fd, (struct sockaddr *) &ack_addr, &l);

    // TxBatch: slots of MTU + 64 bytes in one 64-byte aligned block, three iovecs per packet at most
    int slot_bytes = MTU + 64, cap = batch_packets;
    unsigned char *slots = aligned_alloc(64, (size_t) cap * slot_bytes);
    memset(slots, 0, (size_t) cap * slot_bytes);
    struct iovec *iov = calloc((size_t) cap * 3, sizeof *iov);
    struct mmsghdr *h = calloc(cap, sizeof *h);
    char (*ctl)[CMSG_SPACE(sizeof(uint16_t))] = calloc(cap, CMSG_SPACE(sizeof(uint16_t)));
    for (int i = 0; i < cap; i++) {
        struct cmsghdr *c = (struct cmsghdr *) ctl[i];
        c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        c->cmsg_level = SOL_UDP;
        c->cmsg_type = UDP_SEGMENT;
    }

    pthread_t rx;
    pthread_create(&rx, NULL, receiver, NULL);
    long sent = 0; // packets sent
    long messages = 0;
    unsigned char ackbuf[64];
    volatile unsigned long sink = 0;
    double t0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_THREAD_CPUTIME_ID), t = t0;
    int psn_in_msg = 0; // packet index inside the current 1 MiB WRITE
    while (t - t0 < seconds) {
        // ACKs that arrived (the sender's poller does this between posts)
        for (;;) {
            ssize_t n = recv(ack_fd, ackbuf, sizeof ackbuf, MSG_DONTWAIT);
            if (n <= 0) break;
            long a; memcpy(&a, ackbuf + 8, sizeof a);
            if (a > atomic_load(&acked)) atomic_store(&acked, a);
        }
        // as roce0's requester: as many packets as the window has room for, a batch at most
        int room = window ? window - (int) (sent - atomic_load(&acked)) : cap;
        if (room <= 0) {
            if (yield_when_blocked) sched_yield(); // the receiver may be waiting for this CPU
            t = now(CLOCK_MONOTONIC);
            continue;
        }
        // build one batch of cap packets as TxBatch.commit groups them
        int count = 0, m = -1, closed = 0, iv = 0;
        int mstart[256], mpk[256], mseg[256], mbytes[256], miov[256];
        int take = room < cap ? room : cap;
        while (count < take) {
            int k = psn_in_msg;
            int hdr = !roce ? (strcmp(layout, "c32") == 0 ? 32 : 0) : (k == 0 ? 28 : 12);
            int trailer = roce ? 4 : 0;
            int len = hdr + MTU + trailer;
            unsigned char *slot = slots + (size_t) count * slot_bytes;
            unsigned char *payload = src + (size_t) k * src_stride + src_offset;
            slot[0] = k == 0 ? 0x06 : k == PACKETS - 1 ? 0x08 : 0x07;
            slot[8] = (k == PACKETS - 1 || (sent + count + 1) % ack_every == 0) ? 0x80 : 0; // AckReq
            if (read_src) { unsigned long s = 0; for (int j = 0; j < MTU; j += 64) s += payload[j]; sink += s; }
            int first = iv, n;
            if (strcmp(layout, "roce3") == 0 && roce) {
                iov[iv++] = (struct iovec) {slot, hdr};
                iov[iv++] = (struct iovec) {payload, MTU};
                iov[iv++] = (struct iovec) {slot + hdr + MTU, trailer};
                n = 3;
            } else if (strcmp(layout, "flat") == 0) {
                memcpy(slot + hdr, payload, MTU);
                iov[iv++] = (struct iovec) {slot, len};
                n = 1;
            } else if (strcmp(layout, "flat1") == 0) {
                iov[iv++] = (struct iovec) {slot, len};
                n = 1;
            } else if (hdr) { // c32
                iov[iv++] = (struct iovec) {slot, hdr};
                iov[iv++] = (struct iovec) {payload, MTU};
                n = 2;
            } else { // page: the payload alone
                iov[iv++] = (struct iovec) {payload, MTU};
                n = 1;
            }
            if (m >= 0 && !closed && len <= mseg[m] && mpk[m] < MAX_SEGMENTS && mbytes[m] + len <= MAX_GSO) {
                mpk[m]++; mbytes[m] += len; miov[m] += n; closed = len < mseg[m]; // joins the open message
            } else {
                m++; mstart[m] = first; mpk[m] = 1; mseg[m] = len; mbytes[m] = len; miov[m] = n; closed = 0;
            }
            count++;
            psn_in_msg = (psn_in_msg + 1) % PACKETS;
            if (psn_in_msg == 0) { closed = 1; messages++; }
        }
        for (int i = 0; i <= m; i++) {
            memset(&h[i], 0, sizeof h[i]);
            h[i].msg_hdr.msg_name = &rx_addr;
            h[i].msg_hdr.msg_namelen = sizeof rx_addr;
            h[i].msg_hdr.msg_iov = &iov[mstart[i]];
            h[i].msg_hdr.msg_iovlen = miov[i];
            if (mpk[i] > 1) {
                *(uint16_t *) CMSG_DATA((struct cmsghdr *) ctl[i]) = mseg[i];
                h[i].msg_hdr.msg_control = ctl[i];
                h[i].msg_hdr.msg_controllen = sizeof ctl[i];
            }
        }
        int done = 0, msgs = m + 1;
        while (done < msgs) {
            int per = split ? 1 : msgs - done;
            double s0 = now(CLOCK_MONOTONIC);
            int r = sendmmsg(tx_fd, h + done, per, 0);
            send_s += now(CLOCK_MONOTONIC) - s0;
            calls++;
            if (r > 0) { done += r; continue; }
            if (errno == EAGAIN || errno == ENOBUFS) { eagain++; continue; }
            perror("sendmmsg"); return 1;
        }
        datagrams += msgs;
        sent += count;
        t = now(CLOCK_MONOTONIC);
    }
    double cpu = now(CLOCK_THREAD_CPUTIME_ID) - c0, wall = t - t0;
    atomic_store(&stop, 1);
    pthread_join(rx, NULL);
    double gb = (double) sent * MTU / 1e9, mib = (double) sent * MTU / (1 << 20);
    printf("gso_sender,%s,%s,%.3f,%.3f,%.3f,%.2f,%.2f,%.2f,%.1f\n", layout, segmode, gb / wall, cpu / gb, rx_cpu / gb,
           calls / mib, datagrams / mib, eagain / mib, send_s * 1e6 / mib);
    return (int) (sink & 0);
}
