package io.jccl.transport.shm;

import io.jccl.verbs.VerbsException;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;

/**
 * The rkey table of a context, kept in its control file so that peers can check one-sided requests against it
 * without asking the owner: fixed capacity, open addressing by rkey with linear probing.
 *
 * <p>Only the owner writes (under its lock); peers read. An entry is written as a seqlock (the sequence word is
 * odd while the owner changes it) because the owner reuses revoked entries for new keys, and a peer must never
 * combine the address of one region with the length of another. Revoking flips the state to REVOKED in one
 * release store; a peer's next lookup sees it.
 *
 * <pre>
 * header (128 B): magic u64 | version u32 (2) | capacity u32 | owner pid u64 | owner id u64
 *                 | (32) remote_access_errors u64 | (40) send_rnr_err u64 (responder-side counters that
 *                 requesters increment, since the responder's CPU takes no part in the request)
 *                 | (48) owner's PID namespace inode u64 (0 unknown: its pid is then usable by nobody)
 *                 | (64) doorbell sequence u32 | (96) doorbell sleepers u32 (see Doorbell)
 * entry  (128 B): seq u64 | rkey u32 | state u32 | access u32 | kind u32 | address u64 | length u64
 *                 | file id u64 | file offset u64 | protection-domain id u64 | (64) users u32
 *                 | (68) atomic lock u32 (pid of the holder, 0 when free)
 * </pre>
 *
 * <p>{@code users} counts peers copying into or out of a private region by cross-memory attach right now. A file
 * region needs no such count (a peer's mapping keeps the pages alive after the owner unmaps them), but private
 * memory is freed by its owner after deregistration, so {@link #revoke} waits until no peer is inside a copy:
 * as with hardware, once deregistration returns no peer access reaches the memory.
 */
public final class ShmKeyTable {
    /** Magic number of context files ("JCCLCTX1"). */
    public static final long MAGIC = 0x4A43434C43545831L;
    /** Entries; twice the number of regions a context may hold, so probe chains stay short. */
    public static final int CAPACITY = 8192;
    /** Size of the header and of each entry (two cache lines: the peers' in-use counter sits apart). */
    public static final int ENTRY_SIZE = 128;
    /** Bytes of the table in the control file. */
    public static final long FILE_SIZE = ENTRY_SIZE + (long) CAPACITY * ENTRY_SIZE;

    /** Entry never used: ends a probe chain. */
    public static final int FREE = 0;
    /** Entry holds a registered region. */
    public static final int VALID = 1;
    /** Entry held a region that was deregistered (a tombstone; reusable by the owner). */
    public static final int REVOKED = 2;

    /** Region memory is a shared file: peers map it. */
    public static final int KIND_FILE = 1;
    /** Region memory is private to the owner: peers reach it by cross-memory attach only. */
    public static final int KIND_PRIVATE = 2;

    static final VarHandle LONG = ValueLayout.JAVA_LONG.varHandle();
    static final VarHandle INT = ValueLayout.JAVA_INT.varHandle();

    private static final long SEQ = 0;
    private static final long RKEY = 8;
    private static final long STATE = 12;
    private static final long ACCESS = 16;
    private static final long KIND = 20;
    private static final long ADDRESS = 24;
    private static final long LENGTH = 32;
    private static final long FILE_ID = 40;
    private static final long FILE_OFFSET = 48;
    private static final long DOMAIN = 56;
    private static final long USERS = 64;
    private static final long ATOMIC_LOCK = 68;
    private static final long ATOMIC_LOCK_TIMEOUT_NS = 1_000_000_000L;
    private static final long ATOMIC_LOCK_LIVENESS_NS = 1_000_000L;
    private static final long REVOKE_WAIT_NS = 1_000_000_000L;
    private static final int MAX_SEQLOCK_RETRIES = 1 << 16;

