package io.jccl.collectives.direct;

import io.jccl.collectives.core.Signature;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;

/**
 * A view of a rank's direct-path control block (Aeron's flyweights: named fields over shared memory, no copies).
 * Each rank writes its own block and maps its peers' read-only; the layout is what every rank of a job agrees on:
 *
 * <pre>
 *    0  (reserved)
 *    8  status            long   0 running, else bit 0 aborted or failed, bit 1 revoked, bits 32-63 origin + 1
 *   64  waiting CPU       int    1 + the CPU the collective thread last gave up in a wait, 0 unknown (own line)
 *  128  heartbeat         long   advanced by the process's heartbeat thread while it runs (own line)
 *  256  input descriptors        two (by barrier epoch parity) of 32 bytes: mode (0 staged, 1 allocation), id, offset
 *  320  output descriptors       two of 32 bytes: mode, id, offset, flags (separate / in place)
 *  512  arrival records          two of 1152 bytes (18 cache lines): epoch (written last, with release), the
 *                                operation's signature, up to 1 KiB of inline payload
 * 3072  abort reason             length (int) and UTF-8 text, written before the status word
 * </pre>
 *
 * <p>Descriptors and records come in two, selected by the parity of the barrier epoch they belong to: a record is
 * rewritten two epochs later, which needs every peer to have arrived at the epoch in between, so whatever a peer put
 * into it stays readable until this rank's next barrier.
 */
public final class ControlBlockFlyweight {
    /** Bytes of a control block. */
    public static final int LENGTH = 4096;
    /** Input mode: the input was copied into the owner's staging half. */
    public static final long MODE_STAGED = 0;
    /** Input mode: the input is {@code Communicator.allocate} memory, read where it is (id, offset). */
    public static final long MODE_ALLOCATION = 1;
    /** Output flag: the output shares no byte with the input. */
    public static final long OUT_SEPARATE = 1;
    /** Output flag: the output is the input (in place). */
    public static final long OUT_IN_PLACE = 2;
    /** Largest inline payload of an arrival record. */
    public static final int INLINE_BYTES = 1024;

    private static final long STATUS = 8;
    private static final long REASON = 3072;
    private static final int REASON_BYTES = 1024;
    private static final long WAITING_CPU = 64;
    private static final long HEARTBEAT = 128;
    private static final long INPUT_DESCRIPTORS = 256;
    private static final long OUTPUT_DESCRIPTORS = 320;
    private static final long DESCRIPTOR_LENGTH = 32;
    private static final long MODE = 0;
    private static final long ID = 8;
    private static final long OFFSET = 16;
    private static final long FLAGS = 24;
    private static final long RECORDS = 512;
    /** Size of one arrival record: 18 cache lines (a multiple of 128 B, so the two never share a line pair). */
    private static final long RECORD_LENGTH = 1152;
    private static final long RECORD_SIGNATURE = 8;
    /** An inline payload of up to {@link #FIRST_LINE_PAYLOAD_BYTES} shares the cache line of flag and signature. */
    private static final long RECORD_PAYLOAD = RECORD_SIGNATURE + Signature.BYTES;
    private static final long FIRST_LINE_PAYLOAD_BYTES = 64 - RECORD_PAYLOAD;
    /**
     * A larger payload starts at the next cache line: at {@link #RECORD_PAYLOAD} (40) every 64-byte vector load of
     * the reduction would straddle two lines, and the lines are the peer's, just written.
     */
    private static final long RECORD_PAYLOAD_ALIGNED = 64;
    private static final VarHandle LONG = ValueLayout.JAVA_LONG.varHandle();

    private MemorySegment segment;

    /** Views {@code controlBlock} (this rank's, or a peer's mapped read-only); returns this. */
    public ControlBlockFlyweight wrap(MemorySegment controlBlock) {
        this.segment = controlBlock;
        return this;
    }

    /** The viewed memory (a source of inline payloads for the reduction kernels). */
    public MemorySegment segment() {
        return segment;
    }

    // ------------------------------------------------------------------------------------------------ status

    /** The owner's status: 0 running, else aborted or failed (acquire: the reason written before is visible). */
    public long status() {
        return (long) LONG.getAcquire(segment, STATUS);
    }

    /**
     * Marks the owner aborted or failed because of rank {@code originRank}, for {@code reason} (peers' health checks
     * see it): the reason first, then the status word with release.
     */
    public void markAborted(int originRank, String reason) {
        markAborted(originRank, reason, false);
    }

    /** {@link #markAborted(int, String)}, as a revocation by {@code originRank} when {@code revoke}. */
    public void markAborted(int originRank, String reason, boolean revoke) {
        byte[] text = reason == null ? new byte[0] : reason.getBytes(java.nio.charset.StandardCharsets.UTF_8);
        int length = (int) Math.min(text.length, REASON_BYTES - 4);
        MemorySegment.copy(text, 0, segment, ValueLayout.JAVA_BYTE, REASON + 4, length);
        segment.set(ValueLayout.JAVA_INT, REASON, length);
        LONG.setRelease(segment, STATUS, 1L | (revoke ? REVOKED : 0) | ((long) (originRank + 1) << 32));
    }

    /** The owner's heartbeat: a count its process advances while it runs ({@link Heartbeat}). */
    public long heartbeat() {
        return (long) LONG.getOpaque(segment, HEARTBEAT);
    }

    /** Advances the heartbeat (the owner's heartbeat thread only). */
    void beat() {
        LONG.setOpaque(segment, HEARTBEAT, (long) LONG.get(segment, HEARTBEAT) + 1);
    }

