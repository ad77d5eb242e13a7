package io.jccl.benchmarks;

/** The JCCL communicator as a {@link BenchBackend} (written against io.jccl.collectives.Communicator). */
final class JcclBackend {
    private JcclBackend() {
    }

    static BenchBackend fromEnvironment() {
        throw new UnsupportedOperationException("the JCCL Communicator is not available in this build yet; "
            + "set JCCL_BENCH_BACKEND=local to test the harness");
    }
}
