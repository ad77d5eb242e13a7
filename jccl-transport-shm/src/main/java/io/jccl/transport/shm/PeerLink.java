package io.jccl.transport.shm;

import io.jccl.verbs.Endpoint;
import io.jccl.verbs.VerbsException;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;

/**
 * A queue pair's connection to its peer: the peer's queue-pair file and context file mapped into this process,
 * the peer's key table and the cache of the peer's region mappings. Used under the owning queue pair's lock.
 */
final class PeerLink {
    /** The peer's pid in its own PID namespace: usable here only when {@link #samePidNamespace}. */
    final long pid;
    /** The peer process's owner id (its files' names, its lock file: its liveness, see {@link OwnerLock}). */
    final long ownerId;
    /**
     * Whether the peer runs in this process's PID namespace (both known and equal), so that its pid names the same
     * process here: cross-memory attach (private memory) addresses the peer by pid and is used only then.
     */
    final boolean samePidNamespace;
    final int queuePairNumber;
    final MemorySegment queuePairFile;
    final ShmKeyTable keys;
    final PeerRegionCache regions;
    final int depth;
    final int entrySize;
    final int maxSge;
    final long domainId;
    final Doorbell doorbell;
    /** Whether the peer process lives: its lock (see {@link LockProbe}). */
    final LockProbe liveness;
    private final Arena arena;
    /**
     * The peer's TAIL as last read (owner QP lock): while HEAD stays below it the sender claims without reading
     * TAIL again, since descriptors below a TAIL it acquired stay published until claimed.
     */
    long tailSeen;
    /** One past the last index this QP claimed: a HEAD below it means the peer went through RESET. */
    long headSeen;

    private PeerLink(long pid, int queuePairNumber, Arena arena, MemorySegment queuePairFile, ShmKeyTable keys,
                     MemorySegment contextFile) {
        this.doorbell = new Doorbell(contextFile);
        this.pid = pid;
        this.queuePairNumber = queuePairNumber;
        this.arena = arena;
        this.queuePairFile = queuePairFile;
        this.keys = keys;

        this.depth = queuePairFile.get(ValueLayout.JAVA_INT, QueuePairFile.DEPTH);
        this.maxSge = queuePairFile.get(ValueLayout.JAVA_INT, QueuePairFile.MAX_SGE);
        this.entrySize = queuePairFile.get(ValueLayout.JAVA_INT, QueuePairFile.ENTRY_SIZE);
        this.domainId = queuePairFile.get(ValueLayout.JAVA_LONG, QueuePairFile.DOMAIN);
        this.ownerId = keys.ownerId();
        long ns = keys.ownerPidNamespace();
        this.samePidNamespace = ns != 0 && ns == ShmFiles.pidNamespace();
        this.regions = new PeerRegionCache(pid, ownerId);
        this.liveness = new LockProbe(lockFile(), ownerId, arena);
    }

    /** The peer's lock file (its liveness: see {@link OwnerLock}). */
    Path lockFile() {
        return ShmFiles.DIRECTORY.resolve(ShmFiles.lockName(pid, ownerId));
    }

