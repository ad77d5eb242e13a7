package io.jccl.verbs.spi;

import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.Context;
import io.jccl.verbs.Counter;
import io.jccl.verbs.CounterShare;
import io.jccl.verbs.ProtectionDomain;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.QueuePairState;
import io.jccl.verbs.testing.LoopProvider;
import jdk.jfr.Recording;
import jdk.jfr.consumer.RecordedEvent;
import jdk.jfr.consumer.RecordingFile;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.time.Duration;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotSame;

/**
 * What the verbs layer offers observers: a {@link CounterShare} that code moving data without work requests counts
 * into (its adds show in the context's counters, and stay after it closes), and the {@code io.jccl.QueuePairError}
 * JFR event when a queue pair enters ERROR.
 */
class ObservabilityTest {
    @TempDir
    Path dir;

    @Test
    void shouldShowACounterSharesAddsInTheContextsCounters() {
        try (Context context = new LoopProvider().devices().get(0).open()) {
            long before = context.counters().get(Counter.PORT_XMIT_DATA);
            CounterShare share = context.openCounterShare();
            assertNotSame(CounterShare.NONE, share);
            share.add(Counter.PORT_XMIT_DATA, 4096);
            share.add(Counter.PORT_XMIT_PACKETS, 1);
            assertEquals(before + 4096, context.counters().get(Counter.PORT_XMIT_DATA));
            share.close();
            assertEquals(before + 4096, context.counters().get(Counter.PORT_XMIT_DATA), "folded at close");
            share.add(Counter.PORT_XMIT_DATA, 1); // after close: not counted
            assertEquals(before + 4096, context.counters().get(Counter.PORT_XMIT_DATA));
        }
    }

    @Test
    void shouldRecordAQueuePairErrorEvent() throws Exception {
        int qpn;
        try (Recording recording = new Recording()) {
            recording.enable("io.jccl.QueuePairError").withThreshold(Duration.ZERO);
            recording.start();
            try (Context context = new LoopProvider().devices().get(0).open()) {
                ProtectionDomain pd = context.allocateProtectionDomain();
                CompletionQueue cq = context.createCompletionQueue(16);
                QueuePair qp = pd.createQueuePair(QueuePairInitAttributes.of(cq));
                qpn = qp.queuePairNumber();
                qp.modify(QueuePairAttributes.toInit());
                qp.modify(new QueuePairAttributes().state(QueuePairState.ERROR));
                assertEquals(QueuePairState.ERROR, qp.state());
            }
            recording.stop();
            Path file = dir.resolve("qp.jfr");
            recording.dump(file);
            List<RecordedEvent> events = RecordingFile.readAllEvents(file).stream()
                .filter(e -> e.getEventType().getName().equals("io.jccl.QueuePairError"))
                .filter(e -> e.getInt("queuePairNumber") == qpn).toList();
            assertEquals(1, events.size(), events.toString());
            RecordedEvent e = events.get(0);
            assertEquals("loop0", e.getString("device"));
            assertEquals("modified to ERROR", e.getString("reason"));
            assertEquals("INIT", e.getString("previousState"));
            assertEquals("ERROR", e.getString("newState"));
        }
    }
}
