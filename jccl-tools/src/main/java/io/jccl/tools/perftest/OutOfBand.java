package io.jccl.tools.perftest;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.SocketTimeoutException;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;

/**
 * The out-of-band TCP channel between perf client and server, as perftest's port-18515 exchange: the client sends
 * its test plan, both sides send their queue pairs' connection records (endpoint, rkey, address), and the channel
 * then carries the barriers between sizes and the final "done". Lines of ASCII text.
 *
 * <p>While a test runs, the loops call {@link #peerGone()} every few milliseconds (see {@link #due()}): a
 * non-blocking read that notices a closed connection or an error line, so a side whose peer died stops with an
 * error instead of waiting forever. It allocates nothing unless a line arrived.
 */
public final class OutOfBand implements AutoCloseable {
    private static final long CHECK_INTERVAL_NS = 20_000_000L;

    private final SocketChannel channel;
    private final ByteBuffer buffer = ByteBuffer.allocate(8192);
    private final StringBuilder partial = new StringBuilder();
    private final ArrayDeque<String> lines = new ArrayDeque<>();
    private long lastCheckNs = System.nanoTime();
    private boolean closedByPeer;

    private OutOfBand(SocketChannel channel) throws IOException {
        this.channel = channel;
        channel.setOption(StandardSocketOptions.TCP_NODELAY, true);
        channel.configureBlocking(true);
    }

    /**
     * Server side: listens on {@code port} (all interfaces) and accepts one client.
     *
     * @param acceptTimeoutMs 0 waits forever
     */
    public static OutOfBand accept(int port, int acceptTimeoutMs) throws IOException {
        try (ServerSocketChannel server = ServerSocketChannel.open()) {
            server.setOption(StandardSocketOptions.SO_REUSEADDR, true);
            try {
                server.bind(new InetSocketAddress(port));
            } catch (java.net.BindException e) {
                throw new IOException("cannot listen on port " + port + " (" + e.getMessage()
                    + "; another perf server? choose one with -p)", e);
            }
            server.socket().setSoTimeout(acceptTimeoutMs);
            try {
                // The socket adaptor honours the timeout, the channel's accept() would not.
                return new OutOfBand(server.socket().accept().getChannel());
            } catch (SocketTimeoutException e) {
                throw new IOException("no client connected to port " + port + " within " + acceptTimeoutMs + " ms");
            }
        }
    }

    /** Client side: connects to {@code host:port}, retrying until {@code timeoutMs} passed (the server may start late). */
    public static OutOfBand connect(String host, int port, int timeoutMs) throws IOException {
        return connect(host, port, timeoutMs, () -> false);
    }

    /**
     * {@link #connect(String, int, int)} that stops retrying as soon as {@code giveUp} says so (local mode: the
     * server process died before listening).
     */
    public static OutOfBand connect(String host, int port, int timeoutMs, java.util.function.BooleanSupplier giveUp)
        throws IOException {
        long deadline = System.nanoTime() + timeoutMs * 1_000_000L;
        IOException last = null;
        InetAddress address = InetAddress.getByName(host);
        do {
            SocketChannel channel = SocketChannel.open();
            try {
                channel.socket().connect(new InetSocketAddress(address, port), Math.max(1, timeoutMs));
                return new OutOfBand(channel);
            } catch (IOException e) {
                last = e;
                channel.close();
                if (giveUp.getAsBoolean()) {
                    break;
                }
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
        ByteBuffer bytes = ByteBuffer.wrap((line + "\n").getBytes(StandardCharsets.US_ASCII));
        while (bytes.hasRemaining()) {
            channel.write(bytes);
        }
    }

    /** Reads one line, waiting as long as it takes. */
    public String receive() throws IOException {
        while (lines.isEmpty()) {
            if (closedByPeer) {
                throw new IOException("peer closed the out-of-band connection");
            }
            fill(true);
        }
        return lines.poll();
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

    /** Non-blocking: the next line if one has fully arrived (it stays unread until {@link #receive()}), else null. */
    public String poll() throws IOException {
        if (lines.isEmpty() && !closedByPeer) {
            fill(false);
        }
        return lines.peek();
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

    /** Whether the peer closed the connection (it exited or failed); throws when it sent an error line. */
    public boolean peerGone() throws IOException {
        String line = poll();
        if (line != null && line.startsWith("error ")) {
            throw new IOException("peer failed: " + line.substring(6));
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

    /** Reads what is there (or, blocking, until a line is complete) and queues the complete lines. */
    private void fill(boolean block) throws IOException {
        if (!block) {
            channel.configureBlocking(false);
        }
        try {
            while (lines.isEmpty()) {
                buffer.clear();
                int n;
                try {
                    n = channel.read(buffer);
                } catch (IOException e) {
                    closedByPeer = true;
                    return;
                }
                if (n < 0) {
                    closedByPeer = true;
                    return;
                }
                if (n == 0) {
                    return;
                }
                buffer.flip();
                while (buffer.hasRemaining()) {
                    char c = (char) buffer.get();
                    if (c == '\n') {
                        lines.add(partial.toString());
                        partial.setLength(0);
                    } else {
                        partial.append(c);
                    }
                }
                if (!block) {
                    return;
                }
            }
        } finally {
            if (!block) {
                channel.configureBlocking(true);
            }
        }
    }

    /** The remote host as connected. */
    public String peerHost() {
        return channel.socket().getInetAddress().getHostAddress();
    }

    @Override
    public void close() {
        try {
            channel.close();
        } catch (IOException ignored) {
            // closing anyway
        }
    }
}
