package io.jccl.tools.colltests;

import io.jccl.tools.launcher.Launcher;
import io.jccl.verbs.Device;
import io.jccl.verbs.Verbs;
import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/** End-to-end: {@code jccl tests all_reduce_perf} as two ranks started by the launcher, over shm. */
class CollectiveSystemTest {
    @Test
    void shouldPrintACheckedAllReduceTable() throws Exception {
        assumeTrue(Verbs.devices().stream().map(Device::name).anyMatch("shm0"::equals), "no shm0 device");
        java.nio.file.Path dir = java.nio.file.Files.createTempDirectory("jccl-tests");
        java.nio.file.Path json = dir.resolve("run.json");
        java.nio.file.Path svg = dir.resolve("run.svg");
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        PrintStream out = new PrintStream(bytes, true, StandardCharsets.UTF_8);
        Launcher.Result result = Launcher.builder().ranks(2).prefixOutput(false).out(out)
            .timeout(Duration.ofSeconds(90))
            .javaMain("io.jccl.tools.Main", List.of("tests", "all_reduce_perf", "-b", "8", "-e", "64K", "-f", "64",
                "-n", "5", "-w", "2", "--json", json.toString(), "--plot", svg.toString()))
            .build().run();
        String text = bytes.toString(StandardCharsets.UTF_8);
        System.out.print(text);
        assertEquals(0, result.exitCode(), text);
        List<String> rows = text.lines().filter(l -> !l.startsWith("#") && !l.isBlank()).toList();
        assertEquals(List.of("8", "512", "32768"), rows.stream().map(r -> r.trim().split("\\s+")[0]).toList());
        for (String row : rows) {
            String[] c = row.trim().split("\\s+");
            assertEquals(13, c.length, row);
            assertEquals("float", c[2]);
            assertEquals("sum", c[3]);
            assertEquals("0", c[8], "out-of-place #wrong");
            assertEquals("0", c[12], "in-place #wrong");
        }
        assertTrue(text.contains("# JIT warm-up: "), "the JIT warm-up pass reports itself: " + text);
        assertTrue(text.contains("# Out of bounds values : 0 OK"), text);
        assertTrue(text.contains("# Avg bus bandwidth    : "), text);
        // --json: the table's numbers plus the transport and, per size, the algorithm the cost model picked.
        java.util.Map<?, ?> doc = (java.util.Map<?, ?>) io.jccl.tools.Json.parse(java.nio.file.Files.readString(json));
        assertEquals("shm0", doc.get("transport"));
        List<?> results = (List<?>) doc.get("results");
        assertEquals(3, results.size());
        for (Object row : results) {
            assertTrue(((java.util.Map<?, ?>) row).get("algorithm") instanceof String a && !a.isBlank(), row.toString());
        }
        // --plot: one line per placement, labelled with the run's label.
        String plot = java.nio.file.Files.readString(svg);
        assertEquals(2, plot.split("<polyline", -1).length - 1, plot);
        assertTrue(plot.contains(doc.get("label") + ", out-of-place"), plot);
    }
}
