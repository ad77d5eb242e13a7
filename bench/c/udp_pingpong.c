// udp_pingpong: the latency floor roce0's 8-byte WRITE latency is held against (docs/transport-roce.md), and the
// same ping-pong made of roce0's own system calls per hop, the kernel's floor under roce0 ("Another VM" there).
//
// Two UDP sockets on 127.0.0.1, one process, two threads (ping and pong), each busy-polling its non-blocking
// socket. Each round the pinger sends a hop and waits for the echo. Prints one-way latency (round trip / 2) as
// perftest's *_lat tools do.
//
//   udp_pingpong SIZE ITERATIONS [SERVER_CPU,CLIENT_CPU|-] [plain|single|roce]
// With CPUs, the pong thread runs on SERVER_CPU and the pinging main thread on CLIENT_CPU (as `jccl perf --local
// --cpus SERVER,CLIENT`), so the two never share a core; "-" leaves both to the scheduler.
// The hop:
//   plain  (default): sendto() of SIZE bytes, recv(): one sendto and one successful recv per packet on each side
//   single : roce0's socket options (IP_MTU_DISCOVER DO, IP_RECVTOS, IP_TOS ECT(0), UDP_GRO on the receiving
//            socket) and calls: one sendmmsg() of a WRITE ONLY's bytes in three iovecs (28-byte header, SIZE bytes
//            of payload, at most 4096, 4-byte ICRC), recvmmsg() of one slot with a control buffer
//   roce   : what roce0 sends per hop of its ping-pong: the answer (as single) and the ACK of the request it
//            answers (20 bytes) as one UDP GSO message (UDP_SEGMENT = the answer's length), received through GRO
//            as one datagram
// No JVM and no RoCE processing: the bytes are not headers and nothing is checked.
// Output: udp_pingpong[-single|-roce],SIZE,ITERATIONS,t_min_us,t_typical_us (median),t_avg_us
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

enum { PLAIN, SINGLE, ROCE };
static const char *HOPS[] = {"plain", "single", "roce"};
static const char *NAMES[] = {"udp_pingpong", "udp_pingpong-single", "udp_pingpong-roce"};
#define HEADER 28 /* BTH + RETH */
#define ICRC 4
#define ACK 20 /* BTH + AETH + ICRC */

static int hop = PLAIN, size, iterations;
static int server_cpu = -1, client_cpu = -1;
static struct sockaddr_in ping_addr, pong_addr;
static int ping_fd, pong_fd;
#define PAYLOAD_AT 128 /* the payload's place in tx; the header, ICRC and ACK lie before it */
static char tx[2][PAYLOAD_AT + 65536], rx[2][65536], control_in[2][128], control_out[2][64];

// Pins the calling thread to CPU cpu (cpu < 0: left to the scheduler), as `jccl perf --cpus` pins its two ends.
static void pin_to(int cpu) {
    if (cpu < 0) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    if (rc != 0) { fprintf(stderr, "cannot pin to CPU %d: %s\n", cpu, strerror(rc)); exit(1); }
}

static int open_socket(struct sockaddr_in *addr) {
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    if (fd < 0) { perror("socket"); exit(1); }
    if (hop != PLAIN) {
        int one = 1, pmtu = IP_PMTUDISC_DO, tos = 2;
        setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof pmtu);
        setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &one, sizeof one);
        setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof tos);
        if (setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof one) != 0) { perror("UDP_GRO"); exit(1); }
    }
    memset(addr, 0, sizeof *addr);
    addr->sin_family = AF_INET;
    addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *) addr, sizeof *addr) != 0) { perror("bind"); exit(1); }
    socklen_t len = sizeof *addr;
    getsockname(fd, (struct sockaddr *) addr, &len);
    return fd;
}