    /** What a lookup found; preallocated by the reader, overwritten by each lookup (no allocation per request). */
    public static final class Entry {
        /** Index of the entry in the table. */
        public int slot;
        /** Remote key. */
        public int rkey;
        /** Access mask of the region ({@link io.jccl.verbs.AccessFlag} bits). */
        public int access;
        /** {@link #KIND_FILE} or {@link #KIND_PRIVATE}. */
        public int kind;
        /** The owner's virtual address of the first byte (what peers use as remote address). */
        public long address;
        /** Region length. */
        public long length;
        /** Random id naming the region file (file kind). */
        public long fileId;
        /** Offset of the region's first byte in its file. */
        public long fileOffset;
        /** Random id of the region's protection domain (a request must come through a QP of that domain). */
        public long domainId;

        /** Bytes the region file must have at least. */
        public long fileSize() {
            return fileOffset + length;
        }

        /** An empty entry, to be filled by lookups (allocate once per reader). */
        public Entry() {
        }

        /** Whether {@code [remoteAddress, remoteAddress + len)} lies inside the region (overflow-safe). */
        public boolean contains(long remoteAddress, long len) {
            return len >= 0 && remoteAddress >= address && remoteAddress - address <= length - len;
        }
    }

    private final MemorySegment table;

    /** A view of a context file's table (the owner's or a peer's mapping). */
    public ShmKeyTable(MemorySegment contextFile) {
        if (contextFile.byteSize() < FILE_SIZE) {
            throw new VerbsException(VerbsException.Reason.CONNECTION, "context file too small");
        }
        this.table = contextFile;
    }

    /** Layout version in the header. */
    public static final int VERSION = 2;

    /** Formats a fresh (zeroed) control file for owner {@code ownerPid}/{@code ownerId} in PID namespace ns. */
    void format(long ownerPid, long ownerId, long pidNamespace) {
        table.set(ValueLayout.JAVA_INT, 8, VERSION);
        table.set(ValueLayout.JAVA_INT, 12, CAPACITY);
        table.set(ValueLayout.JAVA_LONG, 16, ownerPid);
        table.set(ValueLayout.JAVA_LONG, 24, ownerId);
        table.set(ValueLayout.JAVA_LONG, 48, pidNamespace);
        LONG.setRelease(table, 0L, MAGIC);
    }

    /** Whether the header carries the magic number, this layout version and the expected capacity. */
    public boolean isWellFormed() {
        return (long) LONG.getAcquire(table, 0L) == MAGIC && table.get(ValueLayout.JAVA_INT, 8) == VERSION
            && table.get(ValueLayout.JAVA_INT, 12) == CAPACITY;
    }

    /** The owner id (as in the owner's file names and lock file; see {@link OwnerLock}). */
    public long ownerId() {
        return table.get(ValueLayout.JAVA_LONG, 24);
    }

    /** The inode of the owner's PID namespace, 0 when unknown (see {@link ShmFiles#pidNamespace}). */
    public long ownerPidNamespace() {
        return table.get(ValueLayout.JAVA_LONG, 48);
    }

    /** Header offset of the responder's remote_access_errors counter. */
    public static final long COUNTER_REMOTE_ACCESS_ERRORS = 32;
    /** Header offset of the responder's send_rnr_err counter (RNR NAKs it "sent"). */
    public static final long COUNTER_SEND_RNR = 40;

    /** Adds one to a responder-side counter in the header (requester side). */
    public void countForOwner(long counterOffset) {
        LONG.getAndAdd(table, counterOffset, 1L);
    }

    /** A responder-side counter of the header (owner side). */
    public long ownerCounter(long counterOffset) {
        return (long) LONG.getVolatile(table, counterOffset);
    }

    /** The owner pid recorded in the header. */
    public long ownerPid() {
        return table.get(ValueLayout.JAVA_LONG, 16);
    }

    private static long base(int slot) {
        return ENTRY_SIZE + (long) slot * ENTRY_SIZE;
    }

    private static int home(int rkey) {
        int h = rkey * 0x9E3779B9;
        return (h ^ (h >>> 16)) & (CAPACITY - 1);
    }

