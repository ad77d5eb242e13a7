package io.jccl.services.batching;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

/** Triton's batch-formation rules on a fake clock (times in ns). */
class DynamicBatcherTest {
    private static final long US = 1000;

    private static DynamicBatcher batcher(BatchingConfig c) {
        return new DynamicBatcher(c, 64);
    }

    private static BatchingConfig config() {
        return BatchingConfig.of(4, 4);
    }

    @Test
    void shouldSendWhatIsQueuedAtOnceWithoutDelay() {
        DynamicBatcher b = batcher(config().withMaxBatchSize(8));
        b.add(0, 0, 0);
        b.add(1, 0, 0);
        assertEquals(2, b.decide(0));
        assertEquals(CloseReason.NO_DELAY, b.reason());
    }

    @Test
    void shouldCapAtMaxBatchSize() {
        DynamicBatcher b = batcher(config().withMaxBatchSize(4).withMaxQueueDelayNs(1000 * US));
        for (int i = 0; i < 6; i++) {
            b.add(i, 0, 0);
        }
        assertEquals(4, b.decide(1));
        assertEquals(CloseReason.MAX_SIZE, b.reason());
        int[] out = new int[4];
        b.take(4, out);
        assertArrayEquals(new int[] {0, 1, 2, 3}, out);
        // Two left, below the maximum: they wait for the delay of the oldest.
        assertEquals(0, b.decide(1));
        assertEquals(1000 * US - 1, b.waitNs());
        assertEquals(2, b.decide(1000 * US));
        assertEquals(CloseReason.DELAY, b.reason());
    }

    @Test
    void shouldWaitForTheDelayThenSendWhatIsPending() {
        DynamicBatcher b = batcher(config().withMaxBatchSize(8).withMaxQueueDelayNs(100 * US));
        b.add(0, 10 * US, 0);
        b.add(1, 50 * US, 0);
        assertEquals(0, b.decide(60 * US));
        assertEquals(50 * US, b.waitNs(), "the oldest request's delay decides");
        assertEquals(0, b.decide(109 * US));
        assertEquals(2, b.decide(110 * US));
        assertEquals(CloseReason.DELAY, b.reason());
    }

    @Test
    void shouldSendAPreferredSizeAtOnceAndLeaveTheRest() {
        DynamicBatcher b = batcher(config().withMaxBatchSize(16).withPreferredBatchSizes(4, 8)
            .withMaxQueueDelayNs(1000 * US));
        for (int i = 0; i < 3; i++) {
            b.add(i, 0, 0);
        }
        assertEquals(0, b.decide(1), "3 is not preferred: wait");
        for (int i = 3; i < 6; i++) {
            b.add(i, 0, 0);
        }
        assertEquals(4, b.decide(1), "6 pending: the largest preferred size reachable goes now");
        assertEquals(CloseReason.PREFERRED_SIZE, b.reason());
        b.take(4, new int[4]);
        assertEquals(0, b.decide(2));
        for (int i = 6; i < 16; i++) {
            b.add(i, 2, 0);
        }
        assertEquals(8, b.decide(3), "12 pending: the largest preferred (8) goes, not the maximum (16)");
        assertEquals(CloseReason.PREFERRED_SIZE, b.reason());
    }

    @Test
    void shouldSendEverythingPendingOnceTheDelayIsExceededEvenWithAPreferredSizeFound() {
        DynamicBatcher b = batcher(config().withMaxBatchSize(16).withPreferredBatchSizes(4)
            .withMaxQueueDelayNs(100 * US));
        for (int i = 0; i < 6; i++) {
            b.add(i, 0, 0);
        }
        // Triton: a best preferred size is used only while the delay is not exceeded; after it, everything pending.
        assertEquals(6, b.decide(100 * US));
        assertEquals(CloseReason.DELAY, b.reason());
    }

    @Test
    void shouldSendBelowTheSmallestPreferredSizeWithoutDelay() {
        DynamicBatcher b = batcher(config().withMaxBatchSize(8).withPreferredBatchSizes(4));
        b.add(0, 0, 0);
        b.add(1, 0, 0);
        assertEquals(2, b.decide(0));
        assertEquals(CloseReason.NO_DELAY, b.reason());
    }

    @Test
    void shouldRejectExpiredRequestsAndKeepTheOthersInOrder() {
        DynamicBatcher b = batcher(config().withMaxBatchSize(8).withMaxQueueDelayNs(1000 * US));
        b.add(5, 0, 100 * US);
        b.add(6, 0, 0);
        b.add(7, 10 * US, 50 * US);
        b.add(8, 20 * US, 0);
        assertEquals(60 * US, b.nextDeadlineNs());
        int[] out = new int[4];
        assertEquals(1, b.expire(60 * US, out));
        assertEquals(7, out[0]);
        assertEquals(100 * US, b.nextDeadlineNs());
        assertEquals(1, b.expire(100 * US, out));
        assertEquals(5, out[0]);
        assertEquals(Long.MAX_VALUE, b.nextDeadlineNs());
        assertEquals(2, b.decide(1000 * US));
        b.take(2, out);
        assertEquals(6, out[0]);
        assertEquals(8, out[1]);
    }

    @Test
    void shouldRefuseBadConfigurations() {
        org.junit.jupiter.api.Assertions.assertThrows(IllegalArgumentException.class,
            () -> config().withMaxBatchSize(4).withPreferredBatchSizes(8));
        org.junit.jupiter.api.Assertions.assertThrows(IllegalArgumentException.class,
            () -> config().withPreferredBatchSizes(2, 2));
        org.junit.jupiter.api.Assertions.assertThrows(IllegalArgumentException.class,
            () -> BatchingConfig.of(0, 4));
        org.junit.jupiter.api.Assertions.assertThrows(IllegalArgumentException.class,
            () -> config().withMaxQueueDelayNs(-1));
    }
}
