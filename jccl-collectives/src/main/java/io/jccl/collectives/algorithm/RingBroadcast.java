package io.jccl.collectives.algorithm;

import io.jccl.collectives.core.Signature;
import io.jccl.collectives.message.Exchange;
import io.jccl.collectives.message.Transfer;

import java.lang.foreign.MemorySegment;

/**
 * Pipelined chain broadcast (JCCL_ALGO's {@code ring}): root → root+1 → …; each rank forwards chunks as they
 * arrive, so a large message streams through the chain at link speed.
 */
public final class RingBroadcast {
    private RingBroadcast() {
    }

    /** Broadcasts {@code bytes} of {@code root}'s {@code buf} (native) into every rank's. */
    public static void run(Exchange x, Signature sig, MemorySegment buf, long bytes, int root) {
        int n = x.groupSize();
        int me = x.groupRank();
        int vr = Math.floorMod(me - root, n);
        Transfer in = null;
        if (vr > 0) {
            in = x.receive(x.peer(me - 1), sig, buf, 0, bytes, null, null).placed();
        }
        if (vr < n - 1) {
            x.send(x.peer(me + 1), sig, buf, 0, bytes).placed().after(in);
        }
        x.run();
    }
}
