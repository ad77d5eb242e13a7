package io.jccl.collectives.store;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;

/**
 * A store client over TCP (torch.distributed's TCPStore). With {@code startServer} the constructor first starts a
 * {@link TcpStoreServer} on {@code port} in this process (what rank 0 does with MASTER_PORT). The client connects
 * and reconnects until the deadline, retrying every 10–200 ms (no 1 s back-off: a rank that starts before the
 * server costs milliseconds, not a second). Requests are idempotent except {@link #add}, which is not retried once
 * sent. Thread-safe (one request at a time per client).
 */
public final class TcpStore implements Store {
    private final String host;
    private final int port;
    private final TcpStoreServer server;
    private final long connectTimeoutNs;
    private volatile Socket socket;
    private DataInputStream in;
    private DataOutputStream out;
    private volatile boolean closed;

    /**
     * Connects to {@code host:port}, starting a server there first when {@code startServer}.
     *
     * @param connectTimeoutNs how long to keep trying to reach the server (each later request also reconnects
     *     within its own deadline)
     */
    public TcpStore(String host, int port, boolean startServer, long connectTimeoutNs) {
        this.server = startServer ? new TcpStoreServer(null, port) : null;
        this.host = host;
        this.port = server != null ? server.port() : port;
        this.connectTimeoutNs = connectTimeoutNs;
        synchronized (this) {
            connect(System.nanoTime() + connectTimeoutNs, null);
        }
    }

    /** The server's port (the bound one when this object started the server on port 0). */
    public int port() {
        return port;
    }

    /** The server this object started, or null. */
    public TcpStoreServer server() {
        return server;
    }

    private void connect(long deadlineNs, IOException previous) {
        long start = System.nanoTime();
        // Ranks start together and rank 0's server listens some milliseconds after its JVM starts: the first
        // retries come soon (1, 2, 4 ms ...), later ones back off to 200 ms.
        long pauseNs = TimeUnit.MILLISECONDS.toNanos(1);
        IOException last = previous;
        while (!closed) {
            Socket s = new Socket();
            try {
                long left = Math.max(1, TimeUnit.NANOSECONDS.toMillis(deadlineNs - System.nanoTime()));
                s.connect(new InetSocketAddress(host, port), (int) Math.min(left, 5000));
                s.setTcpNoDelay(true);
                DataOutputStream o = new DataOutputStream(new BufferedOutputStream(s.getOutputStream()));
                o.writeInt(TcpStoreServer.MAGIC);
                o.flush();
                socket = s;
                in = new DataInputStream(new BufferedInputStream(s.getInputStream()));
                out = o;
                return;
            } catch (IOException e) {
                last = e;
                try {
                    s.close();
                } catch (IOException ignored) {
                    // failed socket
                }
            }
            if (System.nanoTime() - deadlineNs >= 0) {
                throw new StoreTimeoutException("cannot reach TcpStore server " + host + ":" + port + " within "
                    + StoreTimeoutException.millis(System.nanoTime() - start) + " (last error: " + last + "); is rank 0 "
                    + "(or TcpStoreServer) running and MASTER_ADDR/MASTER_PORT (or JCCL_STORE_ADDR) right?", last);
            }
            LockSupport.parkNanos(pauseNs);
            pauseNs = Math.min(pauseNs * 2, TimeUnit.MILLISECONDS.toNanos(200));
        }
        throw new StoreException(describe() + " is closed");
    }

    private void dropConnection() {
        try {
            if (socket != null) {
                socket.close();
            }
        } catch (IOException ignored) {
            // dropping
        }
        socket = null;
    }

    @FunctionalInterface
    private interface Request<T> {
        T run(DataOutputStream out, DataInputStream in) throws IOException;
    }

