package io.jccl.collectives.store;

import java.io.IOException;
import java.net.ConnectException;
import java.net.InetSocketAddress;
import java.net.Socket;

/**
 * Connects a client socket to a store and refuses a connection to itself. A client that dials a port on this host
 * before the server listens there (ranks start together; rank 0's server comes up some milliseconds to seconds
 * later) can get, from the kernel's choice of its ephemeral source port, exactly that port: TCP's simultaneous open
 * then connects the socket to itself. It would read its own bytes back as the server's answers, and hold the port, so
 * the server could not bind it. Such a connection counts as "nothing listens yet".
 */
public final class SelfConnection {
    private SelfConnection() {
    }

    /** {@link Socket#connect(java.net.SocketAddress, int)}, then {@link #check}. */
    static void connect(Socket s, InetSocketAddress address, int timeoutMs) throws IOException {
        s.connect(address, timeoutMs);
        check(s);
    }

    /** Whether the connected socket {@code s} is connected to itself (so nothing listens at its remote address). */
    public static boolean isSelf(Socket s) {
        return s.isConnected() && s.getLocalPort() == s.getPort() && s.getLocalAddress().equals(s.getInetAddress());
    }

    /** Throws ConnectException (the socket closed) when {@code s} is connected to itself. */
    static void check(Socket s) throws IOException {
        if (isSelf(s)) {
            String where = s.getInetAddress().getHostAddress() + ":" + s.getPort();
            s.close();
            throw new ConnectException("connected to itself at " + where + " (nothing listens there yet: the "
                + "kernel gave this client the server's port as its own)");
        }
    }
}
