package io.jccl.tools.colltests;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;

/** {@code jccl tests}' JIT warm-up budget: the same count on every rank, bounded bytes for large sizes. */
class TestsCommandTest {
    @Test
    void shouldWarmSmallSizesFullyAndCapLargeOnesAt256MiB() {
        assertEquals(2000, TestsCommand.jitRunsFor(8, 2000));
        assertEquals(2000, TestsCommand.jitRunsFor(64 << 10, 2000));
        assertEquals(256, TestsCommand.jitRunsFor(1 << 20, 2000));
        assertEquals(4, TestsCommand.jitRunsFor(64L << 20, 2000));
        assertEquals(1, TestsCommand.jitRunsFor(1L << 30, 2000), "at least one run, even above the cap");
        assertEquals(0, TestsCommand.jitRunsFor(8, 0), "--jit_warmup 0 turns it off");
    }
}
