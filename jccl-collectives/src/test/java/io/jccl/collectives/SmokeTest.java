package io.jccl.collectives;

import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

import static org.junit.jupiter.api.Assertions.assertEquals;

class SmokeTest {
    @Test
    void allReduceEveryAlgorithm() {
        for (String algo : new String[] {"ring", "tree", "rhd", "direct"}) {
            for (int n : new int[] {1, 2, 3, 4}) {
                Ranks.run(n, Ranks.loop().withAlgorithms("allreduce:" + algo), c -> {
                    try (Arena arena = Arena.ofConfined()) {
                        int count = 1001;
                        MemorySegment buf = arena.allocate(count * 4L);
                        for (int i = 0; i < count; i++) {
                            buf.setAtIndex(ValueLayout.JAVA_FLOAT, i, c.rank() + i);
                        }
                        c.allReduce(buf, count, DataType.FLOAT32, ReduceOp.SUM);
                        for (int i = 0; i < count; i++) {
                            float expected = c.size() * (c.size() - 1) / 2f + (float) c.size() * i;
                            assertEquals(expected, buf.getAtIndex(ValueLayout.JAVA_FLOAT, i), algo + " n=" + n + " i=" + i);
                        }
                    }
                });
            }
        }
    }
}
