// udp_pingpong: the latency floor roce0's 8-byte WRITE latency is held against (docs/transport-roce.md).
//
// Two UDP sockets on 127.0.0.1, one process, two threads (ping and pong), each busy-polling its non-blocking
// socket with recv(): the same system calls per message as roce0's ping-pong (one sendto and one successful recv
// per packet on each side; roce0 adds an ACK datagram per WRITE). Each round the pinger sends SIZE bytes and waits
// for the echo. Prints one-way latency (round trip / 2) as perftest's *_lat tools do.
//
//   udp_pingpong SIZE ITERATIONS [SERVER_CPU,CLIENT_CPU]
// With CPUs, the pong thread runs on SERVER_CPU and the pinging main thread on CLIENT_CPU (as `jccl perf --local
// --cpus SERVER,CLIENT`), so the two never share a core.
// Output: udp_pingpong,SIZE,ITERATIONS,t_min_us,t_typical_us (median),t_avg_us
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int iterations;
static int size;
static struct sockaddr_in ping_addr, pong_addr;
static int ping_fd, pong_fd;
static int server_cpu = -1, client_cpu = -1;

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
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0) { perror("socket"); exit(1); }
    memset(addr, 0, sizeof *addr);
    addr->sin_family = AF_INET;
    addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *) addr, sizeof *addr) != 0) { perror("bind"); exit(1); }
    socklen_t len = sizeof *addr;
    getsockname(fd, (struct sockaddr *) addr, &len);
    fcntl(fd, F_SETFL, O_NONBLOCK);
    return fd;
}

static void recv_spin(int fd, char *buf) {
    while (recv(fd, buf, 65536, 0) < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK) { perror("recv"); exit(1); }
    }
}

static void *pong(void *arg) {
    (void) arg;
    pin_to(server_cpu);
    char buf[65536];
    for (int i = 0; i < iterations; i++) {
        recv_spin(pong_fd, buf);
        sendto(pong_fd, buf, size, 0, (struct sockaddr *) &ping_addr, sizeof ping_addr);
    }
    return NULL;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *) a, y = *(const double *) b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: udp_pingpong SIZE ITERATIONS [SERVER_CPU,CLIENT_CPU]\n");
        return 2;
    }
    if (argc == 4 && sscanf(argv[3], "%d,%d", &server_cpu, &client_cpu) != 2) {
        fprintf(stderr, "CPUs are SERVER_CPU,CLIENT_CPU\n");
        return 2;
    }
    pin_to(client_cpu);
    size = atoi(argv[1]);
    iterations = atoi(argv[2]);
    if (size < 1 || size > 65000 || iterations < 1) { fprintf(stderr, "bad SIZE or ITERATIONS\n"); return 2; }
    ping_fd = open_socket(&ping_addr);
    pong_fd = open_socket(&pong_addr);
    pthread_t t;
    pthread_create(&t, NULL, pong, NULL);
    char buf[65536];
    memset(buf, 1, sizeof buf);
    double *us = malloc(sizeof(double) * iterations);
    for (int i = 0; i < iterations; i++) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        sendto(ping_fd, buf, size, 0, (struct sockaddr *) &pong_addr, sizeof pong_addr);
        recv_spin(ping_fd, buf);
        clock_gettime(CLOCK_MONOTONIC, &b);
        us[i] = ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / 2e3;
    }
    pthread_join(t, NULL);
    double sum = 0;
    for (int i = 0; i < iterations; i++) sum += us[i];
    qsort(us, iterations, sizeof(double), cmp);
    printf("udp_pingpong,%d,%d,%.2f,%.2f,%.2f\n", size, iterations, us[0], us[iterations / 2], sum / iterations);
    return 0;
}
