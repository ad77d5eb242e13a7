package io.jccl.tools;

import org.junit.jupiter.api.Test;
import picocli.CommandLine;

import java.io.PrintWriter;
import java.io.StringWriter;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Issue 16, bug #4: every size flag error names the flag and says what is accepted. */
class SizeArgumentTest {
    /** Runs a jccl command line; returns its exit status and standard error. */
    private static String[] run(String... args) {
        CommandLine cl = Main.commandLine();
        StringWriter err = new StringWriter();
        cl.setErr(new PrintWriter(err, true));
        cl.setOut(new PrintWriter(new StringWriter(), true));
        int status = cl.execute(args);
        return new String[] {Integer.toString(status), err.toString()};
    }

    @Test
    void shouldParseSizesWithSuffixes() {
        assertEquals(8, SizeArgument.parse("-b", "8"));
        assertEquals(64L << 10, SizeArgument.parse("-b", "64k"));
        assertEquals(32L << 20, SizeArgument.parse("-b", " 32M "));
        assertEquals(1L << 30, SizeArgument.parse("-b", "1G"));
    }

    @Test
    void shouldSayWhatASizeIsForEveryTestsSizeFlag() {
        for (String flag : new String[] {"-b", "-e", "-i"}) {
            String[] r = run("tests", "all_reduce_perf", flag, "1Q");
            assertEquals("1", r[0], r[1]);
            assertTrue(r[1].contains("jccl tests: " + flag + " 1Q: a size is a whole number of bytes with an optional "
                + "K, M or G suffix"), r[1]);
            assertFalse(r[1].contains("For input string"), r[1]);
        }
        assertTrue(run("tests", "all_reduce_perf", "-b", "-8")[1].contains("-b -8: a size cannot be negative"));
        assertTrue(run("tests", "all_reduce_perf", "-e", "99999999999G")[1].contains("-e 99999999999G: too large"));
        String[] f = run("tests", "all_reduce_perf", "-f", "x2");
        assertTrue(f[1].contains("-f x2: the step factor is a whole number, 2 or more"), f[1]);
        String[] order = run("tests", "all_reduce_perf", "-b", "64M", "-e", "1M");
        assertTrue(order[1].contains("-b 64M is larger than -e 1M"), order[1]);
    }

    @Test
    void shouldSayWhatASizeIsForPerftestSizeFlags() {
        for (String flag : new String[] {"-s", "-I"}) {
            String[] r = run("perf", "send_bw", flag, "1Q");
            assertEquals("2", r[0], r[1]);
            assertTrue(r[1].contains("'1Q': a size is a whole number of bytes with an optional K, M or G suffix"), r[1]);
        }
        String[] big = run("perf", "send_bw", "-I", "4G");
        assertTrue(big[1].contains("'4G': too large (at most 2147483647 bytes)"), big[1]);
    }
}
