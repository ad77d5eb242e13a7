package io.jccl.verbs.spi;

import io.jccl.verbs.Counter;
import org.junit.jupiter.api.Test;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Counters: shared and per-writer blocks, folding, overflow, and the file other processes read. */
class CounterSetTest {
    @Test
    void counterFileNamesKeepOnlySafeCharacters() {
        assertEquals("shm0", CounterFile.safeFileName("shm0"));
        assertEquals("a_b-c_d___e", CounterFile.safeFileName("a_b-c/d..\\e"));
        assertEquals("_", CounterFile.safeFileName("\u00e9"));
    }

    @Test
    void shouldSumSharedAndLocalBlocksAndFoldClosedLocals() {
        CounterSet set = new CounterSet();
        set.add(Counter.PORT_XMIT_DATA, 100);
        CounterSet.Local a = set.newLocal();
        CounterSet.Local b = set.newLocal();
        a.add(Counter.PORT_XMIT_DATA, 10);
        b.add(Counter.PORT_XMIT_DATA, 1);
        b.increment(Counter.RDMA_SENDS);
        assertEquals(111, set.get(Counter.PORT_XMIT_DATA));
        a.close();
        a.add(Counter.PORT_XMIT_DATA, 1000); // after close: not counted, and must not land in a reused block
        assertEquals(111, set.get(Counter.PORT_XMIT_DATA));
        CounterSet.Local c = set.newLocal(); // reuses a's block, which folding zeroed
        assertEquals(111, set.get(Counter.PORT_XMIT_DATA));
        c.add(Counter.PORT_XMIT_DATA, 5);
        assertEquals(116, set.get(Counter.PORT_XMIT_DATA));
        assertEquals(1, set.snapshot().get(Counter.RDMA_SENDS));
    }

    @Test
    void shouldCountEveryLocalEvenWhenBlocksRunOut() {
        CounterSet set = new CounterSet();
        List<CounterSet.Local> locals = new ArrayList<>();
        for (int i = 0; i < 200; i++) { // more than the in-process set's 64 blocks
            CounterSet.Local local = set.newLocal();
            local.add(Counter.PORT_RCV_DATA, 2);
            locals.add(local);
        }
        assertEquals(400, set.get(Counter.PORT_RCV_DATA));
        locals.forEach(CounterSet.Local::close);
        assertEquals(400, set.get(Counter.PORT_RCV_DATA));
    }

    @Test
    void shouldPublishCountersThatAnotherReaderSeesByNameAndDeleteTheFileOnClose() throws Exception {
        CounterSet set = CounterSet.forContext("test dev/1");
        assertNotNull(set.fileName(), "a counter file (is " + CounterFile.directory() + " writable?)");
        Path path = Path.of(set.fileName());
        try {
            CounterSet.Local local = set.newLocal();
            local.add(Counter.PORT_XMIT_PACKETS, 7);
            set.add(Counter.PORT_XMIT_PACKETS, 3);
            set.increment(Counter.LINK_DOWNED);
            List<CounterFile.Published> mine = CounterFile.read(ProcessHandle.current().pid()).stream()
                .filter(p -> p.path().equals(path)).toList();
            assertEquals(1, mine.size());
            assertEquals("test dev/1", mine.getFirst().device());
            assertEquals(10L, mine.getFirst().counters().get("port_xmit_packets"));
            assertEquals(1L, mine.getFirst().counters().get("link_downed"));
            assertEquals(0L, mine.getFirst().counters().get("port_rcv_data"));
        } finally {
            set.close();
        }
        assertFalse(Files.exists(path), "deleted on close");
    }

    @Test
    void shouldRemoveFilesOfProcessesThatAreGone() throws Exception {
        Process gone = new ProcessBuilder("true").start();
        gone.waitFor();
        Path stale = CounterFile.directory().resolve("jccl-counters." + gone.pid() + ".shm0.1"
            + CounterFile.NAMESPACE_TAG);
        Files.write(stale, new byte[16]);
        CounterFile.read(-1);
        assertFalse(Files.exists(stale));
        assertTrue(CounterFile.read(gone.pid()).isEmpty());
    }

    @Test
    void shouldRemoveOnlyTheGivenProcessFilesOrThoseOfDeadProcesses() throws Exception {
        Process gone = new ProcessBuilder("true").start();
        gone.waitFor();
        java.nio.file.Path dir = java.nio.file.Files.createTempDirectory("jccl-counters");
        long me = ProcessHandle.current().pid();
        Path mine = dir.resolve("jccl-counters." + me + ".tcp0.1" + CounterFile.NAMESPACE_TAG);
        Path dead = dir.resolve("jccl-counters." + gone.pid() + ".tcp0.1" + CounterFile.NAMESPACE_TAG);
        Files.write(mine, new byte[16]);
        Files.write(dead, new byte[16]);
        CounterFile.removeFiles(dir, -1); // the reaper: dead processes only
        assertTrue(Files.exists(mine));
        assertFalse(Files.exists(dead));
        CounterFile.removeFiles(dir, me); // the exit hook: this process's files
        assertFalse(Files.exists(mine));
    }

    /**
     * A pid means something only in its PID namespace: files of another namespace (containers sharing /dev/shm),
     * whose pids look dead here or collide with ours, and untagged files of earlier versions are never removed.
     */
    @Test
    void shouldLeaveTheFilesOfOtherPidNamespacesAlone() throws Exception {
        Process gone = new ProcessBuilder("true").start();
        gone.waitFor();
        Path dir = Files.createTempDirectory("jccl-counters");
        long me = ProcessHandle.current().pid();
        String otherNamespace = CounterFile.namespaceTag("pid:[1]").equals(CounterFile.NAMESPACE_TAG)
            ? CounterFile.namespaceTag("pid:[2]") : CounterFile.namespaceTag("pid:[1]");
        Path foreignDeadLooking = dir.resolve("jccl-counters." + gone.pid() + ".shm0.1" + otherNamespace);
        Path foreignSamePid = dir.resolve("jccl-counters." + me + ".shm0.1" + otherNamespace);
        Path earlierVersion = dir.resolve("jccl-counters." + gone.pid() + ".shm0.1");
        for (Path p : List.of(foreignDeadLooking, foreignSamePid, earlierVersion)) {
            Files.write(p, new byte[16]);
        }
        CounterFile.removeFiles(dir, -1);
        CounterFile.removeFiles(dir, me);
        for (Path p : List.of(foreignDeadLooking, foreignSamePid, earlierVersion)) {
            assertTrue(Files.exists(p), p + " was removed");
            Files.delete(p);
        }
        Files.delete(dir);
    }
}
