package io.jccl.tools.colltests;

import picocli.CommandLine.Command;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Unmatched;

import java.util.List;
import java.util.concurrent.Callable;

/**
 * {@code jccl tests NAME_perf}: the nccl-tests programs. Not available yet: it needs a working
 * {@code Communicator} in jccl-collectives. {@link BusBandwidth} already holds the bandwidth definitions.
 */
@Command(name = "tests", mixinStandardHelpOptions = true,
    description = {"nccl-tests-compatible collective benchmarks (all_reduce_perf, all_gather_perf, …).",
        "Not available yet: jccl-collectives has no Communicator to drive."})
public final class TestsCommand implements Callable<Integer> {
    @Parameters(index = "0", paramLabel = "TEST", description = "all_reduce_perf, all_gather_perf, broadcast_perf, "
        + "reduce_perf, reduce_scatter_perf, alltoall_perf, gather_perf, scatter_perf, sendrecv_perf")
    String test;

    @Unmatched
    List<String> rest;

    @Override
    public Integer call() {
        BusBandwidth.of(test);
        System.err.println("jccl tests " + test + ": not available yet (jccl-collectives has no Communicator to "
            + "drive); see docs/tools.md");
        return 2;
    }
}
