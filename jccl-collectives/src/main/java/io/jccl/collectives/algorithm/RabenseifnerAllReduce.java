package io.jccl.collectives.algorithm;

import io.jccl.collectives.DataType;
import io.jccl.collectives.ReduceOp;
import io.jccl.collectives.core.Signature;
import io.jccl.collectives.message.Exchange;

import java.lang.foreign.MemorySegment;

/**
 * Rabenseifner's all-reduce: a recursive-halving reduce-scatter, then a recursive-doubling all-gather, over the
 * largest power of two of ranks (the others fold in first, {@link PowerOfTwoFold}). log2(p) steps each way and
 * bandwidth-optimal: the middle sizes' algorithm.
 */
public final class RabenseifnerAllReduce {
    private RabenseifnerAllReduce() {
    }

    /** All-reduces {@code buf} (native) in place. */
    public static void run(Exchange x, Signature sig, MemorySegment buf, long count, DataType type, ReduceOp op) {
        int es = type.sizeBytes();
        long bytes = count * es;
        int n = x.groupSize();
        int p2 = Integer.highestOneBit(n);
        int rem = n - p2;
        int vr = PowerOfTwoFold.foldIn(x, sig, buf, bytes, type, op, rem);
        if (vr < 0) {
            return;
        }
        int levels = Integer.numberOfTrailingZeros(p2);
        long[] lo = new long[levels + 1];
        long[] hi = new long[levels + 1];
        long l = 0;
        long h = count;
        int level = 0;
        for (int d = p2 >> 1; d >= 1; d >>= 1, level++) {
            int partnerV = vr ^ d;
            int partner = PowerOfTwoFold.realRank(partnerV, rem);
            long mid = l + (h - l) / 2;
            lo[level] = l;
            hi[level] = h;
            long keepLo;
            long keepHi;
            long sendLo;
            long sendHi;
            if (vr < partnerV) {
                keepLo = l;
                keepHi = mid;
                sendLo = mid;
                sendHi = h;
            } else {
                keepLo = mid;
                keepHi = h;
                sendLo = l;
                sendHi = mid;
            }
            x.send(x.peer(partner), sig, buf, sendLo * es, (sendHi - sendLo) * es);
            x.receive(x.peer(partner), sig, buf, keepLo * es, (keepHi - keepLo) * es, type, op);
            x.run();
            l = keepLo;
            h = keepHi;
        }
        if (op == ReduceOp.AVG) {
            x.kernels().divide(type, buf, l * es, h - l, n);
        }
        level--;
        for (int d = 1; d < p2; d <<= 1, level--) {
            int partnerV = vr ^ d;
            int partner = PowerOfTwoFold.realRank(partnerV, rem);
            long pl = lo[level];
            long ph = hi[level];
            long mid = pl + (ph - pl) / 2;
            long otherLo = vr < partnerV ? mid : pl;
            long otherHi = vr < partnerV ? ph : mid;
            x.send(x.peer(partner), sig, buf, l * es, (h - l) * es);
            x.receive(x.peer(partner), sig, buf, otherLo * es, (otherHi - otherLo) * es, null, null);
            x.run();
            l = pl;
            h = ph;
        }
        PowerOfTwoFold.foldOut(x, sig, buf, bytes, rem);
    }
}
