package io.jccl.collectives;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;

/**
 * Blocking and asynchronous calls are checked by the same rules before they are issued: a bad argument is an
 * {@link IllegalArgumentException} from the call itself, with the same message either way, and the communicator
 * stays usable. (The asynchronous broadcast, reduce, gather and scatter used to skip the buffer checks: the bad
 * call then failed later, inside the operation, and took the communicator down with it.)
 */
class CallCheckTest {
    private static final int N = 64;

    @Test
    void shouldCheckAsyncCallsAsTheBlockingOnes() {
        Ranks.run(2, Ranks.loop(), c -> {
            try (Arena arena = Arena.ofShared()) { // the async calls run on the executor thread
                MemorySegment full = arena.allocate(4L * N * c.size());
                MemorySegment small = arena.allocate(4L * N - 4);
                int root = 0;
                boolean isRoot = c.rank() == root;
                DataType f32 = DataType.FLOAT32;
                // Root-only buffers are checked on the root, the others everywhere.
                if (isRoot) {
                    sameRejection(() -> c.broadcast(small, full, N, f32, root),
                        () -> c.broadcastAsync(small, full, N, f32, root));
                    sameRejection(() -> c.reduce(full, small, N, f32, ReduceOp.SUM, root),
                        () -> c.reduceAsync(full, small, N, f32, ReduceOp.SUM, root));
                    sameRejection(() -> c.gather(full, small, N, f32, root),
                        () -> c.gatherAsync(full, small, N, f32, root));
                    sameRejection(() -> c.scatter(small, full, N, f32, root),
                        () -> c.scatterAsync(small, full, N, f32, root));
                }
                sameRejection(() -> c.gather(small, full, N, f32, root), () -> c.gatherAsync(small, full, N, f32, root));
                sameRejection(() -> c.scatter(full, small, N, f32, root),
                    () -> c.scatterAsync(full, small, N, f32, root));
                sameRejection(() -> c.broadcast(full, small, N, f32, root),
                    () -> c.broadcastAsync(full, small, N, f32, root));
                sameRejection(() -> c.broadcast(full, full, N, f32, c.size()),
                    () -> c.broadcastAsync(full, full, N, f32, c.size()));
                sameRejection(() -> c.allReduce(full, full, -1, f32, ReduceOp.SUM),
                    () -> c.allReduceAsync(full, full, -1, f32, ReduceOp.SUM));
                // count × element size (and × ranks) overflowing a long: refused, not wrapped around
                long huge = (1L << 62) + 2;
                sameRejection(() -> c.allReduce(full, full, huge, f32, ReduceOp.SUM),
                    () -> c.allReduceAsync(full, full, huge, f32, ReduceOp.SUM));
                long half = Long.MAX_VALUE / 2 + 1;
                sameRejection(() -> c.allGather(full, full, half, DataType.INT8),
                    () -> c.allGatherAsync(full, full, half, DataType.INT8));
                // Nothing was issued: the communicator works, and every rank agrees on what runs next.
                assertFalse(c.isFailed());
                full.fill((byte) 0);
                full.set(ValueLayout.JAVA_FLOAT, 0, c.rank() + 1);
                c.allReduceAsync(full, full, N, f32, ReduceOp.SUM).get(30, TimeUnit.SECONDS);
                assertEquals(3f, full.get(ValueLayout.JAVA_FLOAT, 0));
                c.barrier();
            }
        });
    }

    /** Both calls are refused up front, with the same message. */
    private static void sameRejection(Executable blocking, Executable async) {
        IllegalArgumentException b = assertThrows(IllegalArgumentException.class, blocking);
        IllegalArgumentException a = assertThrows(IllegalArgumentException.class, async, "asynchronous form");
        assertEquals(b.getMessage(), a.getMessage());
    }
}
