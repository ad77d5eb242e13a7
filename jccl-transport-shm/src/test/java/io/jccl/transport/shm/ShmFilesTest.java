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
            return files.filter(p -> p.getFileName().toString().startsWith("jccl-" + ShmFiles.selfPid() + "-"))
                .toList();
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
            assertTrue(path.getFileName().toString().matches("jccl-\\d+-\\d+-[0-9a-f]{16}-(ctx|qp|mr)"), path.toString());
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
    void fileNamesParseExactly() {
        String id = "0123456789abcdef";
        ShmFiles.ParsedName n = ShmFiles.parseName("jccl-4242-98765-" + id + "-qp");
        assertEquals(new ShmFiles.ParsedName(4242, 98765, "qp"), n);
        assertTrue(ShmFiles.isValidName("jccl-1-0-" + id + "-ctx", ShmFiles.CONTEXT));
        assertTrue(ShmFiles.isValidName("jccl-1234567890-12345678901234567-" + id + "-mr", ShmFiles.REGION));
        assertFalse(ShmFiles.isValidName("jccl-1-2-" + id + "-qp", ShmFiles.CONTEXT), "other kind");
        assertEquals(98765, ShmFiles.ownerStartTime("jccl-4242-98765-" + id + "-qp"));
        assertEquals(4242, ShmFiles.ownerPid("jccl-4242-98765-" + id + "-qp"));
        for (String bad : List.of("", "jccl-", "jccl--1-" + id + "-qp", "jccl-1--" + id + "-qp",
            "jccl-12345678901-1-" + id + "-qp", // pid of 11 digits
            "jccl-1-123456789012345678901-" + id + "-qp", // start time of 21 digits
            "jccl-1-99999999999999999999-" + id + "-qp", // 20 digits beyond a long
            "jccl-1-2-0123456789ABCDEF-qp", "jccl-1-2-0123456789abcde-qp", "jccl-1-2-0123456789abcdef0-qp",
            "jccl-1-2-" + id + "-", "jccl-1-2-" + id + "-qpx", "jccl-1-2-" + id + "-q", "jccl-1-2-" + id,
            "jccl-1-2-" + id + "-../qp", "xjccl-1-2-" + id + "-qp", "jccl-+1-2-" + id + "-qp",
            "jccl-\u0661-2-" + id + "-qp")) { // a non-ASCII digit
            assertEquals(null, ShmFiles.parseName(bad), bad);
            assertEquals(-1, ShmFiles.ownerPid(bad), bad);
            assertFalse(ShmFiles.isValidName(bad, ShmFiles.QUEUE_PAIR), bad);
        }
    }

    private static Endpoint withAddress(Endpoint e, String address) {
        return new Endpoint(e.provider(), e.device(), e.queuePairNumber(), e.packetSequenceNumber(), address);
    }
}