    private synchronized <T> T call(String what, long timeoutNs, boolean retry, Request<T> request) {
        long start = System.nanoTime();
        // (Re)connecting gets the request's own deadline; the reply may take up to 5 s more than a server-side wait.
        long connectDeadline = start + Math.max(timeoutNs, TimeUnit.MILLISECONDS.toNanos(100));
        long deadline = start + Math.max(timeoutNs, 0) + TimeUnit.SECONDS.toNanos(5);
        while (true) {
            if (closed) {
                throw new StoreException(describe() + " is closed");
            }
            if (socket == null) {
                connect(connectDeadline, null);
            }
            try {
                long left = Math.max(1, TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime()));
                socket.setSoTimeout((int) Math.min(left, Integer.MAX_VALUE));
                T result = request.run(out, in);
                return result;
            } catch (SocketTimeoutException e) {
                dropConnection();
                throw new StoreTimeoutException(describe() + ": no reply to " + what + " before the deadline", e);
            } catch (IOException e) {
                dropConnection();
                if (!retry || System.nanoTime() - deadline >= 0) {
                    throw new StoreException(describe() + ": connection lost during " + what + " (" + e + ")", e);
                }
            }
        }
    }

    private static void status(DataInputStream in) throws IOException {
        byte status = in.readByte();
        if (status == TcpStoreServer.OK) {
            return;
        }
        String message = in.readUTF();
        if (status == TcpStoreServer.TIMEOUT) {
            throw new StoreTimeoutException(message);
        }
        throw new StoreException(message);
    }

    @Override
    public void set(String key, byte[] value, long timeoutNs) {
        call("set(" + key + ")", timeoutNs, true, (o, i) -> {
            o.writeByte(TcpStoreServer.SET);
            o.writeUTF(key);
            TcpStoreServer.writeBytes(o, value);
            o.flush();
            status(i);
            return null;
        });
    }

    @Override
    public byte[] get(String key, long timeoutNs) {
        return call("get(" + key + ")", timeoutNs, true, (o, i) -> {
            o.writeByte(TcpStoreServer.GET);
            o.writeUTF(key);
            o.writeLong(timeoutNs);
            o.flush();
            status(i);
            return TcpStoreServer.readBytes(i);
        });
    }

    @Override
    public long add(String key, long delta, long timeoutNs) {
        return call("add(" + key + ")", timeoutNs, false, (o, i) -> {
            o.writeByte(TcpStoreServer.ADD);
            o.writeUTF(key);
            o.writeLong(delta);
            o.flush();
            status(i);
            return i.readLong();
        });
    }

    @Override
    public void waitFor(List<String> keys, long timeoutNs) {
        call("wait(" + keys + ")", timeoutNs, true, (o, i) -> {
            o.writeByte(TcpStoreServer.WAIT);
            o.writeInt(keys.size());
            for (String key : keys) {
                o.writeUTF(key);
            }
            o.writeLong(timeoutNs);
            o.flush();
            status(i);
            return null;
        });
    }

    @Override
    public boolean compareAndSet(String key, byte[] expected, byte[] desired, long timeoutNs) {
        return call("compareAndSet(" + key + ")", timeoutNs, true, (o, i) -> {
            o.writeByte(TcpStoreServer.CAS);
            o.writeUTF(key);
            o.writeBoolean(expected != null);
            if (expected != null) {
                TcpStoreServer.writeBytes(o, expected);
            }
            TcpStoreServer.writeBytes(o, desired);
            o.flush();
            status(i);
            return i.readBoolean();
        });
    }

    @Override
    public boolean delete(String key, long timeoutNs) {
        return call("delete(" + key + ")", timeoutNs, true, (o, i) -> {
            o.writeByte(TcpStoreServer.DELETE);
            o.writeUTF(key);
            o.flush();
            status(i);
            return i.readBoolean();
        });
    }

    @Override
    public boolean check(String key, long timeoutNs) {
        return call("check(" + key + ")", timeoutNs, true, (o, i) -> {
            o.writeByte(TcpStoreServer.CHECK);
            o.writeUTF(key);
            o.flush();
            status(i);
            return i.readBoolean();
        });
    }

    @Override
    public String describe() {
        return "TcpStore " + host + ":" + port;
    }

    /** Closes the connection and, when this object started it, the server. */
    @Override
    public void close() {
        closed = true;
        Socket s = socket;
        if (s != null) {
            try {
                s.close(); // unblocks a request in progress on another thread
            } catch (IOException ignored) {
                // closing
            }
        }
        if (server != null) {
            server.close();
        }
    }

    /** The connect deadline this store was created with. */
    public long connectTimeoutNs() {
        return connectTimeoutNs;
    }
}
