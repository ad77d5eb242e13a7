package io.jccl.services.ingest;

import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.ConnectionManager;
import io.jccl.verbs.Context;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.ProtectionDomain;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.Verbs;
import io.jccl.verbs.WorkCompletion;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.zip.CRC32C;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Malformed records, holes left by a producer that reserved and never wrote, and a full disk. */
class IngestBadInputTest {
    /** A producer that speaks the ring's protocol with raw verbs and breaks it on purpose. */
    private static final class Rogue implements AutoCloseable {
        final Context context;
        final ProtectionDomain domain;
        final CompletionQueue queue;
        final MemoryRegion buffer;
        final QueuePair queuePair;
        final Wire.Reply reply;
        final WorkCompletion[] wc = WorkCompletion.array(1);

        Rogue(String device, IngestConsumer consumer, int id) {
            context = Verbs.device(device).open();
            domain = context.allocateProtectionDomain();
            queue = context.createCompletionQueue(16);
            buffer = domain.allocateMemory(4096, AccessFlag.LOCAL_WRITE);
            ConnectionManager.Connection c = ConnectionManager.connect(domain, QueuePairInitAttributes.of(queue),
                consumer.address(), Wire.parameters(Wire.request(id), java.time.Duration.ofSeconds(10)));
            queuePair = c.queuePair();
            reply = Wire.Reply.decode(c.remotePrivateData());
        }

        long reserve(int size) {
            queuePair.postSend(new SendWorkRequest().opcode(SendOpcode.ATOMIC_FETCH_AND_ADD).flags(SendFlag.SIGNALED)
                .remote(reply.ringAddress(), reply.rkey()).atomic(size, 0).local(buffer, 0, 8));
            await();
            return buffer.segment().get(ValueLayout.JAVA_LONG, 0);
        }

        /** Writes a 64-byte record built by {@code shape} at a reserved position and commits it. */
        void commit(long position, int producer, long sequence, boolean badCrc, boolean badLength) {
            MemorySegment m = buffer.segment();
            m.asSlice(64, 64).fill((byte) 0x5A);
            RecordFormat.writeHeader(m, m.asByteBuffer(), 64, 32, producer, sequence, Wire.epochNanos(), new CRC32C());
            if (badCrc) {
                m.set(ValueLayout.JAVA_BYTE, 64 + 40, (byte) 1);
            }
            if (badLength) {
                m.set(ValueLayout.JAVA_INT_UNALIGNED, 64, 1 << 20);
            }
            long offset = position & (reply.ringBytes() - 1);
            queuePair.postSend(new SendWorkRequest().opcode(SendOpcode.RDMA_WRITE_WITH_IMM).flags(SendFlag.SIGNALED)
                .remote(reply.ringAddress() + reply.dataOffset() + offset, reply.rkey()).immediateData((int) position)
                .local(buffer, 64, 64));
            await();
        }

        void await() {
            assertEquals(1, queue.poll(wc, 1, TimeUnit.SECONDS.toNanos(20)));
            assertTrue(wc[0].isSuccess(), wc[0].toString());
        }

