package io.jccl.collectives;

import io.jccl.collectives.store.TcpStore;
import org.junit.jupiter.api.Test;

import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * A split communicator gets its parent's store succession (the job's store, then the standby stores), renumbered:
 * its shrink and agree survive the store host's death like the parent's (docs/fault-tolerance.md).
 */
class SplitSuccessionTest {
    @Test
    void aSplitKeepsTheStoresInOrderWithTheirHostsRenumbered() {
        try (TcpStore job = new TcpStore("127.0.0.1", 0, true, TimeUnit.SECONDS.toNanos(5))) {
            String list = "0@127.0.0.1:" + job.port() + ",1@10.0.0.2:4001,2@10.0.0.3:4002,3@10.0.0.4:4003";
            try (StoreSuccession parent = StoreSuccession.fromDescription(list, job, 2, null);
                 StoreSuccession split = parent.forSplit(new int[] {3, 2});
                 StoreSuccession other = parent.forSplit(new int[] {0, 1})) {
                // members {3, 2} (new ranks 0, 1): rank 0 and rank 1 are not members, their stores still serve
                assertEquals("-1@127.0.0.1:" + job.port() + ",-1@10.0.0.2:4001,1@10.0.0.3:4002,0@10.0.0.4:4003",
                    split.describe());
                assertEquals("0@127.0.0.1:" + job.port() + ",1@10.0.0.2:4001,-1@10.0.0.3:4002,-1@10.0.0.4:4003",
                    other.describe());
                assertEquals(job, split.first(), "the job's store client is shared");
            }
        }
    }
}
