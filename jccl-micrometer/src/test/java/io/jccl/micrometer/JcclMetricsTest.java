package io.jccl.micrometer;

import io.jccl.collectives.Communicator;
import io.jccl.collectives.CommunicatorOptions;
import io.jccl.collectives.DataType;
import io.jccl.collectives.ReduceOp;
import io.jccl.collectives.store.InMemoryStore;
import io.jccl.verbs.Counter;
import io.micrometer.core.instrument.FunctionCounter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import org.junit.jupiter.api.Test;

import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;

/** {@link JcclMetrics} over a 2-rank shm0 communicator (ranks as threads), read from a SimpleMeterRegistry. */
class JcclMetricsTest {
    private static final int ROUNDS = 5;
    private static final long BYTES = 4096;

    @Test
    void shouldExposeCollectiveAndDeviceCountersAsMeters() throws Exception {
        CommunicatorOptions options = CommunicatorOptions.defaults().withTransports("shm0").withName("metrics")
            .withTimeout(Duration.ofSeconds(30)).withAlgorithms("allreduce:direct;broadcast:ring");
        InMemoryStore store = new InMemoryStore();
        List<CompletableFuture<Void>> ranks = new ArrayList<>();
        for (int r = 0; r < 2; r++) {
            int rank = r;
            ranks.add(CompletableFuture.runAsync(() -> {
                try (Communicator c = Communicator.create(store, rank, 2, options)) {
                    check(c);
                }
            }, task -> Thread.ofPlatform().daemon().name("rank-" + rank).start(task)));
        }
        for (CompletableFuture<Void> f : ranks) {
            f.get(90, TimeUnit.SECONDS);
        }
    }

    private static void check(Communicator c) {
        SimpleMeterRegistry registry = new SimpleMeterRegistry();
        JcclMetrics.bind(registry, c);
        MemorySegment buf = c.allocate(BYTES);
        for (int i = 0; i < ROUNDS; i++) {
            c.allReduce(buf, BYTES / 4, DataType.FLOAT32, ReduceOp.SUM);
        }
        c.broadcast(buf, BYTES / 4, DataType.INT32, 0);
        String rank = Integer.toString(c.rank());

        assertEquals(ROUNDS, counter(registry, "jccl.collective.operations", "allReduce", rank));
        assertEquals(ROUNDS * BYTES, counter(registry, "jccl.collective.bytes", "allReduce", rank));
        assertEquals(0, counter(registry, "jccl.collective.errors", "allReduce", rank));
        assertEquals(1, counter(registry, "jccl.collective.operations", "broadcast", rank));
        assertEquals(0, counter(registry, "jccl.collective.operations", "gather", rank), "registered before use");

        // device meters: the direct all-reduces' bus bytes (1 × size at 2 ranks) plus the ring broadcast's
        // work requests, as the device counts them itself
        FunctionCounter xmit = registry.find("jccl.device.port.xmit.data").tag("device", "shm0").tag("rank", rank)
            .functionCounter();
        assertNotNull(xmit, "device meter for shm0");
        // the meter reads the device's counters (a peer's late completions may move them: bounds, not equality)
        long before = c.deviceCounters().get("shm0").get(Counter.PORT_XMIT_DATA);
        double metered = xmit.count();
        long after = c.deviceCounters().get("shm0").get(Counter.PORT_XMIT_DATA);
        assertEquals(true, before <= metered && metered <= after, before + " <= " + metered + " <= " + after);
        assertEquals(true, xmit.count() >= ROUNDS * BYTES, "direct-path bytes are in the device counters: "
            + xmit.count());
        assertEquals("bytes", xmit.getId().getBaseUnit());

        Gauge size = registry.find("jccl.communicator.size").tag("communicator", "metrics").tag("rank", rank).gauge();
        assertEquals(2, size.value());
        c.barrier(); // both ranks read their meters before either closes
    }

    private static double counter(SimpleMeterRegistry registry, String name, String collective, String rank) {
        FunctionCounter counter = registry.find(name).tag("collective", collective).tag("rank", rank)
            .tag("communicator", "metrics").functionCounter();
        assertNotNull(counter, name + " " + collective);
        return counter.count();
    }

    @Test
    void shouldNameDeviceMetersAfterTheLinuxCounters() {
        assertEquals("jccl.device.port.xmit.data", JcclMetrics.meterName(Counter.PORT_XMIT_DATA));
        assertEquals("jccl.device.rnr.nak.retry.err", JcclMetrics.meterName(Counter.RNR_NAK_RETRY_ERR));
    }
}
