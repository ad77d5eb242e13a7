package io.jccl.common.testing;

import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * Waits for the ranks of an in-process job (one thread and one future per rank, as the collectives' and services'
 * test helpers start them) and reports them as one assertion: the first rank that failed or hung, with every other
 * failure suppressed into it, so no rank's error is lost and a hung rank fails the test instead of blocking it.
 */
public final class RankFutures {
    private RankFutures() {
    }

    /**
     * Waits at most {@code timeoutSeconds} for each rank's future.
     *
     * @throws AssertionError naming the first rank that failed ("rank R failed: ...") or hung ("rank R hung"), the
     *     others suppressed
     */
    public static void awaitAll(List<CompletableFuture<Void>> ranks, long timeoutSeconds) {
        AssertionError first = null;
        for (int r = 0; r < ranks.size(); r++) {
            AssertionError failure;
            try {
                ranks.get(r).get(timeoutSeconds, TimeUnit.SECONDS);
                continue;
            } catch (ExecutionException e) {
                failure = new AssertionError("rank " + r + " failed: " + e.getCause(), e.getCause());
            } catch (TimeoutException e) {
                failure = new AssertionError("rank " + r + " hung");
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new AssertionError(e);
            }
            if (first == null) {
                first = failure;
            } else {
                first.addSuppressed(failure);
            }
        }
        if (first != null) {
            throw first;
        }
    }
}
