package io.jccl.collectives.algorithm;

import io.jccl.collectives.DataType;
import io.jccl.collectives.ReduceOp;
import io.jccl.collectives.core.Signature;
import io.jccl.collectives.message.Exchange;

import java.lang.foreign.MemorySegment;

/**
 * The fold of recursive doubling and halving for a group that is not a power of two: of the first {@code 2 * rem}
 * ranks each even one hands its vector to the odd one after it, and gets the result back at the end.
 */
final class PowerOfTwoFold {
    private PowerOfTwoFold() {
    }

    /**
     * Folds: returns this rank's virtual rank among the power-of-two ranks, or -1 when it was an even folder (and
     * {@code buf} now holds the result).
     */
    static int foldIn(Exchange x, Signature sig, MemorySegment buf, long bytes, DataType type, ReduceOp op, int rem) {
        int me = x.groupRank();
        if (me >= 2 * rem) {
            return me - rem;
        }
        if ((me & 1) == 0) {
            x.send(x.peer(me + 1), sig, buf, 0, bytes);
            x.run();
            x.receive(x.peer(me + 1), sig, buf, 0, bytes, null, null);
            x.run();
            return -1;
        }
        x.receive(x.peer(me - 1), sig, buf, 0, bytes, type, op);
        x.run();
        return me / 2;
    }

    /** The real group rank of virtual rank {@code virtual} when the first {@code 2 * rem} ranks folded. */
    static int realRank(int virtual, int rem) {
        return virtual < rem ? 2 * virtual + 1 : virtual + rem;
    }

    /** Hands the result back to the even folder before this rank (the odd ones of the first 2 * rem ranks). */
    static void foldOut(Exchange x, Signature sig, MemorySegment buf, long bytes, int rem) {
        if (x.groupRank() < 2 * rem) {
            x.send(x.peer(x.groupRank() - 1), sig, buf, 0, bytes);
            x.run();
        }
    }
}
