package io.jccl.collectives;

import io.jccl.common.Log;
import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The library's own "Using network ... Init COMPLETE" line at JCCL_DEBUG=INFO: one per rank and communicator. */
class SetupSummaryTest {
    @Test
    void shouldPrintOneSummaryLinePerRankAtInfo() {
        Map<Integer, String> summaries = new ConcurrentHashMap<>();
        String text = capturedAtInfo(() -> Ranks.run(3, Ranks.loop(), c -> summaries.put(c.rank(), c.summary())));
        List<String> complete = text.lines().filter(l -> l.contains("Init COMPLETE")).toList();
        assertEquals(3, complete.size(), text);
        for (int rank = 0; rank < 3; rank++) {
            String summary = summaries.get(rank);
            String others = rank == 0 ? "1-2" : rank == 1 ? "0,2" : "0-1";
            assertTrue(summary.startsWith("comm 'world' rank " + rank + " nranks 3 localRanks 3 hosts 1 - Using "
                + "network loop0 ("), summary);
            assertTrue(summary.endsWith(" for ranks " + others + " - paths direct+message - Init COMPLETE"),
                summary);
            String expected = " [" + rank + "] JCCL INFO INIT " + summary;
            assertEquals(1, complete.stream().filter(l -> l.endsWith(expected)).count(), expected + " in\n" + text);
        }
    }

    @Test
    void shouldPrintNothingAtTheDefaultLevel() {
        String text = capturedAt(null, () -> Ranks.run(2, Ranks.loop(), c -> { }));
        assertTrue(!text.contains("Init COMPLETE") && !text.contains("JCCL version"), text);
    }

    @Test
    void shouldWriteRankRanges() {
        assertEquals("1-3", RankSetup.ranges(List.of(1, 2, 3)));
        assertEquals("0,2,4-5,7", RankSetup.ranges(List.of(0, 2, 4, 5, 7)));
        assertEquals("5", RankSetup.ranges(List.of(5)));
    }

    private static String capturedAtInfo(Runnable body) {
        return capturedAt("INFO", body);
    }

    /** Runs {@code body} with JCCL_DEBUG={@code level} (null: unset) and stderr captured, then restores both. */
    private static synchronized String capturedAt(String level, Runnable body) {
        PrintStream saved = System.err;
        String savedLevel = System.getProperty("jccl.debug");
        String savedLogger = System.getProperty("jccl.logger");
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        try {
            System.setErr(new PrintStream(bytes, true, StandardCharsets.UTF_8));
            if (level == null) {
                System.clearProperty("jccl.debug");
            } else {
                System.setProperty("jccl.debug", level);
            }
            System.setProperty("jccl.logger", "jccl");
            Log.get(); // a new configuration: the Log now writes to the captured stderr
            body.run();
        } finally {
            restore("jccl.debug", savedLevel);
            restore("jccl.logger", savedLogger);
            System.setErr(saved);
            Log.get();
        }
        return bytes.toString(StandardCharsets.UTF_8);
    }

    private static void restore(String name, String value) {
        if (value == null) {
            System.clearProperty(name);
        } else {
            System.setProperty(name, value);
        }
    }
}
