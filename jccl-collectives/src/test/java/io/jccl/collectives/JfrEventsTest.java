package io.jccl.collectives;

import jdk.jfr.Recording;
import jdk.jfr.consumer.RecordedEvent;
import jdk.jfr.consumer.RecordingFile;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The JFR events (docs/observability.md): a recording in this JVM sees one {@code io.jccl.Collective} per
 * operation with its fields, and {@code io.jccl.Mismatch}, {@code io.jccl.PeerFailure} and
 * {@code io.jccl.QueuePairError} when FailureTest's failures are provoked; read back with {@link RecordingFile}.
 */
class JfrEventsTest {
    private static final String[] EVENTS = {"io.jccl.Collective", "io.jccl.Mismatch", "io.jccl.PeerFailure",
        "io.jccl.QueuePairError"};

    @TempDir
    Path dir;

    private static Recording start() {
        Recording recording = new Recording();
        for (String name : EVENTS) {
            recording.enable(name).withThreshold(Duration.ZERO);
        }
        recording.start();
        return recording;
    }

    private List<RecordedEvent> stop(Recording recording, String file) throws Exception {
        recording.stop();
        Path path = dir.resolve(file);
        recording.dump(path);
        recording.close();
        return RecordingFile.readAllEvents(path);
    }

    private static List<RecordedEvent> named(List<RecordedEvent> events, String name, String communicator) {
        return events.stream().filter(e -> e.getEventType().getName().equals(name))
            .filter(e -> communicator == null || communicator.equals(e.getString("communicator"))).toList();
    }

    @Test
    void shouldRecordEveryCollectiveWithItsFields() throws Exception {
        Recording recording = start();
        Ranks.run(2, Ranks.loop().withName("jfr-ops").withAlgorithms("allreduce:direct;broadcast:ring"), c -> {
            try (Arena arena = Arena.ofConfined()) {
                MemorySegment buf = arena.allocate(4096);
                for (int i = 0; i < 3; i++) {
                    c.allReduce(buf, 2, DataType.FLOAT32, ReduceOp.SUM);
                }
                c.broadcast(buf, 1024, DataType.INT32, 1);
            }
        });
        List<RecordedEvent> ops = named(stop(recording, "ops.jfr"), "io.jccl.Collective", "jfr-ops");
        assertEquals(8, ops.size(), "3 all-reduces and a broadcast on each of 2 ranks: " + ops);
        for (int rank = 0; rank < 2; rank++) {
            int r = rank;
            List<RecordedEvent> mine = ops.stream().filter(e -> e.getInt("rank") == r)
                .sorted(java.util.Comparator.comparingLong(e -> e.getLong("sequence"))).toList();
            assertEquals(4, mine.size());
            RecordedEvent first = mine.get(0);
            assertEquals("allReduce", first.getString("collective"));
            assertEquals(8, first.getLong("bytes"));
            assertEquals(2, first.getLong("count"));
            assertEquals("float32", first.getString("dataType"));
            assertEquals("sum", first.getString("op"));
            assertEquals("direct/inline", first.getString("algorithm"));
            assertEquals("loop0 (direct)", first.getString("transport"));
            assertEquals(2, first.getInt("worldSize"));
            assertTrue(first.getBoolean("succeeded"));
            assertFalse(first.getDuration().isNegative());
            // The warm-up at creation uses the first sequence numbers but records no event (it is not the application's)
            long base = first.getLong("sequence");
            assertEquals(base + 2, mine.get(2).getLong("sequence"),
                "the reused event carries each operation's own fields");
            RecordedEvent bcast = mine.get(3);
            assertEquals("broadcast", bcast.getString("collective"));
            assertEquals(4096, bcast.getLong("bytes"));
            assertEquals("int32", bcast.getString("dataType"));
            assertNull(bcast.getString("op"));
            assertEquals("ring", bcast.getString("algorithm"));
        }
    }

