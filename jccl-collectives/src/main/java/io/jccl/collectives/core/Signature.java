package io.jccl.collectives.core;

import io.jccl.collectives.Collective;
import io.jccl.collectives.DataType;
import io.jccl.collectives.ReduceOp;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * The compact signature of an operation that travels in every chunk header (and in the direct path's arrival
 * records): sequence number, collective, count, type, operator and root. Every rank computes it from its own call;
 * a receiver compares it with what arrives, so ranks that called different operations get a mismatch error instead
 * of corrupt data. Layout (32 bytes): seq long, count long, collective/type/op/flags bytes, root int, chunk length
 * int, magic int.
 */
public final class Signature {
    /** Bytes of a signature in a header or record. */
    public static final int BYTES = 32;
    /** Last word of every signature ("JCCL"): tells a header from zeros or garbage. */
    public static final int MAGIC = 0x4A43_434C;
    private static final ValueLayout.OfLong L = ValueLayout.JAVA_LONG_UNALIGNED;
    private static final ValueLayout.OfInt I = ValueLayout.JAVA_INT_UNALIGNED;

    private long seq;
    private long count;
    private Collective collective;
    private DataType type;
    private ReduceOp op;
    private int root;

    /** Sets the operation this signature describes; returns this. */
    public Signature set(long seq, Collective collective, long count, DataType type, ReduceOp op, int root) {
        this.seq = seq;
        this.collective = collective;
        this.count = count;
        this.type = type;
        this.op = op;
        this.root = root;
        return this;
    }

    /** Writes the signature at {@code off} of {@code s}, with a chunk length ({@code -1}: not a chunk). */
    public void write(MemorySegment s, long off, int chunkBytes) {
        s.set(L, off, seq);
        s.set(L, off + 8, count);
        s.set(ValueLayout.JAVA_BYTE, off + 16, (byte) collective.ordinal());
        s.set(ValueLayout.JAVA_BYTE, off + 17, (byte) (type == null ? -1 : type.ordinal()));
        s.set(ValueLayout.JAVA_BYTE, off + 18, (byte) (op == null ? -1 : op.ordinal()));
        s.set(ValueLayout.JAVA_BYTE, off + 19, (byte) 0);
        s.set(I, off + 20, root);
        s.set(I, off + 24, chunkBytes);
        s.set(I, off + 28, MAGIC);
    }

    /** Whether the header at {@code off} carries this signature (chunk length is checked separately). */
    public boolean matches(MemorySegment s, long off) {
        return s.get(I, off + 28) == MAGIC && s.get(L, off) == seq && s.get(L, off + 8) == count
            && s.get(ValueLayout.JAVA_BYTE, off + 16) == (byte) collective.ordinal()
            && s.get(ValueLayout.JAVA_BYTE, off + 17) == (byte) (type == null ? -1 : type.ordinal())
            && s.get(ValueLayout.JAVA_BYTE, off + 18) == (byte) (op == null ? -1 : op.ordinal())
            && s.get(I, off + 20) == root;
    }

    /** The chunk length of the header at {@code off}. */
    public static int chunkBytes(MemorySegment s, long off) {
        return s.get(I, off + 24);
    }

    /** Human-readable form of the header at {@code off}. */
    public static String describe(MemorySegment s, long off) {
        if (s.get(I, off + 28) != MAGIC) {
            return "(no valid header)";
        }
        int c = s.get(ValueLayout.JAVA_BYTE, off + 16);
        int t = s.get(ValueLayout.JAVA_BYTE, off + 17);
        int o = s.get(ValueLayout.JAVA_BYTE, off + 18);
        return describe(s.get(L, off), c >= 0 && c < Collective.values().length ? Collective.values()[c] : null,
            s.get(L, off + 8), t >= 0 && t < DataType.values().length ? DataType.values()[t] : null,
            o >= 0 && o < ReduceOp.values().length ? ReduceOp.values()[o] : null, s.get(I, off + 20));
    }

    /** Human-readable form of an operation ("allReduce(count=8, FLOAT32, SUM) as op #3"). */
    public static String describe(long seq, Collective c, long count, DataType type, ReduceOp op, int root) {
        StringBuilder sb = new StringBuilder();
        sb.append(c == null ? "?" : c.displayName()).append("(count=").append(count);
        if (type != null) {
            sb.append(", ").append(type);
        }
        if (op != null) {
            sb.append(", ").append(op);
        }
        if (root >= 0) {
            sb.append(c == Collective.SEND_RECV ? ", peer=" : ", root=").append(root);
        }
        return sb.append(") as op #").append(seq).toString();
    }

    /** The operation's sequence number (what every rank's n-th collective shares). */
    public long sequence() {
        return seq;
    }

    @Override
    public String toString() {
        return describe(seq, collective, count, type, op, root);
    }
}
