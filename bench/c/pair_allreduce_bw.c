// pair_allreduce_bw: the memory ceiling of a two-rank float32 sum all-reduce on one host, in C, for bench/compare.
//
// Two threads (the two ranks) share four page-aligned, pre-touched buffers: in0, in1, out0, out1 (what two processes
// see through shared memory). Each timed repetition starts and ends with a barrier, nothing else synchronises. The
// access patterns, in order of the memory traffic they need:
//   whole     each thread computes the whole vector: out_r = in0 + in1 (reads 2N, writes N per thread)
//   split     each thread computes its half, 64 KiB at a time: out_r = in0 + in1, then copies the block into the
//             other thread's output while it is cached (reads N, writes N per thread: the least any algorithm moves)
//   split-nt  split with non-temporal (streaming) stores into both outputs: no read-for-ownership of the written
//             lines. Java cannot issue such stores (neither the Vector API nor MemorySegment.copy has them), so this
//             row says what the machine could do beyond what a JVM library can.
//   inplace   split in place (out_r = in_r, as torch's all_reduce(tensor) and gloo work): each thread reads its half
//             of both buffers and writes the sum back into both, lines it has just read, so no store needs a
//             read-for-ownership (reads N, writes N per thread with ordinary stores)
//   allgather not an all-reduce: the two-rank all-gather's copy ceiling for an output of BYTES (each input is its
//             first half): each thread copies its own input and then the peer's, read where it is, into its output
//             with glibc memcpy (reads N, writes N per thread)
// Compiled with -O3 -march=native (the compiler vectorises the loops; split-nt uses AVX intrinsics when present).
//
//   pair_allreduce_bw BYTES REPS       prints one CSV line per pattern: pair_allreduce,PATTERN,BYTES,median_us,min_us
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif

#define BLOCK_FLOATS (64 * 1024 / 4)
#define INPLACE 3
#define ALLGATHER 4

static long count;
static float *in[2], *out[2];
static int pattern, reps, timed = 1;
static double *times;
static pthread_barrier_t barrier;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void whole(int r) {
    float *o = out[r], *a = in[0], *b = in[1];
    for (long k = 0; k < count; k++) o[k] = a[k] + b[k];
}

static void split(int r) {
    long lo = r * (count / 2), hi = r == 0 ? count / 2 : count;
    float *o = out[r], *p = out[1 - r], *a = in[0], *b = in[1];
    for (long i = lo; i < hi; i += BLOCK_FLOATS) {
        long e = i + BLOCK_FLOATS < hi ? i + BLOCK_FLOATS : hi;
        for (long k = i; k < e; k++) o[k] = a[k] + b[k];
        memcpy(p + i, o + i, (size_t) (e - i) * 4);
    }
}

static void split_nt(int r) {
    long lo = r * (count / 2), hi = r == 0 ? count / 2 : count;
    float *o = out[r], *p = out[1 - r], *a = in[0], *b = in[1];
    long k = lo;
#if defined(__AVX__)
    for (; k + 8 <= hi && ((unsigned long) (o + k) & 31); k++) { o[k] = p[k] = a[k] + b[k]; }
    for (; k + 8 <= hi; k += 8) {
        __m256 x = _mm256_add_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k));
        _mm256_stream_ps(o + k, x);
        _mm256_stream_ps(p + k, x);
    }
    _mm_sfence();
#endif
    for (; k < hi; k++) o[k] = p[k] = a[k] + b[k];
}

static void split_inplace(int r) {
    long lo = r * (count / 2), hi = r == 0 ? count / 2 : count;
    float *a = in[0], *b = in[1];
    for (long k = lo; k < hi; k++) {
        float x = a[k] + b[k];
        a[k] = x;
        b[k] = x;
    }
}

static void allgather(int r) {
    long half = count / 2;
    memcpy(out[r] + r * half, in[r], (size_t) half * 4);
    memcpy(out[r] + (1 - r) * half, in[1 - r], (size_t) half * 4);
}

static void run_pattern(int r) {
    switch (pattern) {
        case 0: whole(r); break;
        case 1: split(r); break;
        case 2: split_nt(r); break;
        case INPLACE: split_inplace(r); break;
        default: allgather(r); break;
    }
}

static void *rank(void *arg) {
    int r = (int) (long) arg;
    for (int it = 0; it < reps; it++) {
        pthread_barrier_wait(&barrier);
        double t0 = now();
        run_pattern(r);
        pthread_barrier_wait(&barrier);
        if (r == 0 && timed) times[it] = now() - t0;
    }
    return NULL;
}

static void run_threads(void) {
    pthread_t t[2];
    pthread_barrier_init(&barrier, NULL, 2);
    for (long r = 0; r < 2; r++) pthread_create(&t[r], NULL, rank, (void *) r);
    for (int r = 0; r < 2; r++) pthread_join(t[r], NULL);
    pthread_barrier_destroy(&barrier);
}

static void init_inputs(void) {
    for (int i = 0; i < 2; i++)
        for (long k = 0; k < count; k++) in[i][k] = (float) (k % 7 + i);
}

static int by_value(const void *x, const void *y) {
    double a = *(const double *) x, b = *(const double *) y;
    return a < b ? -1 : a > b;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: pair_allreduce_bw BYTES REPS\n");
        return 2;
    }
    count = atol(argv[1]) / 4;
    reps = atoi(argv[2]);
    if (count < 2 || reps < 3) {
        fprintf(stderr, "need BYTES >= 8 and REPS >= 3\n");
        return 2;
    }
    times = calloc((size_t) reps, sizeof(double));
    for (int i = 0; i < 2; i++) {
        in[i] = aligned_alloc(4096, (size_t) count * 4 + 4096);
        out[i] = aligned_alloc(4096, (size_t) count * 4 + 4096);
        for (long k = 0; k < count; k++) out[i][k] = 0;
    }
    init_inputs();
    static const char *names[] = {"whole", "split", "split-nt", "inplace", "allgather"};
    for (pattern = 0; pattern <= ALLGATHER; pattern++) {
        run_threads();
        if (pattern == INPLACE) { // the repetitions summed the sums: start again from the inputs, once, for the check
            init_inputs();
            int saved = reps;
            reps = 1;
            timed = 0;
            run_threads();
            reps = saved;
            timed = 1;
            memcpy(out[0], in[0], (size_t) count * 4);
            memcpy(out[1], in[1], (size_t) count * 4);
            init_inputs();
        }
        for (long k = 0; k < count; k++) { // every pattern must have produced the sum in both outputs
            long half = count / 2; // (the all-gather: both inputs' first halves, one after the other)
            float want = pattern == ALLGATHER ? in[k < half ? 0 : 1][k < half ? k : k - half]
                                              : (float) (k % 7) + (float) (k % 7 + 1);
            if (out[0][k] != want || out[1][k] != want) {
                fprintf(stderr, "%s: wrong result at %ld\n", names[pattern], k);
                return 1;
            }
        }
        memset(out[0], 0, (size_t) count * 4);
        memset(out[1], 0, (size_t) count * 4);
        // the first fifth warms up (page tables, caches); median and minimum of the rest
        int skip = reps / 5, n = reps - skip;
        qsort(times + skip, (size_t) n, sizeof(double), by_value);
        printf("pair_allreduce,%s,%ld,%.1f,%.1f\n", names[pattern], count * 4, times[skip + n / 2] * 1e6,
               times[skip] * 1e6);
    }
    return 0;
}