    /** Status bit: the owner's communicator was revoked (by the origin rank), not aborted. */
    public static final long REVOKED = 2L;

    /** Whether a status word says revoked. */
    public static boolean revoked(long status) {
        return (status & REVOKED) != 0;
    }

    /** The rank an aborted owner named as the origin of its failure, or -1 (a status word from before it did). */
    public static int abortOrigin(long status) {
        return (int) (status >>> 32) - 1;
    }

    /** The reason an aborted owner gave. */
    public String abortReason() {
        int length = segment.get(ValueLayout.JAVA_INT, REASON);
        if (length <= 0 || length > REASON_BYTES - 4) {
            return "(no reason)";
        }
        return new String(segment.asSlice(REASON + 4, length).toArray(ValueLayout.JAVA_BYTE),
            java.nio.charset.StandardCharsets.UTF_8);
    }

    /** The CPU the owner last gave up in a direct-path wait, or -1 when unknown. */
    public int waitingCpu() {
        return segment.get(ValueLayout.JAVA_INT, WAITING_CPU) - 1;
    }

    /** Publishes the CPU this rank waits on. */
    public void waitingCpu(int cpu) {
        segment.set(ValueLayout.JAVA_INT, WAITING_CPU, cpu + 1);
    }

    // ------------------------------------------------------------------------------------------------ descriptors

    private static long input(int parity) {
        return INPUT_DESCRIPTORS + parity * DESCRIPTOR_LENGTH;
    }

    private static long output(int parity) {
        return OUTPUT_DESCRIPTORS + parity * DESCRIPTOR_LENGTH;
    }

    /** Publishes that this rank's input of epoch parity {@code parity} is in its staging half. */
    public void inputStaged(int parity) {
        segment.set(ValueLayout.JAVA_LONG, input(parity) + MODE, MODE_STAGED);
    }

    /** Publishes that this rank's input is at {@code offset} of its allocation {@code id}. */
    public void inputInAllocation(int parity, int id, long offset) {
        long d = input(parity);
        segment.set(ValueLayout.JAVA_LONG, d + MODE, MODE_ALLOCATION);
        segment.set(ValueLayout.JAVA_LONG, d + ID, id);
        segment.set(ValueLayout.JAVA_LONG, d + OFFSET, offset);
    }

    /** Whether the input of parity {@code parity} is in an allocation (else: staged). */
    public boolean inputIsAllocation(int parity) {
        return segment.get(ValueLayout.JAVA_LONG, input(parity) + MODE) == MODE_ALLOCATION;
    }

    /** The allocation id of an allocation input. */
    public int inputAllocationId(int parity) {
        return (int) segment.get(ValueLayout.JAVA_LONG, input(parity) + ID);
    }

    /** The offset of an allocation input in its allocation. */
    public long inputOffset(int parity) {
        return segment.get(ValueLayout.JAVA_LONG, input(parity) + OFFSET);
    }

    /**
     * Publishes where this rank's output is (allocation {@code id} at {@code offset}, or {@code id < 0}: not shared
     * memory) and how it relates to the input ({@link #OUT_SEPARATE}, {@link #OUT_IN_PLACE}, or neither).
     */
    public void output(int parity, int id, long offset, long flags) {
        long d = output(parity);
        segment.set(ValueLayout.JAVA_LONG, d + MODE, id >= 0 ? MODE_ALLOCATION : MODE_STAGED);
        segment.set(ValueLayout.JAVA_LONG, d + ID, id);
        segment.set(ValueLayout.JAVA_LONG, d + OFFSET, offset);
        segment.set(ValueLayout.JAVA_LONG, d + FLAGS, flags);
    }

    /** Whether the output of parity {@code parity} is in an allocation. */
    public boolean outputIsAllocation(int parity) {
        return segment.get(ValueLayout.JAVA_LONG, output(parity) + MODE) == MODE_ALLOCATION;
    }

    /** The allocation id of the output. */
    public int outputAllocationId(int parity) {
        return (int) segment.get(ValueLayout.JAVA_LONG, output(parity) + ID);
    }

    /** The output's offset in its allocation. */
    public long outputOffset(int parity) {
        return segment.get(ValueLayout.JAVA_LONG, output(parity) + OFFSET);
    }

    /** How the output relates to the input ({@link #OUT_SEPARATE}, {@link #OUT_IN_PLACE}). */
    public long outputFlags(int parity) {
        return segment.get(ValueLayout.JAVA_LONG, output(parity) + FLAGS);
    }

    // ------------------------------------------------------------------------------------------------ arrivals

    private static long record(int parity) {
        return RECORDS + parity * RECORD_LENGTH;
    }

    /** The epoch the owner last arrived at with a record of this parity (acquire: what it wrote before is visible). */
    public long arrivedEpoch(int parity) {
        return (long) LONG.getAcquire(segment, record(parity));
    }

    /** Arrives at {@code epoch} (release: the signature and payload written before are visible to peers). */
    public void arrive(int parity, long epoch) {
        LONG.setRelease(segment, record(parity), epoch);
    }

    /** Offset of the signature in the record of this parity. */
    public static long signatureOffset(int parity) {
        return record(parity) + RECORD_SIGNATURE;
    }

    /** Offset of an inline payload of {@code bytes} in the record of this parity (every rank derives it alike). */
    public static long payloadOffset(int parity, long bytes) {
        return record(parity) + (bytes <= FIRST_LINE_PAYLOAD_BYTES ? RECORD_PAYLOAD : RECORD_PAYLOAD_ALIGNED);
    }
}
