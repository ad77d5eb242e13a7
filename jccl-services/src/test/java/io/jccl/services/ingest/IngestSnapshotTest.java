package io.jccl.services.ingest;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.management.ManagementFactory;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Recovery of the snapshot directory, and the append/poll path allocating nothing. */
class IngestSnapshotTest {
    @Test
    void shouldTruncateAnUnacknowledgedTailAndRefuseACorruptedRecord(@TempDir Path dir) throws Exception {
        IngestSettings s = IngestRingTest.settings("shm0", dir);
        try (ConsumerLoop loop = new ConsumerLoop(IngestConsumer.open(s));
             IngestProducer p = IngestProducer.connect(loop.consumer.address(), 2, s)) {
            for (long seq = 1; seq <= 100; seq++) {
                p.append(ConsumerLoop.payload(2, seq, 300));
            }
            p.flush(Duration.ofSeconds(20));
        }
        Path segment = dir.resolve(SnapshotStore.segmentName(1));
        long durableBytes = Files.size(segment);
        try (FileChannel out = FileChannel.open(segment, StandardOpenOption.APPEND)) {
            out.write(ByteBuffer.wrap(new byte[100])); // what a killed consumer wrote after its last snapshot
        }
        try (IngestConsumer reopened = IngestConsumer.open(s)) {
            assertEquals(100, reopened.acknowledgedSequence(2));
            assertEquals(100, reopened.acceptedSequence(2), "the next accepted is the next durable");
        }
        assertEquals(durableBytes, Files.size(segment), "the unacknowledged tail is cut at recovery");
        long[] count = new long[1];
        IngestLog.replay(dir, (producer, sequence, ts, buffer, offset, length) -> count[0]++);
        assertEquals(100, count[0]);

        try (FileChannel out = FileChannel.open(segment, StandardOpenOption.WRITE)) {
            out.write(ByteBuffer.wrap(new byte[] {(byte) 0xFF}), durableBytes / 2); // a flipped byte on disk
        }
        IngestException corrupt = assertThrows(IngestException.class, () -> IngestConsumer.open(s));
        assertTrue(corrupt.getMessage().contains(segment.toString())
            && (corrupt.getMessage().contains("CRC32C mismatch") || corrupt.getMessage().contains("malformed")),
            corrupt.getMessage());
    }

    @Test
    void shouldNotAllocatePerRecordWhenAppendingAndPolling(@TempDir Path dir) {
        com.sun.management.ThreadMXBean threads = (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
        // Snapshots (a few objects each) once a minute: none during the measured rounds.
        IngestSettings s = IngestRingTest.settings("shm0", dir).withTimes(60_000, 2000, 20_000)
            .withRetentionBytes(16 << 20);
        RecordHandler handler = (producer, sequence, timestampNs, buffer, offset, length) -> { };
        try (IngestConsumer consumer = IngestConsumer.open(s);
             IngestProducer p = IngestProducer.connect(consumer.address(), 0, s);
             Arena arena = Arena.ofConfined()) {
            MemorySegment payload = arena.allocate(100);
            int rounds = 10_000;
            loop(consumer, p, payload, handler, rounds); // warm-up: JIT
            long before = threads.getCurrentThreadAllocatedBytes();
            loop(consumer, p, payload, handler, rounds);
            long allocated = threads.getCurrentThreadAllocatedBytes() - before;
            assertTrue(allocated < 16L * rounds, allocated + " B allocated over " + rounds + " appends and polls");
        }
    }

    private static void loop(IngestConsumer consumer, IngestProducer producer, MemorySegment payload,
                             RecordHandler handler, int rounds) {
        for (int i = 0; i < rounds; i++) {
            producer.append(payload, 0, 100);
            while (consumer.poll(handler, 16) == 0) {
                Thread.onSpinWait();
            }
        }
    }
}
