package io.jccl.tools.colltests;

import io.jccl.tools.ProgressLine;
import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

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

    /**
     * Bug #7: rank stderr (a warning, JCCL_DEBUG lines) went straight to the terminal while the progress line sat
     * there, so the two ran together on one screen line. Both streams now pass through the progress lock: replayed
     * on a terminal (\r returns to column 0, later text overwrites), every row and every warning stands alone on its
     * line and no progress text is left anywhere.
     */
    @Test
    void shouldNeverLeaveProgressTextInsideARowOrAWarning() throws Exception {
        ByteArrayOutputStream terminal = new ByteArrayOutputStream();
        PrintStream screen = new PrintStream(terminal, true, StandardCharsets.UTF_8);
        String header = "#        (B)    (elements)   (us)\n";
        String row1 = "           8             2     float     sum      -1     0.50    0.02    0.02      0\n";
        String warning = "host:1:2 [1] JCCL WARN a peer is slow\n";
        String row2 = "        1024           256     float     sum      -1     0.90    1.1    1.1      0\n";
        try (SweepProgress progress = new SweepProgress(screen, new ProgressLine(screen, true), "all_reduce_perf",
            3)) {
            PrintStream out = new PrintStream(progress, true, StandardCharsets.UTF_8);
            PrintStream err = new PrintStream(progress.errors(screen), true, StandardCharsets.UTF_8);
            out.print(header);
            progress.tick();
            out.print(row1);
            err.print("host:1:2 [1] JCCL WARN a pee"); // half a line: held until its end
            progress.tick();
            err.print("r is slow\n");
            out.print(row2);
            assertEquals(2, progress.rows());
        }
        assertEquals(List.of(header.strip(), row1.stripTrailing(), warning.strip(), row2.stripTrailing()),
            replay(terminal.toString(StandardCharsets.UTF_8)).stream().map(String::stripTrailing).toList());
    }

    /** Bug #7: the line froze during the JIT warm-up (it was redrawn only when a line arrived); ticks redraw it. */
    @Test
    void shouldRedrawOnEveryTickBeforeTheFirstRow() {
        ByteArrayOutputStream stderr = new ByteArrayOutputStream();
        SweepProgress progress = new SweepProgress(new PrintStream(new ByteArrayOutputStream(), true,
            StandardCharsets.UTF_8), new ProgressLine(new PrintStream(stderr, true, StandardCharsets.UTF_8), true),
            "all_reduce_perf", 3);
        progress.tick();
        progress.tick();
        String drawn = stderr.toString(StandardCharsets.UTF_8);
        assertEquals(2, drawn.split("\\[all_reduce_perf: starting, JIT warm-up, \\d+ s]", -1).length - 1, drawn);
        progress.close();
        progress.tick(); // after close: nothing more
        assertTrue(stderr.toString(StandardCharsets.UTF_8).endsWith("\r"), stderr.toString(StandardCharsets.UTF_8));
    }

    /** What a terminal shows for {@code text}: \r moves to column 0, characters overwrite, \n ends a line. */
    static List<String> replay(String text) {
        List<String> lines = new ArrayList<>();
        StringBuilder current = new StringBuilder();
        int column = 0;
        for (char c : text.toCharArray()) {
            if (c == '\r') {
                column = 0;
            } else if (c == '\n') {
                lines.add(current.toString());
                current.setLength(0);
                column = 0;
            } else {
                if (column < current.length()) {
                    current.setCharAt(column, c);
                } else {
                    current.append(c);
                }
                column++;
            }
        }
        if (!current.toString().isBlank()) {
            lines.add(current.toString());
        }
        return lines;
    }
}