    /**
     * Publishes a region (owner only, serialized by the caller).
     *
     * @return the entry's slot
     * @throws VerbsException NO_RESOURCES when the table is full
     */
    synchronized int publish(int rkey, int access, int kind, long address, long length, long fileId,
                             long fileOffset, long domainId) {
        int slot = -1;
        for (int i = home(rkey), n = 0; n < CAPACITY; i = (i + 1) & (CAPACITY - 1), n++) {
            int state = (int) INT.getAcquire(table, base(i) + STATE);
            if (state != VALID) {
                slot = i;
                break;
            }
        }
        if (slot < 0) {
            throw new VerbsException(VerbsException.Reason.NO_RESOURCES, "shm key table full (" + CAPACITY
                + " entries): deregister memory regions you no longer use");
        }
        long b = base(slot);
        long seq = (long) LONG.getVolatile(table, b + SEQ);
        LONG.setVolatile(table, b + SEQ, seq + 1);
        table.set(ValueLayout.JAVA_INT, b + ACCESS, access);
        table.set(ValueLayout.JAVA_INT, b + KIND, kind);
        table.set(ValueLayout.JAVA_LONG, b + ADDRESS, address);
        table.set(ValueLayout.JAVA_LONG, b + LENGTH, length);
        table.set(ValueLayout.JAVA_LONG, b + FILE_ID, fileId);
        table.set(ValueLayout.JAVA_LONG, b + FILE_OFFSET, fileOffset);
        table.set(ValueLayout.JAVA_LONG, b + DOMAIN, domainId);
        table.set(ValueLayout.JAVA_INT, b + RKEY, rkey);
        INT.setVolatile(table, b + ATOMIC_LOCK, 0);
        INT.setRelease(table, b + STATE, VALID);
        LONG.setRelease(table, b + SEQ, seq + 2);
        return slot;
    }

    /** Revokes an entry (owner only): peers refuse the key from their next lookup on. */
    synchronized void revoke(int slot, int rkey) {
        long b = base(slot);
        if (table.get(ValueLayout.JAVA_INT, b + RKEY) != rkey
            || (int) INT.getAcquire(table, b + STATE) != VALID) {
            return;
        }
        long seq = (long) LONG.getVolatile(table, b + SEQ);
        LONG.setVolatile(table, b + SEQ, seq + 1);
        INT.setVolatile(table, b + STATE, REVOKED);
        LONG.setRelease(table, b + SEQ, seq + 2);
        VarHandle.fullFence(); // Dekker with enter(): our state store before our users load
        // Wait for peers inside a cross-memory-attach copy (they re-check the state after entering, so no new
        // one starts). Bounded: a peer that died inside a copy must not block deregistration forever.
        long deadline = System.nanoTime() + REVOKE_WAIT_NS;
        while ((int) INT.getVolatile(table, b + USERS) > 0 && System.nanoTime() - deadline < 0) {
            Thread.yield();
        }
    }

    /**
     * Enters a private-memory copy on entry {@code slot} (peer side): counts this peer as a user, then re-checks
     * that the entry still holds {@code rkey} and is valid. On false the caller must not copy (and must not call
     * {@link #exit}); on true it copies and then calls {@link #exit}.
     */
    public boolean enter(int slot, int rkey, Entry scratch) {
        long users = base(slot) + USERS;
        INT.getAndAdd(table, users, 1);
        VarHandle.fullFence(); // Dekker with revoke(): our users increment before our state load
        if (read(slot, scratch) == VALID && scratch.rkey == rkey) {
            return true;
        }
        INT.getAndAdd(table, users, -1);
        return false;
    }

