package io.jccl.collectives;

import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The heap-segment classes load with {@link Communicator}, before any collective is compiled: loaded later (by the
 * first {@code allReduce(int[])}), they invalidate the compiled code of every collective at once (see
 * {@code Communicator.loadSegmentKinds}). Checked in a fresh JVM with {@code -Xlog:class+load}.
 */
class SegmentKindsTest {
    /** The child JVM: initialises Communicator, prints a marker, then makes its first int[] segment. */
    public static final class Probe {
        public static void main(String[] args) throws Exception {
            Class.forName(Communicator.class.getName(), true, Probe.class.getClassLoader());
            System.out.println("PROBE-MARK");
            System.out.flush();
            System.out.println(MemorySegment.ofArray(new int[1]).byteSize());
        }
    }

    @Test
    void heapSegmentClassesLoadWithTheCommunicatorClass() throws IOException, InterruptedException {
        String java = ProcessHandle.current().info().command().orElse("java");
        Process p = new ProcessBuilder(java, "--enable-native-access=ALL-UNNAMED", "-Xshare:auto",
            "-Xlog:class+load=info", "-cp", System.getProperty("java.class.path"), Probe.class.getName())
            .redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(60, TimeUnit.SECONDS));
        assertEquals(0, p.exitValue(), out);
        int mark = out.indexOf("\nPROBE-MARK");
        assertTrue(mark > 0, out);
        for (String kind : List.of("OfByte", "OfChar", "OfShort", "OfInt", "OfLong", "OfFloat", "OfDouble")) {
            int loaded = out.indexOf("jdk.internal.foreign.HeapMemorySegmentImpl$" + kind + " ");
            assertTrue(loaded > 0 && loaded < mark, kind + " loaded at " + loaded + ", marker at " + mark);
        }
    }
}
