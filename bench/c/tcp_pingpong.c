// tcp_pingpong: the kernel's blocking round-trip floor the embedding cache over tcp0 is held against
// (docs/services.md, "Embedding cache"): what Redis's GET costs at least, without Redis.
//
// Two processes (fork) over one TCP connection on 127.0.0.1 with TCP_NODELAY, both blocking in read() as Redis's
// server and a Redis client do: the client writes a REQ-byte request and reads a REPLY-byte reply, the server reads
// the request and writes the reply, one round trip at a time (batch 1). Each side sleeps in read() while it waits,
// so every round trip wakes two threads, as a Redis GET does. Runs for SECONDS after a 0.2 s warm-up.
// MODE "poll": both sockets non-blocking and both ends spinning on recv()/send() (EAGAIN: try again at once), the
// floor of a path whose ends busy-poll (tcp0's poller and progress thread spin briefly before they sleep): no
// wake-up, only the system calls and the loopback stack.
//
//   tcp_pingpong REQ REPLY SECONDS [block|poll]
// Output: tcp_pingpong[-poll],REQ,REPLY,round_trips_per_s,p50_us,p99_us,p999_us
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t) t.tv_sec * 1000000000ull + (uint64_t) t.tv_nsec;
}

static int polling;

static int read_fully(int fd, char *buf, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && polling && (errno == EAGAIN || errno == EWOULDBLOCK)) continue; // spin: no sleep, no wake-up
        if (r <= 0) return -1;
        got += (size_t) r;
    }
    return 0;
}

static int write_fully(int fd, const char *buf, size_t n) {
    size_t put = 0;
    while (put < n) {
        ssize_t w = write(fd, buf + put, n - put);
        if (w < 0 && polling && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        if (w <= 0) return -1;
        put += (size_t) w;
    }
    return 0;
}

static void set_mode(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (polling) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: tcp_pingpong REQ_BYTES REPLY_BYTES SECONDS [block|poll]\n");
        return 2;
    }
    if (argc == 5 && strcmp(argv[4], "poll") != 0 && strcmp(argv[4], "block") != 0) {
        fprintf(stderr, "tcp_pingpong: mode must be block or poll, not '%s'\n", argv[4]);
        return 2;
    }
    polling = argc == 5 && strcmp(argv[4], "poll") == 0;
    size_t req = (size_t) atol(argv[1]), reply = (size_t) atol(argv[2]);
    double seconds = atof(argv[3]);
    if (req == 0 || reply == 0 || seconds <= 0) {
        fprintf(stderr, "tcp_pingpong: sizes and seconds must be positive\n");
        return 2;
    }
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (listener < 0 || bind(listener, (struct sockaddr *) &addr, sizeof addr) != 0 || listen(listener, 1) != 0) {
        perror("listen");
        return 1;
    }
    socklen_t len = sizeof addr;
    getsockname(listener, (struct sockaddr *) &addr, &len);
    char *rbuf = malloc(req > reply ? req : reply), *sbuf = calloc(1, req > reply ? req : reply);
    pid_t server = fork();
    if (server == 0) {
        int fd = accept(listener, NULL, NULL);
        set_mode(fd);
        while (read_fully(fd, rbuf, req) == 0 && write_fully(fd, sbuf, reply) == 0) {
        }
        _exit(0);
    }
    close(listener);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, (struct sockaddr *) &addr, sizeof addr) != 0) {
        perror("connect");
        kill(server, SIGKILL);
        return 1;
    }
    set_mode(fd);
    size_t cap = 1u << 24, n = 0;
    uint64_t *lat = malloc(cap * sizeof *lat);
    uint64_t warm = now_ns() + 200000000ull, start = 0, end = 0;
    for (;;) {
        uint64_t t0 = now_ns();
        if (write_fully(fd, sbuf, req) != 0 || read_fully(fd, rbuf, reply) != 0) {
            perror("round trip");
            return 1;
        }
        uint64_t t1 = now_ns();
        if (t1 < warm) continue;
        if (start == 0) {
            start = t0;
            end = start + (uint64_t) (seconds * 1e9);
        }
        if (n < cap) lat[n++] = t1 - t0;
        if (t1 >= end) break;
    }
    double elapsed = (double) (now_ns() - start) / 1e9;
    close(fd);
    waitpid(server, NULL, 0);
    qsort(lat, n, sizeof *lat, cmp_u64);
    printf("tcp_pingpong%s,%zu,%zu,%.0f,%.1f,%.1f,%.1f\n", polling ? "-poll" : "", req, reply, (double) n / elapsed, lat[n / 2] / 1e3,
           lat[(size_t) (n * 0.99)] / 1e3, lat[(size_t) (n * 0.999)] / 1e3);
    return 0;
}
