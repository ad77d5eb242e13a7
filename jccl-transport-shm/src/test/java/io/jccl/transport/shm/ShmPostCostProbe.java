package io.jccl.transport.shm;

import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.ReceiveWorkRequest;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.WorkCompletion;

/**
 * Single-thread CPU cost of the requester path (no second thread, so no scheduling noise): unsignaled 8-byte
 * WRITEs, and SEND + receiver poll + re-post. Run like {@link ShmPerfProbe}.
 */
public final class ShmPostCostProbe {
    private ShmPostCostProbe() {
    }

    /** Entry point. */
    public static void main(String[] args) {
        int n = args.length > 0 ? Integer.parseInt(args[0]) : 2_000_000;
        try (ShmTestSupport.Side a = new ShmTestSupport.Side(); ShmTestSupport.Side b = new ShmTestSupport.Side()) {
            ShmTestSupport.connect(a, b);
            MemoryRegion ra = a.pd.allocateMemory(1 << 16, ShmTestSupport.ALL_REMOTE);
            MemoryRegion rb = b.pd.allocateMemory(1 << 16, ShmTestSupport.ALL_REMOTE);
            SendWorkRequest w = new SendWorkRequest();
            ReceiveWorkRequest r = new ReceiveWorkRequest();
            WorkCompletion[] wc = WorkCompletion.array(4);
            com.sun.management.ThreadMXBean threads =
                (com.sun.management.ThreadMXBean) java.lang.management.ManagementFactory.getThreadMXBean();
            for (int round = 0; round < 3; round++) {
                long bytes0 = threads.getCurrentThreadAllocatedBytes();
                long t0 = System.nanoTime();
                for (int i = 0; i < n; i++) {
                    a.qp.postSend(w.opcode(SendOpcode.RDMA_WRITE).flags(0).local(ra, 0, 8)
                        .remote(rb.address(), rb.rkey()));
                }
                long t1 = System.nanoTime();
                for (int i = 0; i < n; i++) {
                    b.qp.postReceive(r.local(rb, 128, 64));
                    a.qp.postSend(w.opcode(SendOpcode.SEND).flags(0).local(ra, 0, 8));
                    b.cq.poll(wc, 4);
                }
                long t2 = System.nanoTime();
                long allocated = threads.getCurrentThreadAllocatedBytes() - bytes0;
                System.out.printf("WRITE post+execute: %.0f ns/op; SEND+recv completion+repost: %.0f ns/op; "
                    + "allocated %.3f bytes/op%n", (t1 - t0) / (double) n, (t2 - t1) / (double) n,
                    allocated / (2.0 * n));
            }
        }
    }
}
