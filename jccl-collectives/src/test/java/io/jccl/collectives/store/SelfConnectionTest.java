package io.jccl.collectives.store;

import org.junit.jupiter.api.Test;

import java.net.ConnectException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A client that dials a port nobody listens on yet can be connected to itself by TCP's simultaneous open when the
 * kernel hands it that port as its own; it must count as "not listening", not as the server. The test makes such a
 * connection on purpose (a socket bound to a port, connected to the same port).
 */
class SelfConnectionTest {
    @Test
    void aSocketConnectedToItselfIsRefused() throws Exception {
        InetAddress loopback = InetAddress.getLoopbackAddress();
        try (Socket s = new Socket()) {
            s.bind(new InetSocketAddress(loopback, 0));
            InetSocketAddress itself = new InetSocketAddress(loopback, s.getLocalPort());
            s.connect(itself, 1000); // simultaneous open with itself: Linux connects it
            assertTrue(SelfConnection.isSelf(s));
            ConnectException e = assertThrows(ConnectException.class, () -> SelfConnection.check(s));
            assertTrue(e.getMessage().contains("connected to itself"), e.getMessage());
            assertTrue(s.isClosed(), "the port is given back for the server");
        }
    }

    @Test
    void aConnectionToAListenerIsKept() throws Exception {
        InetAddress loopback = InetAddress.getLoopbackAddress();
        try (ServerSocket server = new ServerSocket(0, 1, loopback); Socket s = new Socket()) {
            SelfConnection.connect(s, new InetSocketAddress(loopback, server.getLocalPort()), 1000);
            assertFalse(SelfConnection.isSelf(s));
            assertFalse(s.isClosed());
        }
    }
}
