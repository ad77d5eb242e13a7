package io.jccl.tools.colltests;

import io.jccl.tools.Main;
import io.jccl.verbs.Device;
import io.jccl.verbs.Verbs;
import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * Bug #7 end to end: {@code jccl tests} in-process with its progress line on (stderr taken for a terminal), stdout
 * and stderr on one screen as in a terminal. Replayed, the screen holds the table with every row whole and no
 * progress text left over.
 */
class TestsProgressSystemTest {
    @Test
    void shouldKeepTheProgressLineOutOfTheTable() {
        assumeTrue(Verbs.devices().stream().map(Device::name).anyMatch("shm0"::equals), "no shm0 device");
        ByteArrayOutputStream terminal = new ByteArrayOutputStream();
        PrintStream screen = new PrintStream(terminal, true, StandardCharsets.UTF_8);
        PrintStream savedOut = System.out;
        PrintStream savedErr = System.err;
        int status;
        try {
            System.setProperty("jccl.stderr.tty", "true");
            System.setOut(screen);
            System.setErr(screen);
            status = Main.run("tests", "all_reduce_perf", "-np", "2", "-b", "8", "-e", "32K", "-f", "64", "-n", "5",
                "-w", "2", "--jit_warmup", "200");
        } finally {
            System.setOut(savedOut);
            System.setErr(savedErr);
            System.clearProperty("jccl.stderr.tty");
        }
        String raw = terminal.toString(StandardCharsets.UTF_8);
        List<String> shown = SweepProgressTest.replay(raw);
        String text = String.join("\n", shown);
        System.out.println(text);
        assertEquals(0, status, text);
        assertTrue(raw.contains("[all_reduce_perf: "), "the progress line was drawn: " + raw);
        assertFalse(text.contains("[all_reduce_perf: "), "no progress text left on the screen:\n" + text);
        List<String> rows = shown.stream().filter(l -> !l.startsWith("#") && !l.isBlank()).toList();
        assertEquals(List.of("8", "512", "32768"), rows.stream().map(r -> r.trim().split("\\s+")[0]).toList(), text);
        for (String row : rows) {
            assertEquals(13, row.trim().split("\\s+").length, row);
        }
        assertTrue(text.contains("# Out of bounds values : 0 OK"), text);
    }
}
