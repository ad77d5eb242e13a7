package io.jccl.tools.demo;

import io.jccl.tools.launcher.Launcher;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.Callable;

/**
 * {@code jccl demo}: what a newcomer runs first. Starts local ranks (4 by default) with the launcher; each runs
 * {@link DemoRank}: provider per peer, data-parallel training of a digit classifier with an allreduce per step,
 * the bit-identity and single-process checks, and a short allreduce table. Exits non-zero if any check fails.
 * {@code --elastic} runs {@link ElasticDemo} instead: a rank killed, the survivors shrink, a replacement joins.
 */
@Command(name = "demo", mixinStandardHelpOptions = true, sortOptions = false,
    description = {"Train a small digit classifier data-parallel on local ranks (gradients averaged with "
        + "allreduce each step), check that all ranks end bit-identical and match single-process training, "
        + "then print an nccl-tests-style allreduce table.",
        "Environment variables of the ranks (JCCL_DEBUG, JCCL_TRANSPORT, JCCL_ALGO, ...) apply as usual."})
public final class DemoCommand implements Callable<Integer> {
    @Option(names = {"-np", "-n", "--np"}, paramLabel = "N", description = "number of ranks (default ${DEFAULT-VALUE})")
    int ranks = 4;

    @Option(names = "--epochs", paramLabel = "E", description = "training epochs (default ${DEFAULT-VALUE})")
    int epochs = 30;

    @Option(names = "--timeout", paramLabel = "SECONDS", description = "give up after this long "
        + "(default ${DEFAULT-VALUE})")
    long timeoutSeconds = 300;

    @Option(names = {"-x", "--env"}, paramLabel = "NAME=VALUE", description = "extra environment variable for the "
        + "ranks (repeatable)")
    java.util.Map<String, String> env = new java.util.LinkedHashMap<>();

    @Option(names = "--elastic", description = "elastic training: 4 ranks, one killed (kill -9) at a random step; "
        + "the survivors shrink and train on, a replacement joins (JCCL_JOIN=1), READs the weights from a survivor "
        + "and trains too; checks bit-identical weights and accuracy within one point of an uninterrupted run")
    boolean elastic;

    @Option(names = "--seed", paramLabel = "S", description = "with --elastic: picks the rank and the step to kill "
        + "(default: random)")
    Long seed;

    @Override
    public Integer call() throws Exception {
        if (elastic) {
            long s = seed != null ? seed : new java.util.Random().nextLong() & 0xFFFF;
            return new ElasticDemo(epochs, s, timeoutSeconds, env, System.out).run();
        }
        System.out.printf("jccl demo: %d local ranks, data-parallel training over JCCL collectives%n", ranks);
        Launcher.Builder builder = Launcher.builder().ranks(ranks).prefixOutput(true)
            .aotCache(io.jccl.tools.launcher.AotCache.fromEnvironment(System.getenv(), System.err))
            .timeout(Duration.ofSeconds(timeoutSeconds))
            // Serial GC: 4 JVMs on 2 cores, each with a tiny heap, start faster and steal less CPU.
            .javaMain(List.of("-XX:+UseSerialGC"),
                DemoRank.class.getName(), List.of(Integer.toString(epochs)));
        env.forEach(builder::env);
        long start = System.nanoTime();
        Launcher.Result result = builder.build().run();
        System.out.printf("jccl demo: %s in %.1f s%n", result.exitCode() == 0 ? "finished" : "FAILED (exit "
            + result.exitCode() + (result.failedRank() >= 0 ? ", rank " + result.failedRank() : "") + ")",
            (System.nanoTime() - start) / 1e9);
        return result.exitCode();
    }
}