static void send_hop(int side, int fd, struct sockaddr_in *to) {
    if (hop == PLAIN) {
        while (sendto(fd, tx[side], size, 0, (struct sockaddr *) to, sizeof *to) != size) {
            if (errno != EAGAIN) { perror("sendto"); exit(1); }
        }
        return;
    }
    // header, payload, ICRC; for ROCE a fourth iovec: the ACK
    struct iovec iov[4] = {{tx[side], HEADER}, {tx[side] + PAYLOAD_AT, size}, {tx[side] + 32, ICRC},
                           {tx[side] + 64, ACK}};
    struct mmsghdr m;
    memset(&m, 0, sizeof m);
    m.msg_hdr.msg_name = to;
    m.msg_hdr.msg_namelen = sizeof *to;
    m.msg_hdr.msg_iov = iov;
    m.msg_hdr.msg_iovlen = hop == ROCE ? 4 : 3;
    if (hop == ROCE) {
        struct cmsghdr *c = (struct cmsghdr *) control_out[side];
        c->cmsg_level = SOL_UDP;
        c->cmsg_type = UDP_SEGMENT;
        c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        *(uint16_t *) CMSG_DATA(c) = HEADER + size + ICRC;
        m.msg_hdr.msg_control = control_out[side];
        m.msg_hdr.msg_controllen = CMSG_SPACE(sizeof(uint16_t));
    }
    while (sendmmsg(fd, &m, 1, 0) != 1) {
        if (errno != EAGAIN) { perror("sendmmsg"); exit(1); }
    }
}

static void receive_hop(int side, int fd) {
    if (hop == PLAIN) {
        while (recv(fd, rx[side], sizeof rx[side], 0) < 0) {
            if (errno != EAGAIN) { perror("recv"); exit(1); }
        }
        return;
    }
    struct iovec iov = {rx[side], sizeof rx[side]};
    struct sockaddr_in from;
    struct mmsghdr m;
    memset(&m, 0, sizeof m);
    m.msg_hdr.msg_name = &from;
    m.msg_hdr.msg_iov = &iov;
    m.msg_hdr.msg_iovlen = 1;
    m.msg_hdr.msg_control = control_in[side];
    for (;;) {
        m.msg_hdr.msg_namelen = sizeof from;
        m.msg_hdr.msg_controllen = sizeof control_in[side];
        if (recvmmsg(fd, &m, 1, MSG_DONTWAIT, NULL) == 1) {
            return;
        }
        if (errno != EAGAIN) { perror("recvmmsg"); exit(1); }
    }
}

static void *pong(void *arg) {
    (void) arg;
    pin_to(server_cpu);
    for (int i = 0; i < iterations; i++) {
        receive_hop(1, pong_fd);
        send_hop(1, pong_fd, &ping_addr);
    }
    return NULL;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *) a, y = *(const double *) b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 3 || argc > 5) {
        fprintf(stderr, "usage: udp_pingpong SIZE ITERATIONS [SERVER_CPU,CLIENT_CPU|-] [plain|single|roce]\n");
        return 2;
    }
    size = atoi(argv[1]);
    iterations = atoi(argv[2]);
    if (argc >= 4 && strcmp(argv[3], "-") != 0 && sscanf(argv[3], "%d,%d", &server_cpu, &client_cpu) != 2) {
        fprintf(stderr, "CPUs are SERVER_CPU,CLIENT_CPU or -\n");
        return 2;
    }
    if (argc == 5) {
        for (hop = PLAIN; hop <= ROCE && strcmp(argv[4], HOPS[hop]) != 0; hop++) {
        }
        if (hop > ROCE) { fprintf(stderr, "the hop is plain, single or roce\n"); return 2; }
    }
    // a RoCE packet carries at most the largest path MTU, 4096 bytes
    int limit = hop == PLAIN ? 65000 : 4096;
    if (size < 1 || size > limit || iterations < 1) { fprintf(stderr, "bad SIZE or ITERATIONS\n"); return 2; }
    pin_to(client_cpu);
    ping_fd = open_socket(&ping_addr);
    pong_fd = open_socket(&pong_addr);
    pthread_t t;
    pthread_create(&t, NULL, pong, NULL);
    memset(tx, 1, sizeof tx);
    double *us = malloc(sizeof(double) * iterations);
    for (int i = 0; i < iterations; i++) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        send_hop(0, ping_fd, &pong_addr);
        receive_hop(0, ping_fd);
        clock_gettime(CLOCK_MONOTONIC, &b);
        us[i] = ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / 2e3;
    }
    pthread_join(t, NULL);
    double sum = 0;
    for (int i = 0; i < iterations; i++) sum += us[i];
    qsort(us, iterations, sizeof(double), cmp);
    printf("%s,%d,%d,%.2f,%.2f,%.2f\n", NAMES[hop], size, iterations, us[0], us[iterations / 2], sum / iterations);
    return 0;
}
