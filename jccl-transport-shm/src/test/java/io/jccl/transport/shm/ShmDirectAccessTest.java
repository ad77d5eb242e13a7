package io.jccl.transport.shm;

import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.VerbsException;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

import static io.jccl.transport.shm.ShmTestSupport.ALL_REMOTE;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** mapRemote: load/store views of the peer's memory, granted under the one-sided checks. */
class ShmDirectAccessTest {
    private ShmTestSupport.Side a;
    private ShmTestSupport.Side b;

    @BeforeEach
    void setUp() {
        a = new ShmTestSupport.Side();
        b = new ShmTestSupport.Side();
        ShmTestSupport.connect(a, b);
    }

    @AfterEach
    void tearDown() {
        a.close();
        b.close();
    }

    @Test
    void shouldGiveLoadStoreAccessToThePeersRegion() {
        assertTrue(a.qp.supportsDirectAccess());
        MemoryRegion remote = b.pd.allocateMemory(1 << 16, ALL_REMOTE);
        MemorySegment view = a.qp.mapRemote(remote.address() + 4096, 8192, remote.rkey(), true);
        assertEquals(8192, view.byteSize());
        view.set(ValueLayout.JAVA_LONG, 16, 0xABCDL);
        assertEquals(0xABCDL, remote.segment().get(ValueLayout.JAVA_LONG, 4096 + 16));
        remote.segment().set(ValueLayout.JAVA_INT, 4096 + 100, 77);
        MemorySegment readOnly = a.qp.mapRemote(remote.address() + 4096, 8192, remote.rkey(), false);
        assertTrue(readOnly.isReadOnly());
        assertEquals(77, readOnly.get(ValueLayout.JAVA_INT, 100));
        assertThrows(IllegalArgumentException.class, () -> readOnly.set(ValueLayout.JAVA_INT, 0, 1));
    }

    @Test
    void shouldDenyViewsThatFailTheChecks() {
        MemoryRegion readable = b.pd.allocateMemory(4096, AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_READ);
        assertDenied(() -> a.qp.mapRemote(readable.address(), 64, readable.rkey(), true));
        a.qp.mapRemote(readable.address(), 64, readable.rkey(), false);
        assertDenied(() -> a.qp.mapRemote(readable.address(), 64, readable.rkey() ^ 1, false));
        assertDenied(() -> a.qp.mapRemote(readable.address() + 4000, 97, readable.rkey(), false));
        assertDenied(() -> a.qp.mapRemote(readable.address() - 8, 16, readable.rkey(), false));
        try (Arena arena = Arena.ofShared()) {
            MemoryRegion privateRegion = b.pd.registerMemory(arena.allocate(4096), AccessFlag.LOCAL_WRITE,
                AccessFlag.REMOTE_READ);
            assertDenied(() -> a.qp.mapRemote(privateRegion.address(), 64, privateRegion.rkey(), false));
            privateRegion.close();
        }
        int rkey = readable.rkey();
        long address = readable.address();
        readable.close();
        assertDenied(() -> a.qp.mapRemote(address, 64, rkey, false));
    }

    @Test
    void shouldHonourThePeersQueuePairAccessFlags() {
        ShmTestSupport.Side c = new ShmTestSupport.Side();
        ShmTestSupport.Side d = new ShmTestSupport.Side();
        try {
            c.qp.modify(QueuePairAttributes.toInit(AccessFlag.REMOTE_READ));
            d.qp.modify(QueuePairAttributes.toInit());
            c.qp.modify(QueuePairAttributes.toReadyToReceive(d.qp.localEndpoint()));
            d.qp.modify(QueuePairAttributes.toReadyToReceive(c.qp.localEndpoint()));
            MemoryRegion region = c.pd.allocateMemory(4096, ALL_REMOTE);
            assertDenied(() -> d.qp.mapRemote(region.address(), 64, region.rkey(), true));
            d.qp.mapRemote(region.address(), 64, region.rkey(), false);
        } finally {
            c.close();
            d.close();
        }
    }

    private static void assertDenied(Runnable call) {
        VerbsException e = assertThrows(VerbsException.class, call::run);
        assertEquals(VerbsException.Reason.PERMISSION_DENIED, e.reason(), e.getMessage());
    }
}
