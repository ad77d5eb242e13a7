package io.jccl.collectives;

import io.jccl.collectives.core.WaitPolicy;
import io.jccl.collectives.message.DeviceResources;
import io.jccl.collectives.message.MessagePath;
import io.jccl.collectives.message.Peer;
import io.jccl.collectives.message.RegistrationCache;
import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.MemoryRegion;

import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;

/**
 * A collectively registered one-sided window (NCCL 2.29's ncclCommWindowRegister + ncclPutSignal/ncclWaitSignal).
 * Each rank owns {@link #segment()}; {@link #putSignal} writes bytes into a peer's window with RDMA WRITE WITH IMM,
 * whose immediate is the signal; {@link #waitSignal} returns once that many signals from a peer have arrived, and
 * the data written before each signal is then visible; {@link #get} reads a peer's window with RDMA READ.
 * Operations go through the communicator's issue order and
 * deadline.
 */
public final class Window implements AutoCloseable {
    private final Communicator comm;
    private final int id;
    private final long bytes;
    private final MemoryRegion local;
    private final List<MemoryRegion> extraRegistrations = new ArrayList<>();
    private final long[] remoteAddress;
    private final int[] remoteRkey;
    private final long[] consumed;

    Window(Communicator comm, int id, long bytes) {
        this.comm = comm;
        this.id = id;
        this.bytes = bytes;
        MessagePath path = comm.messagePath();
        int size = comm.size();
        remoteAddress = new long[size];
        remoteRkey = new int[size];
        consumed = new long[size];
        path.addWindow(id);
        if (path.devices().isEmpty()) {
            local = null;
            return;
        }
        var devices = new ArrayList<>(path.devices().values());
        local = devices.getFirst().protectionDomain().allocateMemory(Math.max(1, bytes), AccessFlag.LOCAL_WRITE,
            AccessFlag.REMOTE_WRITE, AccessFlag.REMOTE_READ);
        java.util.Map<DeviceResources, MemoryRegion> byDevice = new java.util.HashMap<>();
        byDevice.put(devices.getFirst(), local);
        for (int i = 1; i < devices.size(); i++) {
            MemoryRegion r = devices.get(i).protectionDomain().registerMemory(local.segment(), AccessFlag.LOCAL_WRITE,
                AccessFlag.REMOTE_WRITE, AccessFlag.REMOTE_READ);
            extraRegistrations.add(r);
            byDevice.put(devices.get(i), r);
        }
        long timeoutNs = comm.options().timeoutNs();
        for (int j = 0; j < size; j++) {
            if (j == comm.rank()) {
                continue;
            }
            MemoryRegion r = byDevice.get(path.peer(j).device());
            comm.store().setString("win" + id + "/" + comm.rank() + "/" + j,
                Long.toHexString(r.address()) + " " + Integer.toHexString(r.rkey()), timeoutNs);
        }
        for (int j = 0; j < size; j++) {
            if (j == comm.rank()) {
                continue;
            }
            String[] f = comm.store().getString("win" + id + "/" + j + "/" + comm.rank(), timeoutNs).split(" ");
            remoteAddress[j] = Long.parseUnsignedLong(f[0], 16);
            remoteRkey[j] = Integer.parseUnsignedInt(f[1], 16);
        }
    }

    /** This rank's window memory (peers write into it). */
    public MemorySegment segment() {
        return local == null ? MemorySegment.NULL : local.segment().asSlice(0, bytes);
    }

    /** Window size in bytes. */
    public long byteSize() {
        return bytes;
    }

    /**
     * Writes {@code length} bytes of {@code source} (from {@code sourceOffset}) into {@code peer}'s window at
     * {@code windowOffset} and raises one signal there; returns when the write completed locally.
     */
    public void putSignal(int peer, MemorySegment source, long sourceOffset, long length, long windowOffset) {
        if (peer == comm.rank() || peer < 0 || peer >= comm.size()) {
            throw new IllegalArgumentException("peer " + peer + " is not another rank");
        }
        if (windowOffset < 0 || windowOffset + length > bytes || length > Integer.MAX_VALUE) {
            throw new IllegalArgumentException("range " + windowOffset + "+" + length + " outside the window of "
                + bytes + " bytes");
        }
        comm.windowOp(length, peer, () -> {
            MessagePath path = comm.messagePath();
            WaitPolicy waits = comm.waits();
            Peer p = path.peer(peer);
            MemorySegment src = source.isNative() ? source.asSlice(sourceOffset, length)
                : copyToNative(source.asSlice(sourceOffset, length));
            MemoryRegion r = path.sourceRegion(p.device(), src);
            long off = RegistrationCache.offsetIn(r, src);
            path.windowPut(p, id, r, off, (int) length, remoteAddress[peer] + windowOffset, remoteRkey[peer]);
            WaitPolicy.Subject subject = new WaitFor(() -> path.checkPeer(p));
            waits.beginPlainWait();
            while (p.sendsOutstanding() > 0) {
                waits.idle(path.poll(), subject);
            }
        });
    }

