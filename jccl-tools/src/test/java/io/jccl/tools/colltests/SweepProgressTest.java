package io.jccl.tools.colltests;

import io.jccl.tools.ProgressLine;
import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The sweep's progress line: rows counted from the table, output passed through untouched. */
class SweepProgressTest {
    @Test
    void shouldCountTableRowsAndLeaveStdoutUntouched() throws Exception {
        ByteArrayOutputStream stdout = new ByteArrayOutputStream();
        ByteArrayOutputStream stderr = new ByteArrayOutputStream();
        String table = "# nThread 1 nGpus 1\n#\n#  size  count (elements)\n#        (B)    (elements)   (us)\n"
            + "           8             2     float     sum      -1     0.50    0.02    0.02      0\n"
            + "        1024           256     float     sum      -1     0.90    1.1    1.1      0\n";
        try (SweepProgress progress = new SweepProgress(new PrintStream(stdout, true, StandardCharsets.UTF_8),
            new ProgressLine(new PrintStream(stderr, true, StandardCharsets.UTF_8), true), "all_reduce_perf", 3)) {
            byte[] bytes = table.getBytes(StandardCharsets.UTF_8);
            progress.write(bytes, 0, 37); // a write that ends mid-line
            progress.write(bytes, 37, bytes.length - 37);
            assertEquals(2, progress.rows());
            progress.write("# Out of bounds values : 0 OK\n".getBytes(StandardCharsets.UTF_8));
        }
        assertEquals(table + "# Out of bounds values : 0 OK\n", stdout.toString(StandardCharsets.UTF_8));
        String drawn = stderr.toString(StandardCharsets.UTF_8);
        assertTrue(drawn.contains("[all_reduce_perf: starting, JIT warm-up"), drawn);
        assertTrue(drawn.contains("[all_reduce_perf: 2/3 sizes, "), drawn);
        assertFalse(drawn.contains("3/3"), drawn);
        assertTrue(drawn.endsWith("\r"), "erased at the end: " + drawn);
    }

    @Test
    void shouldDrawNothingWhenDisabled() {
        ByteArrayOutputStream stderr = new ByteArrayOutputStream();
        ProgressLine line = new ProgressLine(new PrintStream(stderr, true, StandardCharsets.UTF_8), false);
        line.show("x");
        line.clear();
        assertEquals("", stderr.toString(StandardCharsets.UTF_8));
    }
}
