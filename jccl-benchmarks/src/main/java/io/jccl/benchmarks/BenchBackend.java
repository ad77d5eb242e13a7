package io.jccl.benchmarks;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;

/**
 * What the collective benchmarks need from a communicator: float32 SUM allreduce, broadcast, allgather, barrier,
 * a MAX over ranks of one double (for the timing method) and buffers. {@link #fromEnvironment()} gives the JCCL
 * communicator ({@link JcclBackend}), or with {@code JCCL_BENCH_BACKEND=local} a single rank that only copies
 * (to test the harness without a communicator).
 */
interface BenchBackend extends AutoCloseable {
    /** This rank. */
    int rank();

    /** Number of ranks. */
    int size();

    /** One line naming the library, its version and its transport (printed after '#'). */
    String describe();

    /** The algorithm the library picks for op at this size, or "-" when it does not say. */
    default String algorithm(String op, long bytes) {
        return "-";
    }

    /** A buffer for collectives (the communicator's allocator). */
    MemorySegment allocate(long bytes);

    /** Releases a buffer from {@link #allocate}. */
    void free(MemorySegment segment);

    /** Barrier over all ranks. */
    void barrier();

    /** Out-of-place float32 SUM allreduce of count elements. */
    void allReduceSum(MemorySegment send, MemorySegment recv, long count);

    /** In-place broadcast of count float32 elements from root. */
    void broadcast(MemorySegment buffer, long count, int root);

    /** Allgather: count float32 per rank from send into recv (count × size elements). */
    void allGather(MemorySegment send, MemorySegment recv, long count);

    /** The maximum of value over all ranks (every rank gets it). */
    double maxOverRanks(double value);

    @Override
    void close();

    /** The backend the environment asks for. */
    static BenchBackend fromEnvironment() throws Exception {
        String kind = System.getenv().getOrDefault("JCCL_BENCH_BACKEND", "jccl");
        return switch (kind) {
            case "local" -> new Local();
            case "jccl" -> JcclBackend.fromEnvironment();
            default -> throw new IllegalArgumentException("JCCL_BENCH_BACKEND=" + kind + ": jccl or local");
        };
    }

    /** One rank, no communication: results are what a 1-rank communicator gives. */
    final class Local implements BenchBackend {
        private final Arena arena = Arena.ofShared();

        @Override
        public int rank() {
            return 0;
        }

        @Override
        public int size() {
            return 1;
        }

        @Override
        public String describe() {
            return "local (1 rank, no communication; harness test) Java " + Runtime.version();
        }

        @Override
        public MemorySegment allocate(long bytes) {
            return arena.allocate(bytes, 4096);
        }

        @Override
        public void free(MemorySegment segment) {
        }

        @Override
        public void barrier() {
        }

        @Override
        public void allReduceSum(MemorySegment send, MemorySegment recv, long count) {
            MemorySegment.copy(send, 0, recv, 0, 4 * count);
        }

        @Override
        public void broadcast(MemorySegment buffer, long count, int root) {
        }

        @Override
        public void allGather(MemorySegment send, MemorySegment recv, long count) {
            MemorySegment.copy(send, 0, recv, 0, 4 * count);
        }

        @Override
        public double maxOverRanks(double value) {
            return value;
        }

        @Override
        public void close() {
            arena.close();
        }
    }
}
