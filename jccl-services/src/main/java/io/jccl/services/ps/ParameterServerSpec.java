package io.jccl.services.ps;

import java.time.Duration;
import java.util.regex.Pattern;

/**
 * What every rank of a parameter-server job agrees on: the ranks' roles, the model's size and its sharding, the
 * optimizer, the gradient scale, the mode and the deadline. Ranks {@code 0 .. servers-1} of the transfer engine's job
 * are servers (server s holds parameters {@link #shardStart(int) shardStart(s)} until {@code shardStart(s + 1)}),
 * ranks {@code servers .. servers+workers-1} are workers (worker w is rank {@code servers + w}).
 *
 * @param name the job's parameter-server name (segment names start with {@code ps/NAME/})
 * @param servers number of server ranks, at least 1
 * @param workers number of worker ranks, at least 1
 * @param parameterCount float32 parameters of the model, at least {@code servers}
 * @param optimizer the optimizer the servers apply
 * @param gradientScale the servers apply {@code sum of the workers' gradients × gradientScale} (for a mean over a
 *     global batch of B examples: 1/B)
 * @param staleness {@link #SYNCHRONOUS}, or the bound S of the asynchronous mode: a worker computes its step c only
 *     when every worker's steps before c − S have been applied
 * @param timeout how long any wait (a server for gradients, a worker for weights) may take before it fails
 */
public record ParameterServerSpec(String name, int servers, int workers, int parameterCount, OptimizerSpec optimizer,
                                  float gradientScale, int staleness, Duration timeout) {
    /** {@link #staleness()} of the synchronous mode. */
    public static final int SYNCHRONOUS = -1;
    /** Largest staleness bound. */
    public static final int MAX_STALENESS = 1 << 20;
    private static final Pattern NAME = Pattern.compile("[A-Za-z0-9._-]{1,64}");

    /** Checks the values. */
    public ParameterServerSpec {
        if (name == null || !NAME.matcher(name).matches()) {
            throw new IllegalArgumentException("parameter-server name '" + name + "': 1 to 64 of A-Z a-z 0-9 . _ -");
        }
        if (servers < 1 || workers < 1) {
            throw new IllegalArgumentException(servers + " servers and " + workers + " workers: at least 1 of each");
        }
        if (parameterCount < servers) {
            throw new IllegalArgumentException(parameterCount + " parameters cannot be sharded over " + servers
                + " servers (every server needs at least one)");
        }
        if (optimizer == null) {
            throw new IllegalArgumentException("optimizer is null");
        }
        if (!Float.isFinite(gradientScale) || gradientScale == 0f) {
            throw new IllegalArgumentException("gradient scale " + gradientScale + " must be finite and non-zero");
        }
        if (staleness < SYNCHRONOUS || staleness > MAX_STALENESS) {
            throw new IllegalArgumentException("staleness " + staleness + " outside " + SYNCHRONOUS + " (synchronous).."
                + MAX_STALENESS);
        }
        if (timeout == null || timeout.isNegative() || timeout.isZero()) {
            throw new IllegalArgumentException("timeout " + timeout + " must be positive");
        }
    }

    /** A synchronous job with a 10-minute deadline (JCCL_TIMEOUT's default). */
    public static ParameterServerSpec synchronous(String name, int servers, int workers, int parameterCount,
                                                  OptimizerSpec optimizer, float gradientScale) {
        return new ParameterServerSpec(name, servers, workers, parameterCount, optimizer, gradientScale, SYNCHRONOUS,
            Duration.ofMinutes(10));
    }

    /** A copy in the asynchronous mode with staleness bound {@code bound} (0: every step waits for the slowest). */
    public ParameterServerSpec withStaleness(int bound) {
        if (bound < 0) {
            throw new IllegalArgumentException("staleness bound " + bound + " is negative");
        }
        return new ParameterServerSpec(name, servers, workers, parameterCount, optimizer, gradientScale, bound,
            timeout);
    }

    /** A copy with another deadline for every wait. */
    public ParameterServerSpec withTimeout(Duration deadline) {
        return new ParameterServerSpec(name, servers, workers, parameterCount, optimizer, gradientScale, staleness,
            deadline);
    }

    /** Whether this is the synchronous mode. */
    public boolean isSynchronous() {
        return staleness == SYNCHRONOUS;
    }

    /** Ranks in the job: servers + workers. */
    public int ranks() {
        return servers + workers;
    }

    /** First parameter of server {@code server}'s shard ({@code servers}: the parameter count). */
    public int shardStart(int server) {
        return (int) ((long) parameterCount * server / servers);
    }

    /** Parameters in server {@code server}'s shard. */
    public int shardLength(int server) {
        return shardStart(server + 1) - shardStart(server);
    }

    /**
     * Bytes of a server's weights header: the sequence word (8 B), then per worker the number of its gradients
     * applied (8 B each), rounded up to 64 B so the weights start on a cache line.
     */
    public long headerBytes() {
        return ((8L + 8L * workers) + 63) & ~63L;
    }

    long timeoutNs() {
        return timeout.toNanos();
    }

    String weightsName(int server) {
        return "ps/" + name + "/weights/" + server;
    }

    String gradientsName(int server) {
        return "ps/" + name + "/gradients/" + server;
    }

    String pullName(int worker) {
        return "ps/" + name + "/pull/" + worker;
    }

    String pushName(int worker) {
        return "ps/" + name + "/push/" + worker;
    }
}
