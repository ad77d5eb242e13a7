package io.jccl.collectives.algorithm;

import io.jccl.collectives.core.Signature;
import io.jccl.collectives.message.Exchange;

import java.lang.foreign.MemorySegment;

/** Binomial-tree broadcast: log2(n) steps; every rank that has the data forwards it to the next rank of the tree. */
public final class TreeBroadcast {
    private TreeBroadcast() {
    }

    /** Broadcasts {@code bytes} of {@code root}'s {@code buf} (native) into every rank's. */
    public static void run(Exchange x, Signature sig, MemorySegment buf, long bytes, int root) {
        int n = x.groupSize();
        int vr = Math.floorMod(x.groupRank() - root, n);
        int mask = 1;
        while (mask < n) {
            if ((vr & mask) != 0) {
                x.receive(x.peer(vr - mask + root), sig, buf, 0, bytes, null, null).placed();
                x.run();
                break;
            }
            mask <<= 1;
        }
        mask >>= 1;
        boolean any = false;
        while (mask > 0) {
            if (vr + mask < n) {
                x.send(x.peer(vr + mask + root), sig, buf, 0, bytes).placed();
                any = true;
            }
            mask >>= 1;
        }
        if (any) {
            x.run();
        }
    }
}
