package io.jccl.conformance;

import io.jccl.verbs.Endpoint;
import io.jccl.verbs.WorkCompletionOpcode;
import io.jccl.verbs.WorkCompletionStatus;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Checks the kit's own plumbing (patterns and the peer protocol's encodings) without any provider. */
class KitSelfTest {
    @Test
    void shouldFindTheFirstByteThatBreaksThePattern() {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment segment = arena.allocate(1003);
            Patterns.fill(segment, 3, 1000, 7);
            assertEquals(-1, Patterns.firstMismatch(segment, 3, 1000, 7));
            assertArrayEquals(Patterns.bytes(7, 1000), segment.asSlice(3, 1000).toArray(
                ValueLayout.JAVA_BYTE));
            segment.set(ValueLayout.JAVA_BYTE, 3 + 517, (byte) ~Patterns.byteAt(7, 517));
            assertEquals(517, Patterns.firstMismatch(segment, 3, 1000, 7));
            segment.set(ValueLayout.JAVA_BYTE, 3 + 517, Patterns.byteAt(7, 517));
            segment.set(ValueLayout.JAVA_BYTE, 3 + 999, (byte) ~Patterns.byteAt(7, 999));
            assertEquals(999, Patterns.firstMismatch(segment, 3, 1000, 7), "a mismatch in the unaligned tail");
            assertEquals(-1, Patterns.firstMismatch(segment, 3, 999, 7), "outside the compared range");
        }
    }

    @Test
    void shouldFailFastAndLeaveNoProcessWhenThePeerCannotOpenItsDevice() {
        long childrenBefore = ProcessHandle.current().children().count();
        IllegalStateException e = assertThrows(IllegalStateException.class,
            () -> RemotePeer.launch("no-such-device-for-the-kit", List.of()));
        assertTrue(e.getMessage().contains("did not start"), e.getMessage());
        assertTrue(e.getMessage().contains("no-such-device-for-the-kit"), "the child's reason is passed on: "
            + e.getMessage());
        assertEquals(childrenBefore, ProcessHandle.current().children().filter(ProcessHandle::isAlive).count(),
            "the failed child is gone");
    }

    @Test
    void shouldRoundTripProtocolTokens() {
        Completion c = new Completion(-5, WorkCompletionStatus.REM_ACCESS_ERR, WorkCompletionOpcode.RECV_RDMA_WITH_IMM,
            42, 0xCAFEBABE, true, 0xABCDEF, 0x123);
        assertEquals(c, Completion.decode(c.encode()));
        PeerSide.QueuePairSpec spec = new PeerSide.QueuePairSpec(1, 2, 3, 4, 5, true);
        assertEquals(spec, PeerSide.QueuePairSpec.decode(spec.encode()));
        PeerSide.ConnectionSpec connection = new PeerSide.ConnectionSpec(14, 1, 2, 3, 4);
        assertEquals(connection, PeerSide.ConnectionSpec.decode(connection.encode()));
        assertEquals(List.of(new PeerSide.PeerSge(1, 2, 3), new PeerSide.PeerSge(4, 5, 6)),
            PeerProcess.sges("1:2:3,4:5:6"));
        assertEquals(List.of(), PeerProcess.sges("-"));
        assertArrayEquals(new byte[] {1, 2, 3}, PeerProcess.unb64(PeerProcess.b64(new byte[] {1, 2, 3})));
        assertArrayEquals(new byte[0], PeerProcess.unb64(PeerProcess.b64(new byte[0])));
        Endpoint endpoint = new Endpoint("shm", "shm0", 0x123456, 0x654321, "host/with spaces:and:colons");
        assertEquals(endpoint, Endpoint.decode(endpoint.encode()), "endpoints travel as one token");
        assertEquals(-1, endpoint.encode().indexOf(' '));
    }
}
