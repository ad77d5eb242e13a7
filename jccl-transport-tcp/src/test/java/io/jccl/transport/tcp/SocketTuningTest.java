package io.jccl.transport.tcp;

import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/** Finding a SocketChannel's descriptor through /proc and setting TCP_NOTSENT_LOWAT on it. */
class SocketTuningTest {
    private static final boolean LINUX = System.getProperty("os.name").toLowerCase().contains("linux");

    @Test
    void shouldFormatAddressesAsProcNetTcpDoes() throws Exception {
        InetSocketAddress a = new InetSocketAddress(InetAddress.getByName("10.77.0.1"), 443);
        assertEquals("01004D0A:01BB", SocketTuning.procAddress(a, false));
        assertEquals("0000000000000000FFFF000001004D0A:01BB", SocketTuning.procAddress(a, true));
        InetSocketAddress v6 = new InetSocketAddress(InetAddress.getByName("::1"), 80);
        assertEquals("00000000000000000000000001000000:0050", SocketTuning.procAddress(v6, true));
    }

    @Test
    void shouldFindTheDescriptorsOfBothEndsAndSetTheLowWatermark() throws Throwable {
        assumeTrue(LINUX, "Linux /proc only");
        for (String host : new String[] {"127.0.0.1", "::1"}) {
            InetAddress address;
            try (ServerSocketChannel server = ServerSocketChannel.open()) {
                address = InetAddress.getByName(host);
                try {
                    server.bind(new InetSocketAddress(address, 0));
                } catch (java.io.IOException e) {
                    continue; // no IPv6 loopback here
                }
                try (SocketChannel client = SocketChannel.open(server.getLocalAddress());
                     SocketChannel accepted = server.accept()) {
                    int clientFd = SocketTuning.descriptorOf(client);
                    int acceptedFd = SocketTuning.descriptorOf(accepted);
                    assertTrue(clientFd >= 0, "no descriptor for the client end over " + host);
                    assertTrue(acceptedFd >= 0, "no descriptor for the accepted end over " + host);
                    assertNotEquals(clientFd, acceptedFd);
                    assertTrue(SocketTuning.setNotSentLowat(client, 96 * 1024));
                    assertEquals(96 * 1024, notSentLowat(clientFd), "the option did not reach the client's socket");
                    assertTrue(SocketTuning.setNotSentLowat(accepted, 64 * 1024));
                    assertEquals(64 * 1024, notSentLowat(acceptedFd));
                    assertEquals(96 * 1024, notSentLowat(clientFd), "set on the wrong socket");
                }
            }
        }
    }

    @Test
    void shouldTuneManyConnectionsOnTheTuningThread() throws Throwable {
        assumeTrue(LINUX, "Linux /proc only");
        int n = 40;
        try (ServerSocketChannel server = ServerSocketChannel.open()) {
            server.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
            java.util.List<SocketChannel> ends = new java.util.ArrayList<>();
            try {
                for (int i = 0; i < n; i++) {
                    ends.add(SocketChannel.open(server.getLocalAddress()));
                    ends.add(server.accept());
                }
                int[] fds = SocketTuning.descriptorsOf(ends);
                assertEquals(2 * n, java.util.Arrays.stream(fds).filter(fd -> fd >= 0).distinct().count(),
                    "every end of every connection has its own descriptor");
                java.util.List<java.util.concurrent.CompletableFuture<Boolean>> done = new java.util.ArrayList<>();
                for (SocketChannel end : ends) {
                    done.add(SocketTuning.setNotSentLowatLater(end, 80 * 1024));
                }
                for (var f : done) {
                    assertTrue(f.get(30, java.util.concurrent.TimeUnit.SECONDS), "an end was not tuned");
                }
                for (int fd : fds) {
                    assertEquals(80 * 1024, notSentLowat(fd));
                }
            } finally {
                for (SocketChannel end : ends) {
                    end.close();
                }
            }
        }
    }

    @Test
    void shouldNotFindAnUnconnectedChannel() throws Exception {
        try (SocketChannel unconnected = SocketChannel.open()) {
            assertEquals(-1, SocketTuning.descriptorOf(unconnected));
            assertFalse(SocketTuning.setNotSentLowat(unconnected, 4096));
        }
    }

    @Test
    void shouldLimitUnsentBytesOnVirtualInterfacesOnlyUnlessConfigured() {
        String property = "jccl.tcp.notsent.lowat";
        String saved = System.getProperty(property);
        try {
            System.clearProperty(property);
            assertEquals(TcpSettings.VIRTUAL_NOTSENT_LOWAT_BYTES, TcpSettings.notSentLowatBytes(true));
            assertEquals(0, TcpSettings.notSentLowatBytes(false));
            System.setProperty(property, "0");
            assertEquals(0, TcpSettings.notSentLowatBytes(true));
            System.setProperty(property, "65536");
            assertEquals(65536, TcpSettings.notSentLowatBytes(false));
        } finally {
            if (saved == null) {
                System.clearProperty(property);
            } else {
                System.setProperty(property, saved);
            }
        }
        assertFalse(TcpContext.isVirtualInterface(InetAddress.getLoopbackAddress()), "loopback is never limited");
    }

    /** getsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT). */
    private static int notSentLowat(int fd) throws Throwable {
        Linker linker = Linker.nativeLinker();
        MethodHandle getsockopt = linker.downcallHandle(linker.defaultLookup().find("getsockopt").orElseThrow(),
            FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT, ValueLayout.JAVA_INT,
                ValueLayout.JAVA_INT, ValueLayout.ADDRESS, ValueLayout.ADDRESS));
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment value = arena.allocate(ValueLayout.JAVA_INT);
            MemorySegment length = arena.allocate(ValueLayout.JAVA_INT);
            length.set(ValueLayout.JAVA_INT, 0, 4);
            int rc = (int) getsockopt.invokeExact(fd, 6, 25, value, length);
            assertEquals(0, rc);
            return value.get(ValueLayout.JAVA_INT, 0);
        }
    }
}
