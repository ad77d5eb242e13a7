package io.jccl.transport.shm;

import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.Endpoint;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.QueuePairState;
import io.jccl.verbs.VerbsException;
import org.junit.jupiter.api.Test;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.List;
import java.util.Set;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Files: names, modes, removal on close, and endpoint checks (host identity, token, file names). */
class ShmFilesTest {

    private static List<Path> ownFiles() throws Exception {
        try (Stream<Path> files = Files.list(ShmFiles.DIRECTORY)) {
            return files.filter(p -> p.getFileName().toString().startsWith("jccl-" + ShmFiles.selfPid() + "-")
                && !p.getFileName().toString().endsWith("-lock")).toList();
        }
    }

    @Test
    void shouldCreatePrivateFilesAndRemoveThemOnClose() throws Exception {
        Set<Path> before = Set.copyOf(ownFiles());
        ShmTestSupport.Side side = new ShmTestSupport.Side();
        MemoryRegion region = side.pd.allocateMemory(10_000, AccessFlag.LOCAL_WRITE);
        MemoryRegion second = side.pd.allocateMemory(100, AccessFlag.LOCAL_WRITE);
        List<Path> created = ownFiles().stream().filter(p -> !before.contains(p)).toList();
        assertEquals(4, created.size(), "ctx, qp and two mr files: " + created);
        for (Path path : created) {
            assertEquals("rw-------", PosixFilePermissions.toString(Files.getPosixFilePermissions(path)));
            assertTrue(path.getFileName().toString().matches("jccl-\\d+-[a-f][0-9a-f]{15}-[0-9a-f]{16}-(ctx|qp|mr)"),
                path.toString());
            assertEquals(ShmFiles.selfOwnerId(), ShmFiles.ownerId(path.getFileName().toString()));
        }
        Path secondFile = ((ShmMemoryRegion) second).path();
        second.close();
        assertFalse(Files.exists(secondFile), "deregistration unlinks the region file");
        assertTrue(Files.exists(((ShmMemoryRegion) region).path()));
        side.close();
        for (Path path : created) {
            assertFalse(Files.exists(path), "closed: " + path);
        }
    }

    @Test
    void shouldRefuseAnEndpointOfAnotherHost() {
        try (ShmTestSupport.Side a = new ShmTestSupport.Side(); ShmTestSupport.Side b = new ShmTestSupport.Side()) {
            Endpoint real = b.qp.localEndpoint();
            String foreign = real.address().replace(ShmFiles.bootId(), "00000000-1111-2222-3333-444444444444");
            Endpoint other = new Endpoint(real.provider(), real.device(), real.queuePairNumber(),
                real.packetSequenceNumber(), foreign);
            a.qp.modify(QueuePairAttributes.toInit());
            VerbsException e = assertThrows(VerbsException.class,
                () -> a.qp.modify(QueuePairAttributes.toReadyToReceive(other)));
            assertEquals(VerbsException.Reason.CONNECTION, e.reason());
            assertTrue(e.getMessage().contains("another host"), e.getMessage());
            assertEquals(QueuePairState.INIT, a.qp.state(), "a refused modify changes nothing");
            a.qp.modify(QueuePairAttributes.toReadyToReceive(real));
            assertEquals(QueuePairState.READY_TO_RECEIVE, a.qp.state());
        }
    }

    @Test
    void shouldRefuseForgedOrMalformedEndpoints() {
        try (ShmTestSupport.Side a = new ShmTestSupport.Side(); ShmTestSupport.Side b = new ShmTestSupport.Side()) {
            Endpoint real = b.qp.localEndpoint();
            a.qp.modify(QueuePairAttributes.toInit());
            String address = real.address();
            String badToken = address.substring(0, address.lastIndexOf('|') + 1) + "0123456789abcdef";
            VerbsException e = assertThrows(VerbsException.class, () -> a.qp.modify(
                QueuePairAttributes.toReadyToReceive(withAddress(real, badToken))));
            assertEquals(VerbsException.Reason.REJECTED, e.reason(), e.getMessage());
            String traversal = address.replaceFirst("\\|jccl-[^|]*-qp\\|", "|../../etc/passwd|");
            e = assertThrows(VerbsException.class, () -> a.qp.modify(
                QueuePairAttributes.toReadyToReceive(withAddress(real, traversal))));
            assertEquals(VerbsException.Reason.INVALID_ARGUMENT, e.reason(), e.getMessage());
            Endpoint tcp = new Endpoint("tcp", "tcp0", real.queuePairNumber(), 0, "127.0.0.1:1");
            assertThrows(VerbsException.class, () -> a.qp.modify(QueuePairAttributes.toReadyToReceive(tcp)));
            assertEquals(QueuePairState.INIT, a.qp.state());
        }
    }