    /**
     * Reads {@code length} bytes of {@code peer}'s window at {@code windowOffset} into {@code destination} (from
     * {@code destinationOffset}) with RDMA READ: one-sided, the peer's CPU takes no part (a joining rank pulls the
     * model state from a survivor this way). Returns when the data is here. The peer must not change that range
     * until then (the caller orders it, for example with a barrier after the read).
     */
    public void get(int peer, long windowOffset, MemorySegment destination, long destinationOffset, long length) {
        if (peer == comm.rank() || peer < 0 || peer >= comm.size()) {
            throw new IllegalArgumentException("peer " + peer + " is not another rank");
        }
        if (windowOffset < 0 || windowOffset + length > bytes || length > Integer.MAX_VALUE || length < 0) {
            throw new IllegalArgumentException("range " + windowOffset + "+" + length + " outside the window of "
                + bytes + " bytes");
        }
        if (destinationOffset < 0 || destinationOffset + length > destination.byteSize()) {
            throw new IllegalArgumentException("range " + destinationOffset + "+" + length + " outside the "
                + "destination of " + destination.byteSize() + " bytes");
        }
        comm.windowOp(length, peer, () -> {
            MessagePath path = comm.messagePath();
            WaitPolicy waits = comm.waits();
            Peer p = path.peer(peer);
            MemorySegment dst = destination.isNative() ? destination.asSlice(destinationOffset, length)
                : bounceOf(length);
            MemoryRegion r = path.sourceRegion(p.device(), dst);
            path.windowGet(p, r, RegistrationCache.offsetIn(r, dst), (int) length, remoteAddress[peer] + windowOffset,
                remoteRkey[peer]);
            WaitPolicy.Subject subject = new WaitFor(() -> path.checkPeer(p));
            waits.beginPlainWait();
            while (p.sendsOutstanding() > 0) {
                waits.idle(path.poll(), subject);
            }
            if (!destination.isNative()) {
                MemorySegment.copy(dst, 0, destination, destinationOffset, length);
            }
        });
    }

    private MemorySegment bounce;

    /** The bounce buffer, at least {@code n} bytes (grown as needed). */
    private MemorySegment bounceOf(long n) {
        if (bounce == null || bounce.byteSize() < n) {
            bounce = comm.allocate(Math.max(4096, n));
        }
        return bounce.asSlice(0, n);
    }

    /** Heap sources go through one registered bounce buffer per window, grown as needed (a copy per put). */
    private MemorySegment copyToNative(MemorySegment heap) {
        long n = heap.byteSize();
        MemorySegment b = bounceOf(n);
        MemorySegment.copy(heap, 0, b, 0, n);
        return b;
    }

    /** Waits until {@code count} more signals from {@code peer} have arrived (within the communicator's deadline). */
    public void waitSignal(int peer, long count) {
        comm.windowOp(count, peer, () -> {
            MessagePath path = comm.messagePath();
            WaitPolicy waits = comm.waits();
            WaitPolicy.Subject subject = new WaitFor(() -> { });
            waits.beginPlainWait();
            while (path.windowSignals(id, peer) - consumed[peer] < count) {
                waits.idle(path.poll(), subject);
            }
            consumed[peer] += count;
        });
    }

    /** A window wait: waits for "progress" (signals or a send's completion) and checks what {@code health} says. */
    private record WaitFor(Runnable health) implements WaitPolicy.Subject {
        @Override
        public String describeWait() {
            return "progress";
        }

        @Override
        public void checkHealth() {
            health.run();
        }
    }

    /** Signals from {@code peer} that arrived but were not yet consumed by {@link #waitSignal}. */
    public long pendingSignals(int peer) {
        return comm.messagePath().windowSignals(id, peer) - consumed[peer];
    }

    @Override
    public void close() {
        for (MemoryRegion r : extraRegistrations) {
            MessagePath.closeQuietly(r);
        }
        MessagePath.closeQuietly(local);
    }

}
