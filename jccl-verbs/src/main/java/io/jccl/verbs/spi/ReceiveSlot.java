package io.jccl.verbs.spi;

import io.jccl.verbs.ReceiveWorkRequest;

/** A provider's copy of a posted receive request, preallocated per receive-queue entry. */
public final class ReceiveSlot {
    /** Caller's id. */
    public long wrId;
    /** Number of scatter/gather entries used. */
    public int sgeCount;
    /** Scatter/gather addresses. */
    public final long[] sgeAddress;
    /** Scatter/gather lengths. */
    public final int[] sgeLength;
    /** Scatter/gather local keys. */
    public final int[] sgeLkey;
    /** Total capacity in bytes. */
    public long length;

    ReceiveSlot(int maxSge) {
        sgeAddress = new long[maxSge];
        sgeLength = new int[maxSge];
        sgeLkey = new int[maxSge];
    }

    void copyFrom(ReceiveWorkRequest request) {
        wrId = request.wrId();
        sgeCount = request.sgeCount();
        long total = 0;
        for (int i = 0; i < sgeCount; i++) {
            var sge = request.sge(i);
            sgeAddress[i] = sge.address();
            sgeLength[i] = sge.length();
            sgeLkey[i] = sge.lkey();
            total += sge.length();
        }
        length = total;
    }
}