    /**
     * Takes the region's atomic lock (peer side, after {@link #enter}): verbs atomics on private memory are a
     * cross-memory-attach read and write under this lock, so they are atomic against every other verbs atomic on
     * the region from any process (IBV_ATOMIC_HCA), though not against the owner's own CPU atomics. The lock holds
     * the holder's pid; a waiter takes over a lock whose holder died. Gives up after a second. Only requesters in
     * the owner's PID namespace reach private memory at all (cross-memory attach addresses the owner by pid), so
     * every holder's pid means the same process to every waiter.
     *
     * @return false when the lock could not be had (the caller fails the request)
     */
    public boolean lockAtomic(int slot, int selfPid) {
        long lock = base(slot) + ATOMIC_LOCK;
        long start = System.nanoTime();
        long lastLivenessCheck = start;
        while (true) {
            int holder = (int) INT.getVolatile(table, lock);
            if (holder == 0) {
                if (INT.compareAndSet(table, lock, 0, selfPid)) {
                    return true;
                }
                continue;
            }
            long now = System.nanoTime();
            if (now - lastLivenessCheck >= ATOMIC_LOCK_LIVENESS_NS) {
                lastLivenessCheck = now;
                if (holder != selfPid && !ShmFiles.isAlive(holder)
                    && INT.compareAndSet(table, lock, holder, selfPid)) {
                    return true; // the holder died between its read and write: take over
                }
                if (now - start >= ATOMIC_LOCK_TIMEOUT_NS) {
                    return false;
                }
            }
            Thread.onSpinWait();
        }
    }

    /** Releases the lock taken with {@link #lockAtomic}. */
    public void unlockAtomic(int slot) {
        INT.setRelease(table, base(slot) + ATOMIC_LOCK, 0);
    }

    /** Leaves a copy entered with {@link #enter}. */
    public void exit(int slot) {
        INT.getAndAdd(table, base(slot) + USERS, -1);
    }

    /**
     * Finds the live entry of {@code rkey}.
     *
     * @return true and {@code out} filled when the key names a registered region; false when it is unknown or
     *     revoked (the caller answers REM_ACCESS_ERR)
     */
    public boolean lookup(int rkey, Entry out) {
        if (rkey == 0) {
            return false;
        }
        for (int i = home(rkey), n = 0; n < CAPACITY; i = (i + 1) & (CAPACITY - 1), n++) {
            int r = read(i, out);
            if (r == FREE) {
                return false;
            }
            if (out.rkey == rkey) {
                if (r == VALID) {
                    return true;
                }
                // A revoked tombstone of this key; a later entry may hold it again only after a new
                // registration with the same random key, which is possible but harmless: keep probing.
            }
        }
        return false;
    }

    /** Whether entry {@code slot} still holds {@code rkey} and is valid (receive descriptors check this). */
    public boolean isValid(int slot, int rkey, Entry scratch) {
        return slot >= 0 && slot < CAPACITY && read(slot, scratch) == VALID && scratch.rkey == rkey;
    }

    /** Reads entry {@code slot} consistently; returns its state (fields in {@code out}). */
    private int read(int slot, Entry out) {
        long b = base(slot);
        for (int attempt = 0; attempt < MAX_SEQLOCK_RETRIES; attempt++) {
            long seq = (long) LONG.getAcquire(table, b + SEQ);
            if ((seq & 1) != 0) {
                Thread.onSpinWait();
                continue;
            }
            int state = (int) INT.get(table, b + STATE);
            out.slot = slot;
            out.rkey = (int) INT.get(table, b + RKEY);
            out.access = (int) INT.get(table, b + ACCESS);
            out.kind = (int) INT.get(table, b + KIND);
            out.address = (long) LONG.get(table, b + ADDRESS);
            out.length = (long) LONG.get(table, b + LENGTH);
            out.fileId = (long) LONG.get(table, b + FILE_ID);
            out.fileOffset = (long) LONG.get(table, b + FILE_OFFSET);
            out.domainId = (long) LONG.get(table, b + DOMAIN);
            VarHandle.acquireFence();
            if ((long) LONG.get(table, b + SEQ) == seq) {
                return state;
            }
        }
        // The owner died in the middle of an update (sequence stuck odd): the entry is unusable.
        out.rkey = 0;
        return REVOKED;
    }
}
