package io.jccl.collectives.algorithm;

import io.jccl.collectives.DataType;
import io.jccl.collectives.ReduceOp;
import io.jccl.collectives.core.Signature;
import io.jccl.collectives.message.Exchange;

import java.lang.foreign.MemorySegment;

/**
 * Recursive doubling with whole vectors (small messages on the message path): log2(p) exchange steps over the
 * largest power of two p ≤ n; the first 2(n−p) ranks fold in pairs first ({@link PowerOfTwoFold}). Each step sends
 * a copy of the running vector from a scratch buffer and reduces the partner's straight into the result. Both
 * partners combine the same two partial vectors (the kernels' two-operand combine is commutative, bit for bit), so
 * every rank ends with an identical result.
 */
public final class RecursiveDoublingAllReduce {
    private RecursiveDoublingAllReduce() {
    }

    /** All-reduces {@code buf} (native) in place; {@code scratch} holds at least as many bytes. */
    public static void run(Exchange x, Signature sig, MemorySegment buf, long count, DataType type, ReduceOp op,
                           MemorySegment scratch) {
        long bytes = count * type.sizeBytes();
        int n = x.groupSize();
        int p2 = Integer.highestOneBit(n);
        int rem = n - p2;
        int vr = PowerOfTwoFold.foldIn(x, sig, buf, bytes, type, op, rem);
        if (vr < 0) {
            return;
        }
        for (int d = 1; d < p2; d <<= 1) {
            int partner = PowerOfTwoFold.realRank(vr ^ d, rem);
            MemorySegment.copy(buf, 0, scratch, 0, bytes);
            x.send(x.peer(partner), sig, scratch, 0, bytes);
            x.receive(x.peer(partner), sig, buf, 0, bytes, type, op);
            x.run();
        }
        if (op == ReduceOp.AVG) {
            x.kernels().divide(type, buf, 0, count, n);
        }
        PowerOfTwoFold.foldOut(x, sig, buf, bytes, rem);
    }
}
