// tcp_stream: the TCP ceilings bench/compare holds JCCL's tcp collectives against.
//
// One TCP connection, one thread per end, non-blocking sockets, TCP_NODELAY, 4 MiB socket buffers (as tcp0), data
// streamed from and into page-aligned, pre-touched buffers of the collective's size (a 16 MiB buffer does not fit
// in the caches; a 1 MiB one does, and measures up to 1.6x more on this machine kind). Three patterns:
//   oneway-spin   the client sends, the server reads in a busy loop (read() until data comes): what a rank
//                 polling its completion queue does
//   oneway-block  the same, but the server sleeps in poll() whenever a read finds nothing (iperf3's pattern)
//   bidir         both ends send and receive at once from one thread each, busy-polling (a 2-rank ring)
//   bidir-block   the same, each end sleeping in poll() whenever neither a write nor a read made progress
// Which receiver is faster depends on the path: over loopback the spinning one (the receiver's CPU takes over
// part of the kernel's work), over a veth pair the sleeping one (measured 2.3 vs 4.3 GB/s here).
//
//   tcp_stream serve PORT                                 (serves one connection, then exits)
//   tcp_stream run HOST PORT MODE BUFFER_BYTES SECONDS    (prints one CSV line)
// Output: tcp_stream,MODE,BUFFER_BYTES,GB/s client->server,GB/s server->client (0 for one-way)
// GB/s = 1e9 bytes/s. One-way: counted until the server has read everything (it reports the count after EOF).
// Bidir: until the client has read the server's EOF.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { ONEWAY_SPIN = 1, ONEWAY_BLOCK = 2, BIDIR = 3, BIDIR_BLOCK = 4 };
#define CALL (1L << 20) // bytes per read()/write() at most, as a 1 MiB message or chunk

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void die(const char *what) {
    perror(what);
    exit(1);
}

