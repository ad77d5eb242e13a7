package io.jccl.collectives.store;

import java.io.ByteArrayOutputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.util.concurrent.TimeUnit;

/**
 * Raw bytes against a store server, without {@link TcpStore}: the wire formats of protocol 1 (the old one: a magic,
 * then requests with unchecked lengths) and protocol 2 (length-prefixed requests after a handshake), spelled out
 * here rather than taken from the main code, plus what the process holds (threads, descriptors, heap).
 */
final class Hostile {
    static final int MAGIC_V1 = 0x4A53_5431; // "JST1"
    static final int MAGIC_V2 = 0x4A53_5432; // "JST2"
    /** Bytes of protocol 2's server hello without authentication: status, magic, flag, nonce, 4 ints, a long. */
    static final int SERVER_HELLO_BYTES = 1 + 4 + 1 + 16 + 16 + 8;
    static final byte SET = 1;
    static final byte GET = 2;
    static final byte ADD = 3;
    static final byte WAIT = 4;
    static final byte CAS = 5;
    static final byte DELETE = 6;
    static final byte CHECK = 7;

    private Hostile() {
    }

    static Socket connect(int port) throws IOException {
        Socket s = new Socket();
        s.connect(new InetSocketAddress("127.0.0.1", port), 2000);
        s.setTcpNoDelay(true);
        return s;
    }

    /** Bytes built with a DataOutputStream. */
    interface Body {
        void write(DataOutputStream o) throws IOException;
    }

    static byte[] bytes(Body body) {
        ByteArrayOutputStream b = new ByteArrayOutputStream();
        try (DataOutputStream o = new DataOutputStream(b)) {
            body.write(o);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return b.toByteArray();
    }

    /** Protocol 2's client hello: magic and a nonce. */
    static byte[] helloV2() {
        return bytes(o -> {
            o.writeInt(MAGIC_V2);
            o.write(new byte[16]);
        });
    }

    /** A protocol-2 request: its length, then the request. */
    static byte[] frame(Body request) {
        byte[] r = bytes(request);
        return bytes(o -> {
            o.writeInt(r.length);
            o.write(r);
        });
    }

    static void send(Socket s, byte[]... parts) throws IOException {
        for (byte[] p : parts) {
            s.getOutputStream().write(p);
        }
        s.getOutputStream().flush();
    }

    /** What arrives until the server closes the connection (EOF or reset); null when it is still open after {@code timeoutMs}. */
    static byte[] readUntilEof(Socket s, long timeoutMs) throws IOException {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMs);
        ByteArrayOutputStream got = new ByteArrayOutputStream();
        InputStream in = s.getInputStream();
        byte[] buf = new byte[4096];
        while (true) {
            long left = TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime());
            if (left <= 0) {
                return null;
            }
            s.setSoTimeout((int) left);
            int n;
            try {
                n = in.read(buf);
            } catch (SocketTimeoutException e) {
                return null;
            } catch (IOException e) {
                return got.toByteArray(); // reset: closed too
            }
            if (n < 0) {
                return got.toByteArray();
            }
            got.write(buf, 0, n);
        }
    }

    /** Reads exactly {@code n} bytes or fails. */
    static byte[] readExactly(Socket s, int n, long timeoutMs) throws IOException {
        s.setSoTimeout((int) timeoutMs);
        byte[] b = s.getInputStream().readNBytes(n);
        if (b.length != n) {
            throw new IOException("got " + b.length + " of " + n + " bytes");
        }
        return b;
    }

    static void closeQuietly(Socket s) {
        try {
            s.close();
        } catch (IOException ignored) {
            // closing
        }
    }



}