        @Override
        public void close() {
            IngestConsumer.closeAll(queuePair, buffer, queue, domain, context);
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldSkipMalformedRecordsAndHolesAndKeepEveryGoodRecord(String device, @TempDir Path dir)
        throws Exception {
        IngestSettings s = IngestRingTest.settings(device, dir).withTimes(10, 1000, 20_000);
        try (ConsumerLoop loop = new ConsumerLoop(IngestConsumer.open(s));
             IngestProducer good = IngestProducer.connect(loop.consumer.address(), 0, s);
             Rogue rogue = new Rogue(device, loop.consumer, 9)) {
            long seq = 0;
            good.append(ConsumerLoop.payload(0, ++seq, 1024));
            rogue.commit(rogue.reserve(64), 9, 1, true, false);      // bad CRC: skipped by its length
            good.append(ConsumerLoop.payload(0, ++seq, 1024));
            rogue.reserve(64);                                       // reserved, never written: a hole
            good.append(ConsumerLoop.payload(0, ++seq, 1024));
            rogue.commit(rogue.reserve(64), 9, 1, false, true);      // a length nobody can trust
            good.append(ConsumerLoop.payload(0, ++seq, 1024));
            rogue.commit(rogue.reserve(64), 70, 1, false, false);    // a producer id outside the consumer's
            good.append(ConsumerLoop.payload(0, ++seq, 1024));
            good.flush(Duration.ofSeconds(20));
            assertEquals(seq, good.acknowledgedSequence());
            IngestStats stats = loop.consumer.stats();
            assertEquals(seq, stats.records(), stats.toString());
            assertEquals(3, stats.malformed(), stats.toString());
            assertTrue(stats.holes() >= 1, stats.toString()); // the rogue's; more if a good append lost its lease
            for (int i = 0; i < seq; i++) {
                assertEquals(i + 1, loop.seen.get(i).sequence());
                assertArrayEquals(ConsumerLoop.payload(0, i + 1, 1024), loop.seen.get(i).payload());
            }
        }
    }

    @Test
    void shouldStopWithAClearErrorOnAFullDiskAndLoseNothingAcknowledged(@TempDir Path dir) throws Exception {
        Assumptions.assumeTrue("root".equals(System.getProperty("user.name")), "mounting a tmpfs needs root");
        Path mount = Files.createDirectories(dir.resolve("tmpfs"));
        Process m = new ProcessBuilder("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mount.toString())
            .redirectErrorStream(true).start();
        Assumptions.assumeTrue(m.waitFor() == 0, "mount -t tmpfs failed: " + new String(m.getInputStream()
            .readAllBytes()));
        try {
            IngestSettings s = IngestRingTest.settings("shm0", mount).withTimes(5, 400, 3000);
            IngestException full = null;
            long acknowledged;
            List<Long> appended = new ArrayList<>();
            try (ConsumerLoop loop = new ConsumerLoop(IngestConsumer.open(s));
                 IngestProducer p = IngestProducer.connect(loop.consumer.address(), 1, s)) {
                byte[] payload = new byte[1000];
                for (long seq = 1; seq <= 3000 && full == null; seq++) {
                    java.util.Arrays.fill(payload, (byte) seq);
                    try {
                        appended.add(p.append(payload));
                    } catch (IngestException e) {
                        full = e;
                    }
                    if (loop.error.get() != null && full == null) {
                        try {
                            p.flush(Duration.ofMillis(500));
                        } catch (IngestException e) {
                            full = e;
                        }
                    }
                }
                Throwable consumerError = loop.error.get();
                assertTrue(consumerError instanceof IngestException
                    && consumerError.getMessage().contains("No space left"), String.valueOf(consumerError));
                assertTrue(full != null, "the producer saw no error");
                acknowledged = p.acknowledgedSequence();
                assertTrue(acknowledged > 0 && acknowledged < appended.size(), "acknowledged " + acknowledged);
                assertTrue(p.retainedRecords() > 0, "unacknowledged records are kept");
                loop.stop();
            }
            List<Long> durable = new ArrayList<>();
            long[] last = IngestLog.replay(mount, (producer, sequence, ts, buffer, offset, length) -> {
                assertEquals((byte) sequence, buffer.get(ValueLayout.JAVA_BYTE, offset + length - 1));
                durable.add(sequence);
            });
            assertTrue(last[1] >= acknowledged, last[1] + " < " + acknowledged);
            for (int i = 0; i < durable.size(); i++) {
                assertEquals(i + 1, durable.get(i));
            }
        } finally {
            if (new ProcessBuilder("umount", mount.toString()).start().waitFor() != 0) {
                new ProcessBuilder("umount", "-l", mount.toString()).start().waitFor(); // still busy: detach
            }
        }
    }
}
