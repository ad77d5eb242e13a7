// nccl-tests' measurement and table for MPI collectives, so Open MPI (or MPICH) prints the very table that
// `jccl tests NAME_perf` prints, with the same flags, in the same run (bench/tools).
//
// Build: mpicc -O2 -o mpi_nccl_tests mpi_nccl_tests.c
// Usage: mpirun -np N mpi_nccl_tests all_reduce_perf|all_gather_perf|broadcast_perf [-b MIN] [-e MAX] [-f FACTOR]
//                                    [-n ITERS] [-w WARMUP] [-c 0|1]
// Method (nccl-tests common.cu, -a 1): per size, out-of-place then in-place: -w warm-up runs, a barrier, -n timed
// runs, time = elapsed / n, averaged over ranks; then (-c 1) the inputs are rewritten, the collective runs once
// and every rank counts the elements that differ from the exact result (#wrong, summed over ranks).
// Sizes follow nccl-tests (all_gather: size = total output bytes, count = per-rank count x ranks), float32, sum,
// root 0. Buffers are page-aligned (posix_memalign 4096), as registered buffers are. Inputs are small integers, so
// every result is exact. busbw = algbw x 2(n-1)/n (all_reduce), (n-1)/n (all_gather), 1 (broadcast).
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ALL_REDUCE, ALL_GATHER, BROADCAST };

static long parse_size(const char *s) {
  char *end;
  long v = strtol(s, &end, 10);
  if (*end == 'K' || *end == 'k') v <<= 10;
  else if (*end == 'M' || *end == 'm') v <<= 20;
  else if (*end == 'G' || *end == 'g') v <<= 30;
  return v;
}

