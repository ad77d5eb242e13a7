package io.jccl.tools.perftest;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.charset.StandardCharsets;

/**
 * The out-of-band TCP channel between perf client and server, as perftest's port-18515 exchange: the client sends
 * its test plan, both sides send their queue pairs' connection records (endpoint, rkey, address), and the channel
 * then carries the barriers between sizes and the final "done". Lines of UTF-8 text.
 *
 * <p>While a test runs, the loops call {@link #peerGone()} every few milliseconds, so a side whose peer died
 * stops with an error instead of waiting forever.
 */
public final class OutOfBand implements AutoCloseable {
    private static final long CHECK_INTERVAL_NS = 20_000_000L;
    private static final long EOF_PROBE_INTERVAL_NS = 1_000_000_000L;

    private final Socket socket;
    private final InputStream in;
    private final OutputStream out;
    private final StringBuilder partial = new StringBuilder();
    private final byte[] one = new byte[1];
    private String pending;
    private long lastCheckNs = System.nanoTime();
    private long lastProbeNs = System.nanoTime();
    private boolean closedByPeer;

    private OutOfBand(Socket socket) throws IOException {
        this.socket = socket;
        socket.setTcpNoDelay(true);
        this.in = socket.getInputStream();
        this.out = socket.getOutputStream();
    }

    /**
     * Server side: listens on {@code port} (all interfaces) and accepts one client.
     *
     * @param acceptTimeoutMs 0 waits forever
     * @param onListening called once the socket listens (local mode starts the client then)
     */
    public static OutOfBand accept(int port, int acceptTimeoutMs, Runnable onListening) throws IOException {
        try (ServerSocket server = new ServerSocket()) {
            server.setReuseAddress(true);
            server.bind(new InetSocketAddress(port));
            server.setSoTimeout(acceptTimeoutMs);
            if (onListening != null) {
                onListening.run();
            }
            try {
                return new OutOfBand(server.accept());
            } catch (SocketTimeoutException e) {
                throw new IOException("no client connected to port " + port + " within " + acceptTimeoutMs + " ms");
            }
        }
    }

    /** Client side: connects to {@code host:port}, retrying until {@code timeoutMs} passed (the server may start late). */
    public static OutOfBand connect(String host, int port, int timeoutMs) throws IOException {
        long deadline = System.nanoTime() + timeoutMs * 1_000_000L;
        IOException last = null;
        InetAddress address = InetAddress.getByName(host);
        do {
            Socket socket = new Socket();
            try {
                socket.connect(new InetSocketAddress(address, port), Math.max(1, timeoutMs));
                return new OutOfBand(socket);
            } catch (IOException e) {
                last = e;
                socket.close();
                try {
                    Thread.sleep(50);
                } catch (InterruptedException ie) {
                    Thread.currentThread().interrupt();
                    break;
                }
            }
        } while (System.nanoTime() < deadline);
        throw new IOException("Couldn't connect to " + host + ":" + port + " (is the server running? "
            + (last == null ? "" : last.getMessage()) + ")", last);
    }

    /** Sends one line. */
    public void send(String line) throws IOException {
        out.write((line + "\n").getBytes(StandardCharsets.UTF_8));
        out.flush();
    }

    /** Reads one line, waiting as long as it takes. */
    public String receive() throws IOException {
        if (pending != null) {
            String line = pending;
            pending = null;
            return line;
        }
        socket.setSoTimeout(0);
        String line = readLine();
        if (line == null) {
            throw new IOException("peer closed the out-of-band connection");
        }
        return line;
    }

    /** Reads one line and checks it is {@code expected}. */
    public void expect(String expected) throws IOException {
        String line = receive();
        if (!line.equals(expected)) {
            if (line.startsWith("error ")) {
                throw new IOException("peer failed: " + line.substring(6));
            }
            throw new IOException("out-of-band protocol: expected '" + expected + "', got '" + line + "'");
        }
    }

    /** Both sides send {@code token} and wait for the other's. */
    public void barrier(String token) throws IOException {
        send(token);
        expect(token);
    }

    /**
     * Non-blocking: the next line if one has fully arrived, else null. Rate-limited by the caller's loop:
     * call it from polling loops through {@link #due()}.
     */
    public String poll() throws IOException {
        if (pending != null) {
            return pending;
        }
        while (in.available() > 0) {
            int b = in.read();
            if (b < 0) {
                closedByPeer = true;
                return null;
            }
            if (b == '\n') {
                pending = partial.toString();
                partial.setLength(0);
                return pending;
            }
            partial.append((char) b);
        }
        return null;
    }

    /** Whether enough time passed since the last check for a loop to call {@link #peerGone()} again. */
    public boolean due() {
        long now = System.nanoTime();
        if (now - lastCheckNs < CHECK_INTERVAL_NS) {
            return false;
        }
        lastCheckNs = now;
        return true;
    }

    /**
     * Whether the peer closed the connection (it exited or failed). Checks arrived lines without blocking, and
     * about once a second probes for end-of-stream with a 1 ms read.
     */
    public boolean peerGone() throws IOException {
        if (closedByPeer) {
            return true;
        }
        String line = poll();
        if (line != null && line.startsWith("error ")) {
            throw new IOException("peer failed: " + line.substring(6));
        }
        long now = System.nanoTime();
        if (line == null && now - lastProbeNs > EOF_PROBE_INTERVAL_NS) {
            lastProbeNs = now;
            socket.setSoTimeout(1);
            try {
                int n = in.read(one, 0, 1);
                if (n < 0) {
                    closedByPeer = true;
                } else if (n == 1) {
                    if (one[0] == '\n') {
                        pending = partial.toString();
                        partial.setLength(0);
                    } else {
                        partial.append((char) one[0]);
                    }
                }
            } catch (SocketTimeoutException ignored) {
                // nothing arrived: the peer is alive
            } catch (IOException e) {
                closedByPeer = true;
            } finally {
                socket.setSoTimeout(0);
            }
        }
        return closedByPeer;
    }

    /** Sends an error line so the peer stops with our message instead of a bare disconnect (best effort). */
    public void fail(String message) {
        try {
            send("error " + message.replace('\n', ' '));
        } catch (IOException ignored) {
            // the peer is gone already
        }
    }

    private String readLine() throws IOException {
        while (true) {
            int b = in.read();
            if (b < 0) {
                closedByPeer = true;
                return null;
            }
            if (b == '\n') {
                String line = partial.toString();
                partial.setLength(0);
                return line;
            }
            partial.append((char) b);
        }
    }

    /** The remote host as connected. */
    public String peerHost() {
        return socket.getInetAddress().getHostAddress();
    }

    @Override
    public void close() {
        try {
            socket.close();
        } catch (IOException ignored) {
            // closing anyway
        }
    }
}
