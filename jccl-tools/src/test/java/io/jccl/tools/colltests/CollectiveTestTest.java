package io.jccl.tools.colltests;

import io.jccl.collectives.DataType;
import io.jccl.collectives.ReduceOp;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

class CollectiveTestTest {
    @Test
    void shouldMapSizesToCountsAsNcclTests() {
        CollectiveTest allReduce = new CollectiveTest(BusBandwidth.ALL_REDUCE, 4, 0, DataType.FLOAT32, ReduceOp.SUM, 0);
        assertEquals(256, allReduce.blockCount(1024));
        assertEquals(1024, allReduce.sizeBytes(256));
        CollectiveTest allGather = new CollectiveTest(BusBandwidth.ALL_GATHER, 4, 0, DataType.FLOAT32, ReduceOp.SUM, 0);
        assertEquals(64, allGather.blockCount(1024), "per-rank block is a quarter of the total");
        assertEquals(1024, allGather.sizeBytes(64), "size column is the whole gathered buffer");
        assertEquals(64, allGather.sendElements(64));
        assertEquals(256, allGather.recvElements(64));
        assertEquals(0, allGather.blockCount(8), "too small for 4 ranks: skipped");
        assertTrue(allReduce.reduces());
        assertTrue(new CollectiveTest(BusBandwidth.BROADCAST, 2, 0, DataType.INT8, ReduceOp.SUM, 1).rooted());
    }

    @Test
    void shouldCountWrongElementsOfAnAllGather() {
        int n = 3;
        long block = 5;
        CollectiveTest rank1 = new CollectiveTest(BusBandwidth.ALL_GATHER, n, 1, DataType.INT32, ReduceOp.SUM, 0);
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment recv = arena.allocate(4 * block * n);
            for (int r = 0; r < n; r++) {
                for (long i = 0; i < block; i++) {
                    Elements.set(recv, DataType.INT32, r * block + i, rank1.value(r, i));
                }
            }
            assertEquals(0, rank1.check(recv, block));
            Elements.set(recv, DataType.INT32, 7, 99);
            assertEquals(1, rank1.check(recv, block));
        }
    }

    @Test
    void shouldExpectExactReductionsInEveryType() {
        for (DataType type : List.of(DataType.FLOAT32, DataType.BFLOAT16, DataType.FLOAT16, DataType.INT8,
            DataType.INT64, DataType.FLOAT64)) {
            CollectiveTest t = new CollectiveTest(BusBandwidth.ALL_REDUCE, 4, 2, type, ReduceOp.SUM, 0);
            try (Arena arena = Arena.ofConfined()) {
                MemorySegment recv = arena.allocate(8L * 16);
                for (long i = 0; i < 16; i++) {
                    double sum = 0;
                    for (int r = 0; r < 4; r++) {
                        sum += t.value(r, i);
                    }
                    Elements.set(recv, type, i, sum);
                }
                assertEquals(0, t.check(recv, 16), type.toString());
            }
        }
    }

    @Test
    void shouldParseNcclTestsSizesAndSteps() {
        assertEquals(8, TestsCommand.parseSize("8"));
        assertEquals(64L << 20, TestsCommand.parseSize("64M"));
        assertEquals(1L << 30, TestsCommand.parseSize("1G"));
        assertEquals(List.of(8L, 16L, 32L, 64L), TestsCommand.sizes(8, 64, 2, 0));
        assertEquals(List.of(1024L, 2048L, 3072L), TestsCommand.sizes(1024, 3072, 0, 1024));
    }

    @Test
    void shouldPrintNcclTestsColumns() {
        List<String> header = CollectiveReport.header().lines().toList();
        assertEquals(List.of("#", "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
            "algbw", "busbw", "#wrong"), List.of(header.get(2).trim().split("\\s+")));
        String row = CollectiveReport.rowStart(1024, 256, "float", "sum", -1)
            + CollectiveReport.placement(12.345, 0.08, 0.12, "0") + CollectiveReport.placement(123.45, 1, 2, "N/A");
        assertEquals(List.of("1024", "256", "float", "sum", "-1", "12.35", "0.08", "0.12", "0", "123.5", "1.00",
            "2.00", "N/A"), List.of(row.trim().split("\\s+")));
        assertTrue(CollectiveReport.footer(0, 1.5).startsWith("# Out of bounds values : 0 OK"));
        assertTrue(CollectiveReport.footer(3, 1.5).startsWith("# Out of bounds values : 3 FAILED"));
        assertTrue(CollectiveReport.footer(0, 1.5).contains("# Avg bus bandwidth    : 1.50000"));
    }
}