    /**
     * Maps and verifies the peer named by {@code remote}.
     *
     * @throws VerbsException when the endpoint is not an shm endpoint of this host, or the peer is gone or does
     *     not match the endpoint (nothing stays mapped then)
     */
    static PeerLink connect(Endpoint remote, int destQpNumber) {
        if (!ShmProvider.NAME.equals(remote.provider())) {
            throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT, "endpoint of provider '"
                + remote.provider() + "' given to an shm queue pair; connect shm QPs to shm endpoints");
        }
        ShmAddress address = ShmAddress.parse(remote.address());
        if (destQpNumber != remote.queuePairNumber()) {
            throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT, "dest_qp_num 0x"
                + Integer.toHexString(destQpNumber) + " differs from the endpoint's QPN 0x"
                + Integer.toHexString(remote.queuePairNumber()));
        }
        long ownerId = ShmFiles.ownerId(address.contextFile());
        if (OwnerLock.check(ShmFiles.DIRECTORY, address.pid(), ownerId) == OwnerLock.Owner.DEAD) {
            throw new VerbsException(VerbsException.Reason.CONNECTION, "shm peer process " + address.pid()
                + " is not running (its lock file " + ShmFiles.lockName(address.pid(), ownerId) + " is gone or "
                + "unlocked)");
        }
        Arena arena = Arena.ofShared();
        try {
            MemorySegment qp = ShmFiles.mapExisting(ShmFiles.DIRECTORY.resolve(address.queuePairFile()),
                QueuePairFile.ENTRIES, arena);
            if (qp.get(ValueLayout.JAVA_LONG, 0) != QueuePairFile.MAGIC
                || qp.get(ValueLayout.JAVA_INT, QueuePairFile.QPN) != remote.queuePairNumber()
                || qp.get(ValueLayout.JAVA_LONG, QueuePairFile.TOKEN) != address.token()
                || qp.get(ValueLayout.JAVA_LONG, QueuePairFile.PID) != address.pid()) {
                throw new VerbsException(VerbsException.Reason.REJECTED, "shm queue-pair file "
                    + address.queuePairFile() + " does not match the endpoint (QPN or token differ): stale or "
                    + "forged endpoint");
            }
            int depth = qp.get(ValueLayout.JAVA_INT, QueuePairFile.DEPTH);
            int maxSge = qp.get(ValueLayout.JAVA_INT, QueuePairFile.MAX_SGE);
            int entrySize = qp.get(ValueLayout.JAVA_INT, QueuePairFile.ENTRY_SIZE);
            if (depth < 1 || maxSge < 1 || entrySize != QueuePairFile.entrySize(maxSge)
                || qp.byteSize() < QueuePairFile.fileSize(depth, maxSge)) {
                throw new VerbsException(VerbsException.Reason.REJECTED, "shm queue-pair file "
                    + address.queuePairFile() + " has an inconsistent layout");
            }
            MemorySegment ctx = ShmFiles.mapExisting(ShmFiles.DIRECTORY.resolve(address.contextFile()),
                ShmKeyTable.FILE_SIZE, arena);
            ShmKeyTable keys = new ShmKeyTable(ctx);
            if (!keys.isWellFormed() || keys.ownerPid() != address.pid() || keys.ownerId() != ownerId) {
                throw new VerbsException(VerbsException.Reason.REJECTED, "shm context file "
                    + address.contextFile() + " is not a context of process " + address.pid());
            }
            return new PeerLink(address.pid(), remote.queuePairNumber(), arena, qp, keys, ctx);
        } catch (NoSuchFileException e) {
            arena.close();
            throw new VerbsException(VerbsException.Reason.CONNECTION, "shm peer file " + e.getFile()
                + " not found: the peer QP was destroyed or its process exited (containers must share /dev/shm, "
                + "or set the same JCCL_SHM_DIR)", e);
        } catch (IOException e) {
            arena.close();
            throw new VerbsException(VerbsException.Reason.CONNECTION, "cannot map shm peer files: " + e, e);
        } catch (RuntimeException e) {
            arena.close();
            throw e;
        }
    }

    /** The peer QP's shared state word. */
    int state() {
        return (int) ShmKeyTable.INT.getAcquire(queuePairFile, QueuePairFile.STATE);
    }

    /** The peer QP's qp_access_flags. */
    int accessFlags() {
        return (int) ShmKeyTable.INT.getAcquire(queuePairFile, QueuePairFile.ACCESS);
    }

    /** The peer QP's min_rnr_timer code. */
    int minRnrTimer() {
        return (int) ShmKeyTable.INT.getAcquire(queuePairFile, QueuePairFile.MIN_RNR) & 31;
    }

    /** Offset of the descriptor of receive index {@code index} in the peer's file. */
    long entryOffset(long index) {
        return QueuePairFile.ENTRIES + (index % depth) * entrySize;
    }

    /**
     * Moves the peer QP to ERR after a responder-side violation (as the responder of a NAK does); the peer's owner
     * notices at its next post or poll and flushes.
     */
    void markError() {
        for (int attempt = 0; attempt < 100; attempt++) {
            int s = state();
            if (s == QueuePairFile.S_ERR || s == QueuePairFile.S_DESTROYED || s == QueuePairFile.S_RESET) {
                return;
            }
            if (ShmKeyTable.INT.compareAndSet(queuePairFile, QueuePairFile.STATE, s, QueuePairFile.S_ERR)) {
                doorbell.ring(); // a sleeping owner should notice and flush now
                return;
            }
        }
    }

    void close() {
        liveness.close();
        regions.close();
        try {
            arena.close();
        } catch (IllegalStateException ignored) {
            // in use by a mapRemote view in another thread; released when that completes
        }
    }
}
