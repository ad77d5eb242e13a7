package io.jccl.collectives.store;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.net.ConnectException;
import java.net.Inet4Address;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.NetworkInterface;
import java.net.Socket;
import java.net.SocketException;
import java.util.Collections;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The store's server listens where the job's store address points: a store for 127.0.0.1 cannot be reached through
 * the host's other addresses; all interfaces only when told so (0.0.0.0, JCCL_STORE_BIND).
 */
class TcpStoreBindTest {
    private static final long SECOND = TimeUnit.SECONDS.toNanos(1);

    @AfterEach
    void clear() {
        System.clearProperty("jccl.store.bind");
    }

    /** A non-loopback IPv4 address of this host, or null. */
    static InetAddress nonLoopbackIpv4() throws SocketException {
        for (NetworkInterface nic : Collections.list(NetworkInterface.getNetworkInterfaces())) {
            if (!nic.isUp() || nic.isLoopback()) {
                continue;
            }
            for (InetAddress a : Collections.list(nic.getInetAddresses())) {
                if (a instanceof Inet4Address && !a.isLoopbackAddress() && !a.isLinkLocalAddress()) {
                    return a;
                }
            }
        }
        return null;
    }

    private static InetAddress requireOtherAddress() throws SocketException {
        InetAddress other = nonLoopbackIpv4();
        Assumptions.assumeTrue(other != null, "skipped: this host has no non-loopback IPv4 address, so there is no "
            + "other interface to reach a loopback-only store through");
        return other;
    }

    private static boolean reachable(InetAddress address, int port) throws IOException {
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress(address, port), 2000);
            return true;
        } catch (ConnectException e) {
            return false;
        }
    }

    @Test
    void storeFor127001IsNotReachableOnOtherAddresses() throws Exception {
        InetAddress other = requireOtherAddress();
        try (TcpStore store = new TcpStore("127.0.0.1", 0, true, 5 * SECOND)) {
            int port = store.port();
            assertTrue(reachable(InetAddress.getByName("127.0.0.1"), port));
            assertTrue(!reachable(other, port), "a store for 127.0.0.1 answered on " + other.getHostAddress());
            store.setString("k", "v", SECOND);
            assertEquals("v", store.getString("k", SECOND));
        }
    }

    @Test
    void storeForAnInterfaceAddressListensThereOnly() throws Exception {
        InetAddress other = requireOtherAddress();
        try (TcpStore store = new TcpStore(other.getHostAddress(), 0, true, 5 * SECOND)) {
            int port = store.port();
            assertTrue(reachable(other, port));
            assertTrue(!reachable(InetAddress.getByName("127.0.0.1"), port),
                "a store for " + other.getHostAddress() + " answered on 127.0.0.1");
        }
    }

    @Test
    void allInterfacesOnlyWhenToldSo() throws Exception {
        InetAddress other = requireOtherAddress();
        System.setProperty("jccl.store.bind", "0.0.0.0"); // JCCL_STORE_BIND
        try (TcpStore store = new TcpStore("127.0.0.1", 0, true, 5 * SECOND)) {
            assertTrue(reachable(other, store.port()));
            assertTrue(reachable(InetAddress.getByName("127.0.0.1"), store.port()));
        }
        System.clearProperty("jccl.store.bind");
        try (TcpStore store = new TcpStore("0.0.0.0", 0, true, 5 * SECOND)) {
            assertTrue(reachable(other, store.port()));
        }
    }

    @Test
    void bindRules() throws Exception {
        assertTrue(TcpStoreServer.bindAddressFor("127.0.0.1", null).isLoopbackAddress());
        assertTrue(TcpStoreServer.bindAddressFor("localhost", null).isLoopbackAddress());
        assertTrue(TcpStoreServer.bindAddressFor("[::1]", null).isLoopbackAddress());
        assertNull(TcpStoreServer.bindAddressFor("0.0.0.0", null));
        assertNull(TcpStoreServer.bindAddressFor("127.0.0.1", "*"));
        assertEquals(InetAddress.getByName("127.0.0.2"), TcpStoreServer.bindAddressFor("10.1.2.3", "127.0.0.2"));
        // An address that is not this host's (a NAT or service address): all interfaces, the job must still work.
        InetAddress foreign = InetAddress.getByName("203.0.113.77"); // TEST-NET-3
        Assumptions.assumeTrue(NetworkInterface.getByInetAddress(foreign) == null, "203.0.113.77 is this host's");
        try (TcpStoreServer s = TcpStoreServer.forStore("203.0.113.77", 0, null, TcpStoreServer.Settings.defaults())) {
            assertTrue(s.localAddress().getAddress().isAnyLocalAddress(), String.valueOf(s.localAddress()));
        }
        try (TcpStoreServer s = TcpStoreServer.forStore("127.0.0.1", 0, null, TcpStoreServer.Settings.defaults())) {
            assertTrue(s.localAddress().getAddress().isLoopbackAddress(), String.valueOf(s.localAddress()));
        }
        assertThrows(StoreException.class, () -> TcpStoreServer.forStore("127.0.0.1", 0, "203.0.113.77",
            TcpStoreServer.Settings.defaults()).close(), "an explicit JCCL_STORE_BIND that cannot be bound fails");
    }
}