static void *alloc_buf(size_t bytes) {
  void *p = NULL;
  if (posix_memalign(&p, 4096, bytes < 64 ? 64 : bytes)) {
    fprintf(stderr, "out of memory (%zu bytes)\n", bytes);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  return p;
}

static float value(int rank, long i) { return (float)(1 + (rank + i) % 3); }

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (argc < 2) {
    if (!rank) fprintf(stderr, "usage: mpi_nccl_tests all_reduce_perf|all_gather_perf|broadcast_perf [flags]\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  int kind = !strcmp(argv[1], "all_reduce_perf") ? ALL_REDUCE
           : !strcmp(argv[1], "all_gather_perf") ? ALL_GATHER
           : !strcmp(argv[1], "broadcast_perf") ? BROADCAST : -1;
  if (kind < 0) {
    if (!rank) fprintf(stderr, "unknown test %s\n", argv[1]);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  long minb = 32L << 20, maxb = 32L << 20, factor = 2;
  int iters = 20, warmup = 5, check = 1;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-b")) minb = parse_size(argv[i + 1]);
    else if (!strcmp(argv[i], "-e")) maxb = parse_size(argv[i + 1]);
    else if (!strcmp(argv[i], "-f")) factor = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "-n")) iters = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-w")) warmup = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-c")) check = atoi(argv[i + 1]);
  }
  if (factor < 2) factor = 2;
  double busfactor = kind == ALL_REDUCE ? 2.0 * (n - 1) / n : kind == ALL_GATHER ? (double)(n - 1) / n : 1.0;
  long maxcount = maxb / 4 / (kind == ALL_GATHER ? n : 1);
  if (maxcount < 1) maxcount = 1;
  long recvcount = maxcount * (kind == ALL_GATHER ? n : 1);
  float *sendbuf = alloc_buf(sizeof(float) * maxcount);
  float *recvbuf = alloc_buf(sizeof(float) * recvcount);
  memset(sendbuf, 0, sizeof(float) * maxcount);
  memset(recvbuf, 0, sizeof(float) * recvcount);
  if (!rank) {
    char ver[MPI_MAX_LIBRARY_VERSION_STRING];
    int len;
    MPI_Get_library_version(ver, &len);
    char *nl = strchr(ver, '\n');
    if (nl) *nl = 0;
    printf("# nThread 1 nGpus 1 minBytes %ld maxBytes %ld step: %ld(factor) warmup iters: %d iters: %d agg iters: 1 "
           "validation: %d graph: 0\n#\n# %s, %d ranks\n#\n", minb, maxb, factor, warmup, iters, check, ver, n);
    printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n",
           "", "", "", "", "");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size", "count", "type", "redop",
           "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)", "(elements)", "", "", "",
           "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
    fflush(stdout);
  }
  long total_wrong = 0;
  double bus_sum = 0;
  int bus_count = 0;
  for (long size = minb; size <= maxb; size *= factor) {
    long count = size / 4 / (kind == ALL_GATHER ? n : 1);  // per-rank block
    if (count < 1) continue;
    long bytes = count * 4 * (kind == ALL_GATHER ? n : 1);
    if (!rank) printf("%12ld  %12ld  %8s  %6s  %6d", bytes, bytes / 4, "float", kind == ALL_REDUCE ? "sum" : "none",
                      kind == BROADCAST ? 0 : -1);
    for (int inplace = 0; inplace < 2; inplace++) {
      float *sb = sendbuf, *rb = recvbuf;
      if (inplace) sb = kind == ALL_GATHER ? recvbuf + rank * count : recvbuf;
#define RUN()                                                                                                  \
  do {                                                                                                         \
    if (kind == ALL_REDUCE)                                                                                    \
      MPI_Allreduce(inplace ? MPI_IN_PLACE : sb, rb, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);          \
    else if (kind == ALL_GATHER)                                                                               \
      MPI_Allgather(inplace ? MPI_IN_PLACE : sb, (int)count, MPI_FLOAT, rb, (int)count, MPI_FLOAT,             \
                    MPI_COMM_WORLD);                                                                           \
    else {                                                                                                     \
      if (!inplace && rank == 0) memcpy(rb, sb, count * 4); /* nccl-tests' out-of-place broadcast: root copies */ \
      MPI_Bcast(rb, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD);                                                 \
    }                                                                                                          \
  } while (0)
      for (int i = 0; i < warmup; i++) RUN();
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      for (int i = 0; i < iters; i++) RUN();
      double us = (MPI_Wtime() - t0) * 1e6 / iters, sum_us;
      MPI_Allreduce(&us, &sum_us, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      us = sum_us / n;
      char wrong_text[32] = "N/A";
      if (check) {
        memset(recvbuf, 0, sizeof(float) * count * (kind == ALL_GATHER ? n : 1));
        for (long i = 0; i < count; i++) sb[i] = value(rank, i);
        if (kind == BROADCAST && rank != 0 && inplace) memset(rb, 0, count * 4);
        RUN();
        long wrong = 0, total;
        long nres = count * (kind == ALL_GATHER ? n : 1);
        for (long i = 0; i < nres; i++) {
          float expect;
          if (kind == ALL_REDUCE) {
            expect = 0;
            for (int r = 0; r < n; r++) expect += value(r, i);
          } else if (kind == ALL_GATHER) {
            expect = value((int)(i / count), i % count);
          } else {
            expect = value(0, i);
          }
          if (rb[i] != expect) wrong++;
        }
        MPI_Allreduce(&wrong, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        total_wrong += total;
        snprintf(wrong_text, sizeof wrong_text, "%ld", total);
      }
      double algbw = (double)bytes / 1e9 / (us / 1e6), busbw = algbw * busfactor;
      bus_sum += busbw;
      bus_count++;
      if (!rank) {
        char t[32];
        snprintf(t, sizeof t, us >= 10000.0 ? "%7.0f" : us >= 100.0 ? "%7.1f" : "%7.2f", us);
        printf("  %7s  %6.2f  %6.2f  %5s", t, algbw, busbw, wrong_text);
      }
    }
    if (!rank) {
      printf("\n");
      fflush(stdout);
    }
    if (size > maxb / factor) break;
  }
  if (!rank) {
    printf("# Out of bounds values : %ld %s\n# Avg bus bandwidth    : %g \n#\n", total_wrong, total_wrong ? "FAILED" : "OK",
           bus_count ? bus_sum / bus_count : 0.0);
  }
  MPI_Finalize();
  return total_wrong ? 1 : 0;
}
