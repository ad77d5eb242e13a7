package io.jccl.collectives.store;

import io.jccl.common.Log;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.SocketException;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The server side of {@link TcpStore}: an in-memory table served over TCP, one virtual thread per client
 * connection. Rank 0 starts one inside its process (binding MASTER_PORT), or run it standalone:
 * {@code java -cp jccl-collectives.jar io.jccl.collectives.store.TcpStoreServer [port [bind-address]]}.
 */
public final class TcpStoreServer implements AutoCloseable {
    static final byte SET = 1;
    static final byte GET = 2;
    static final byte ADD = 3;
    static final byte WAIT = 4;
    static final byte CAS = 5;
    static final byte DELETE = 6;
    static final byte CHECK = 7;
    static final byte OK = 0;
    static final byte TIMEOUT = 1;
    static final byte ERROR = 2;
    static final int MAGIC = 0x4A53_5431; // "JST1"

    private final InMemoryStore table = new InMemoryStore("TcpStoreServer");
    private final ServerSocket server;
    private final Thread acceptor;
    private final Set<Socket> clients = ConcurrentHashMap.newKeySet();
    private volatile boolean closed;

    /**
     * Binds {@code port} (0 picks a free one) on {@code bindAddress} (null: all interfaces) and starts serving.
     *
     * @throws StoreException when the port cannot be bound (for example already in use)
     */
    public TcpStoreServer(InetAddress bindAddress, int port) {
        try {
            server = new ServerSocket();
            server.setReuseAddress(true);
            server.bind(new InetSocketAddress(bindAddress, port), 1024);
        } catch (IOException e) {
            throw new StoreException("TcpStoreServer cannot bind " + (bindAddress == null ? "*" : bindAddress) + ":"
                + port + " (" + e.getMessage() + "); is another job using this MASTER_PORT?", e);
        }
        acceptor = Thread.ofPlatform().daemon().name("jccl-store-server-" + server.getLocalPort()).start(this::accept);
    }

    /** The bound port. */
    public int port() {
        return server.getLocalPort();
    }

    private void accept() {
        while (!closed) {
            try {
                Socket socket = server.accept();
                socket.setTcpNoDelay(true);
                clients.add(socket);
                // A platform daemon thread, not a virtual one: with virtual threads the rank JVMs took ~300 ms longer
                // to exit after their shutdown hooks (launch wall of 2 ranks 754 -> 451 ms measured).
                Thread.ofPlatform().daemon().name("jccl-store-conn").start(() -> serve(socket));
            } catch (IOException e) {
                if (!closed) {
                    Log.get().warn(-1, Log.Subsys.INIT, "TcpStoreServer accept failed: " + e);
                }
            }
        }
    }

    private void serve(Socket socket) {
        try (socket;
             DataInputStream in = new DataInputStream(new BufferedInputStream(socket.getInputStream()));
             DataOutputStream out = new DataOutputStream(new BufferedOutputStream(socket.getOutputStream()))) {
            if (in.readInt() != MAGIC) {
                return; // not a store client
            }
            while (!closed) {
                byte op;
                try {
                    op = in.readByte();
                } catch (EOFException e) {
                    return;
                }
                handle(op, in, out);
                out.flush();
            }
        } catch (IOException e) {
            // client went away
        } finally {
            clients.remove(socket);
        }
    }

    private void handle(byte op, DataInputStream in, DataOutputStream out) throws IOException {
        try {
            switch (op) {
                case SET -> {
                    String key = in.readUTF();
                    byte[] value = readBytes(in);
                    table.set(key, value, 0);
                    out.writeByte(OK);
                }
                case GET -> {
                    String key = in.readUTF();
                    long timeoutNs = in.readLong();
                    byte[] value = table.get(key, timeoutNs);
                    out.writeByte(OK);
                    writeBytes(out, value);
                }
                case ADD -> {
                    String key = in.readUTF();
                    long delta = in.readLong();
                    long value = table.add(key, delta, 0);
                    out.writeByte(OK);
                    out.writeLong(value);
                }
                case WAIT -> {
                    int n = in.readInt();
                    List<String> keys = new ArrayList<>(n);
                    for (int i = 0; i < n; i++) {
                        keys.add(in.readUTF());
                    }
                    long timeoutNs = in.readLong();
                    table.waitFor(keys, timeoutNs);
                    out.writeByte(OK);
                }
                case CAS -> {
                    String key = in.readUTF();
                    byte[] expected = in.readBoolean() ? readBytes(in) : null;
                    byte[] desired = readBytes(in);
                    boolean done = table.compareAndSet(key, expected, desired, 0);
                    out.writeByte(OK);
                    out.writeBoolean(done);
                }
                case DELETE -> {
                    boolean existed = table.delete(in.readUTF(), 0);
                    out.writeByte(OK);
                    out.writeBoolean(existed);
                }
                case CHECK -> {
                    boolean exists = table.check(in.readUTF(), 0);
                    out.writeByte(OK);
                    out.writeBoolean(exists);
                }
                default -> throw new IOException("unknown store request " + op);
            }
        } catch (StoreTimeoutException e) {
            out.writeByte(TIMEOUT);
            out.writeUTF(e.getMessage().replace("TcpStoreServer", "TcpStore server port " + port()));
        } catch (StoreException e) {
            out.writeByte(ERROR);
            out.writeUTF(String.valueOf(e.getMessage()));
        }
    }

    static byte[] readBytes(DataInputStream in) throws IOException {
        int n = in.readInt();
        if (n < 0 || n > 64 << 20) {
            throw new IOException("store value of " + n + " bytes");
        }
        byte[] b = new byte[n];
        in.readFully(b);
        return b;
    }

    static void writeBytes(DataOutputStream out, byte[] b) throws IOException {
        out.writeInt(b.length);
        out.write(b);
    }

    /** Number of keys held. */
    public int size() {
        return table.size();
    }

    @Override
    public void close() {
        closed = true;
        try {
            server.close();
        } catch (IOException ignored) {
            // closing
        }
        for (Socket socket : clients) {
            try {
                socket.close();
            } catch (IOException ignored) {
                // closing
            }
        }
    }

    /** Runs a standalone server: {@code TcpStoreServer [port [bind-address]]} (default port 29500). */
    public static void main(String[] args) throws Exception {
        int port = args.length > 0 ? Integer.parseInt(args[0]) : 29500;
        InetAddress bind = args.length > 1 ? InetAddress.getByName(args[1]) : null;
        try (TcpStoreServer s = new TcpStoreServer(bind, port)) {
            System.out.println("JCCL TcpStoreServer listening on port " + s.port());
            try {
                s.acceptor.join();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        } catch (StoreException e) {
            System.err.println(e.getMessage());
            System.exit(1);
        }
    }

    static boolean isConnectionError(IOException e) {
        return e instanceof SocketException || e instanceof EOFException;
    }
}