    @Test
    void shouldReapOnlyOwnersProvablyDeadAndLeaveFilesOfTheEarlierFormat() throws Exception {
        String id = "0123456789abcdef";
        // The earlier format: only a pid to judge by, meaningless across PID namespaces. Left alone.
        Path legacy = ShmFiles.DIRECTORY.resolve("jccl-999999999-12345-" + id + "-mr");
        // No lock file: its owner created the lock before any file and only exit or a reaper removed it.
        Path orphan = ShmFiles.DIRECTORY.resolve("jccl-999999999-a000000000000001-" + id + "-mr");
        // A lock file nobody holds, and its file.
        Path unlocked = ShmFiles.DIRECTORY.resolve("jccl-999999999-a000000000000002-lock");
        Path ofUnlocked = ShmFiles.DIRECTORY.resolve("jccl-999999999-a000000000000002-" + id + "-qp");
        List<Path> created = List.of(legacy, orphan, unlocked, ofUnlocked);
        try {
            for (Path path : created) {
                Files.deleteIfExists(path);
                Files.createFile(path);
            }
            ShmFiles.reap();
            assertTrue(Files.exists(legacy), "a file of the earlier name format is never reaped");
            assertFalse(Files.exists(orphan), "a file whose owner's lock file is gone is reaped");
            assertFalse(Files.exists(unlocked), "an unlocked lock file is reaped");
            assertFalse(Files.exists(ofUnlocked), "the files of an owner whose lock is free are reaped");
        } finally {
            for (Path path : created) {
                Files.deleteIfExists(path);
            }
        }
    }

    @Test
    void fileNamesParseExactly() {
        String owner = "a123456789abcdef";
        String id = "0123456789abcdef";
        ShmFiles.ParsedName n = ShmFiles.parseName("jccl-4242-" + owner + "-" + id + "-qp");
        assertEquals(new ShmFiles.ParsedName(4242, 0xa123456789abcdefL, 0x0123456789abcdefL, "qp"), n);
        assertTrue(ShmFiles.isValidName("jccl-1-" + owner + "-" + id + "-ctx", ShmFiles.CONTEXT));
        assertTrue(ShmFiles.isValidName("jccl-1234567890-ffffffffffffffff-" + id + "-mr", ShmFiles.REGION));
        assertFalse(ShmFiles.isValidName("jccl-1-" + owner + "-" + id + "-qp", ShmFiles.CONTEXT), "other kind");
        assertEquals(0xa123456789abcdefL, ShmFiles.ownerId("jccl-4242-" + owner + "-" + id + "-qp"));
        assertEquals(4242, ShmFiles.ownerPid("jccl-4242-" + owner + "-" + id + "-qp"));
        assertEquals(new ShmFiles.ParsedName(7, 0xa123456789abcdefL, 0, "lock"),
            ShmFiles.parseName("jccl-7-" + owner + "-lock"));
        assertFalse(ShmFiles.isValidName("jccl-7-" + owner + "-lock", ShmFiles.CONTEXT), "a lock is no endpoint file");
        assertEquals(ShmFiles.lockName(7, 0xa123456789abcdefL), "jccl-7-" + owner + "-lock");
        assertEquals("jccl-7-" + owner + "-" + id + "-mr", ShmFiles.name(7, 0xa123456789abcdefL, 0x0123456789abcdefL,
            ShmFiles.REGION));
        for (int i = 0; i < 100; i++) {
            assertTrue(Long.toHexString(OwnerLock.newOwnerId()).charAt(0) >= 'a', "owner ids start with a letter");
        }
        for (String bad : List.of("", "jccl-", "jccl--" + owner + "-" + id + "-qp", "jccl-1--" + id + "-qp",
            "jccl-12345678901-" + owner + "-" + id + "-qp", // pid of 11 digits
            "jccl-1-98765-" + id + "-qp", // the earlier format: a decimal start time
            "jccl-1-1234567890123456-" + id + "-qp", // the earlier format with 16 digits
            "jccl-1-0123456789abcdef-" + id + "-qp", // owner starting with a digit
            "jccl-1-A123456789ABCDEF-" + id + "-qp", "jccl-1-a123456789abcde-" + id + "-qp",
            "jccl-1-" + owner + "-0123456789ABCDEF-qp", "jccl-1-" + owner + "-0123456789abcde-qp",
            "jccl-1-" + owner + "-0123456789abcdef0-qp", "jccl-1-" + owner + "-" + id + "-",
            "jccl-1-" + owner + "-" + id + "-qpx", "jccl-1-" + owner + "-" + id + "-lock",
            "jccl-1-" + owner + "-" + id, "jccl-1-" + owner + "-" + id + "-../qp", "jccl-1-" + owner + "-locks",
            "xjccl-1-" + owner + "-" + id + "-qp", "jccl-+1-" + owner + "-" + id + "-qp",
            "jccl-counters.12.shm0.1", "jccl-\u0661-" + owner + "-" + id + "-qp")) { // a non-ASCII digit
            assertEquals(null, ShmFiles.parseName(bad), bad);
            assertEquals(-1, ShmFiles.ownerPid(bad), bad);
            assertFalse(ShmFiles.isValidName(bad, ShmFiles.QUEUE_PAIR), bad);
        }
    }

    private static Endpoint withAddress(Endpoint e, String address) {
        return new Endpoint(e.provider(), e.device(), e.queuePairNumber(), e.packetSequenceNumber(), address);
    }
}