    @Test
    void shouldRecordAMismatchWithWhatEachSideRan() throws Exception {
        Recording recording = start();
        List<Throwable> results = FailureTest.outcomes(2, Ranks.loop().withName("jfr-mismatch")
            .withAlgorithms(CollectivesTest.DIRECT), c -> {
                if (c.rank() == 0) {
                    FailureTest.allReduceOnce(c, 1000);
                } else {
                    try (Arena arena = Arena.ofConfined()) {
                        c.broadcast(arena.allocate(4000), 1000, DataType.FLOAT32, 0);
                    }
                }
            });
        // the rank that sees the other's signature first throws Mismatch; the other may learn it as a PeerFailure
        assertTrue(results.stream().anyMatch(e -> e instanceof CollectiveException.Mismatch), results.toString());
        List<RecordedEvent> events = stop(recording, "mismatch.jfr");
        List<RecordedEvent> mismatches = named(events, "io.jccl.Mismatch", "jfr-mismatch");
        assertFalse(mismatches.isEmpty(), "no io.jccl.Mismatch in " + events);
        for (RecordedEvent m : mismatches) {
            int rank = m.getInt("rank");
            String local = m.getString("local");
            String other = m.getString("other");
            assertEquals(1 - rank, m.getInt("otherRank"));
            assertTrue(local.startsWith(rank == 0 ? "allReduce(count=1000" : "broadcast(count=1000"), local);
            assertTrue(other.startsWith(rank == 0 ? "broadcast(count=1000" : "allReduce(count=1000"), other);
            assertTrue(m.getString("message").contains("collective mismatch"), m.getString("message"));
        }
        List<RecordedEvent> failed = named(events, "io.jccl.Collective", "jfr-mismatch").stream()
            .filter(e -> !e.getBoolean("succeeded")).toList();
        assertFalse(failed.isEmpty(), "the failed operations are recorded too");
    }

    @Test
    void shouldRecordAPeerFailureAndTheQueuePairErrors() throws Exception {
        Recording recording = start();
        List<Throwable> results = FailureTest.outcomes(3, Ranks.loop().withName("jfr-abort")
            .withAlgorithms("allreduce:ring"), c -> {
                if (c.rank() == 0) {
                    Thread.sleep(300);
                    c.abort("rank 0 gives up");
                    return;
                }
                FailureTest.allReduceOnce(c, 100_000);
            });
        assertInstanceOf(CollectiveException.PeerFailure.class, results.get(1));
        List<RecordedEvent> events = stop(recording, "peer.jfr");
        List<RecordedEvent> failures = named(events, "io.jccl.PeerFailure", "jfr-abort");
        assertFalse(failures.isEmpty(), "no io.jccl.PeerFailure in " + events);
        for (RecordedEvent f : failures) {
            assertTrue(f.getInt("detectingRank") == 1 || f.getInt("detectingRank") == 2, f.toString());
            assertTrue(List.of("abort", "died", "timeout").contains(f.getString("reason")), f.toString());
            assertTrue(f.getString("message").contains("rank 0"), f.toString());
        }
        // survivors name the origin (abort notices, docs/collectives.md): rank 0, which aborted
        assertTrue(failures.stream().anyMatch(f -> f.getInt("failedRank") == 0
            && f.getString("reason").equals("abort")), failures.toString());
        List<RecordedEvent> qpErrors = named(events, "io.jccl.QueuePairError", null).stream()
            .filter(e -> "loop0".equals(e.getString("device"))).toList();
        assertFalse(qpErrors.isEmpty(), "breaking the links moves queue pairs to ERROR");
        for (RecordedEvent q : qpErrors) {
            assertEquals("ERROR", q.getString("newState"));
            assertTrue(q.getInt("queuePairNumber") != 0, q.toString());
            assertFalse(q.getString("reason").isEmpty());
            assertFalse(q.getString("previousState").equals("ERROR"), q.toString());
        }
    }

    @Test
    void shouldClassifyPeerFailureReasons() {
        assertEquals("abort", io.jccl.collectives.events.PeerFailureEvent.reasonOf(
            "rank 2 aborted its communicator: user"));
        assertEquals("timeout", io.jccl.collectives.events.PeerFailureEvent.reasonOf(
            "rank 1 has not run for 30000 ms (JCCL_PEER_TIMEOUT)"));
        assertEquals("timeout", io.jccl.collectives.events.PeerFailureEvent.reasonOf(
            "rank 3 is unreachable: a work request failed with RETRY_EXC_ERR"));
        assertEquals("died", io.jccl.collectives.events.PeerFailureEvent.reasonOf(
            "rank 3 died (process 12 on h is gone)"));
    }
}