static void tune(int s) {
    int one = 1, buf = 4 << 20;
    setsockopt(s, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
    setsockopt(s, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static char *buffer(long bytes, int fill) {
    char *b = aligned_alloc(4096, (size_t) bytes);
    if (!b) die("aligned_alloc");
    memset(b, fill, (size_t) bytes); // pre-touched: no page faults inside the timed loop
    return b;
}

static void full_write(int s, const void *p, size_t n) {
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(s, c, n);
        if (w < 0 && errno == EAGAIN) { struct pollfd f = {s, POLLOUT, 0}; poll(&f, 1, -1); continue; }
        if (w <= 0) die("write");
        c += w; n -= (size_t) w;
    }
}

static void full_read(int s, void *p, size_t n) {
    char *c = p;
    while (n > 0) {
        ssize_t r = read(s, c, n);
        if (r < 0 && errno == EAGAIN) { struct pollfd f = {s, POLLIN, 0}; poll(&f, 1, -1); continue; }
        if (r <= 0) die("read");
        c += r; n -= (size_t) r;
    }
}

// Streams for `seconds` (when sending) and reads until EOF (when receiving). Returns bytes sent / received.
static void stream(int s, int send, int receive, int block, long bytes, double seconds, long *sent, long *received) {
    char *tx = send ? buffer(bytes, 1) : NULL, *rx = receive ? buffer(bytes, 0) : NULL;
    double t0 = now();
    int sending = send, eof = !receive;
    *sent = *received = 0;
    while (sending || !eof) {
        int work = 0;
        if (sending) {
            if (now() - t0 >= seconds) {
                shutdown(s, SHUT_WR);
                sending = 0;
            } else {
                long off = *sent % bytes;
                ssize_t w = write(s, tx + off, (size_t) (CALL - off % CALL));
                if (w > 0) { *sent += w; work = 1; }
                else if (w < 0 && errno != EAGAIN) die("write");
            }
        }
        if (!eof) {
            long off = *received % bytes;
            ssize_t r = read(s, rx + off, (size_t) (CALL - off % CALL));
            if (r > 0) { *received += r; work = 1; }
            else if (r == 0) eof = 1;
            else if (errno != EAGAIN) die("read");
        }
        if (!work && block) {
            struct pollfd f = {s, (short) ((eof ? 0 : POLLIN) | (sending ? POLLOUT : 0)), 0};
            poll(&f, 1, 10);
        }
    }
    free(tx);
    free(rx);
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "serve") == 0) {
        int l = socket(AF_INET6, SOCK_STREAM, 0), one = 1, zero = 0;
        if (l < 0) die("socket");
        setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        setsockopt(l, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        tune(l); // before accept, so window scaling applies
        struct sockaddr_in6 a = {0};
        a.sin6_family = AF_INET6;
        a.sin6_port = htons((uint16_t) atoi(argv[2]));
        a.sin6_addr = in6addr_any;
        if (bind(l, (struct sockaddr *) &a, sizeof a) || listen(l, 1)) die("bind/listen");
        int s = accept(l, NULL, NULL);
        if (s < 0) die("accept");
        tune(s);
        int64_t hdr[3]; // mode, buffer bytes, seconds * 1e6
        full_read(s, hdr, sizeof hdr);
        fcntl(s, F_SETFL, O_NONBLOCK);
        long sent, received;
        stream(s, hdr[0] >= BIDIR, 1, hdr[0] == ONEWAY_BLOCK || hdr[0] == BIDIR_BLOCK, (long) hdr[1], hdr[2] / 1e6, &sent, &received);
        if (hdr[0] < BIDIR) { // one-way: tell the client how much arrived (in bidir our FIN already went out)
            int64_t got = received;
            fcntl(s, F_SETFL, 0);
            full_write(s, &got, sizeof got);
        }
        close(s);
        return 0;
    }
    if (argc != 7 || strcmp(argv[1], "run") != 0) {
        fprintf(stderr, "usage: tcp_stream serve PORT | tcp_stream run HOST PORT oneway-spin|oneway-block|bidir|bidir-block "
                        "BUFFER_BYTES SECONDS\n");
        return 2;
    }
    int mode = strcmp(argv[4], "oneway-spin") == 0 ? ONEWAY_SPIN : strcmp(argv[4], "oneway-block") == 0
               ? ONEWAY_BLOCK : strcmp(argv[4], "bidir") == 0 ? BIDIR : strcmp(argv[4], "bidir-block") == 0
               ? BIDIR_BLOCK : 0;
    long bytes = atol(argv[5]);
    double seconds = atof(argv[6]);
    if (!mode || bytes < CALL || bytes % CALL) { fprintf(stderr, "bad mode or buffer size\n"); return 2; }
    struct addrinfo hints = {0}, *ai;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(argv[2], argv[3], &hints, &ai)) die("getaddrinfo");
    int s = -1;
    for (int attempt = 0; attempt < 100; attempt++) { // the server may still be starting
        s = socket(ai->ai_family, SOCK_STREAM, 0);
        tune(s);
        if (connect(s, ai->ai_addr, ai->ai_addrlen) == 0) break;
        close(s);
        s = -1;
        usleep(20000);
    }
    if (s < 0) die("connect");
    int64_t hdr[3] = {mode, bytes, (int64_t) (seconds * 1e6)};
    full_write(s, hdr, sizeof hdr);
    fcntl(s, F_SETFL, O_NONBLOCK);
    double t0 = now();
    long sent, received;
    // The client sends; in one-way modes it reads nothing until the server's count (after EOF both ways).
    stream(s, 1, mode >= BIDIR, mode == BIDIR_BLOCK, bytes, seconds, &sent, &received);
    if (mode < BIDIR) {
        fcntl(s, F_SETFL, 0);
        int64_t got;
        full_read(s, &got, sizeof got); // the server has read everything
        if (got != sent) { fprintf(stderr, "server read %lld of %ld bytes\n", (long long) got, sent); return 1; }
    } // bidir: timed until the server's EOF; what it had not read of ours then is < 0.2 % of a 2 s run
    double t = now() - t0;
    printf("tcp_stream,%s,%ld,%.3f,%.3f\n", argv[4], bytes, sent / t / 1e9, received / t / 1e9);
    return 0;
}
