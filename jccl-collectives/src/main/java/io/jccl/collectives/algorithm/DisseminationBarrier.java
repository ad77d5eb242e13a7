package io.jccl.collectives.algorithm;

import io.jccl.collectives.core.Signature;
import io.jccl.collectives.message.Exchange;

import java.lang.foreign.MemorySegment;

/** Dissemination barrier: ceil(log2 n) rounds of zero-byte messages to rank+2^k, from rank-2^k. */
public final class DisseminationBarrier {
    private DisseminationBarrier() {
    }

    /** Returns once every rank of the group has entered. */
    public static void run(Exchange x, Signature sig) {
        int n = x.groupSize();
        int me = x.groupRank();
        for (int k = 1; k < n; k <<= 1) {
            x.send(x.peer(me + k), sig, MemorySegment.NULL, 0, 0);
            x.receive(x.peer(me - k), sig, MemorySegment.NULL, 0, 0, null, null);
            x.run();
        }
    }
}
