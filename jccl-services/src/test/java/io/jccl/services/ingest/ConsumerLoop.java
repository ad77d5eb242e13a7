package io.jccl.services.ingest;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicReference;

/** Polls a consumer on a thread of its own and keeps what it reads (payloads copied), for the tests. */
final class ConsumerLoop implements AutoCloseable {
    /** A record as the handler saw it. */
    record Seen(int producer, long sequence, byte[] payload) {
    }

    final IngestConsumer consumer;
    final List<Seen> seen = new CopyOnWriteArrayList<>();
    final AtomicReference<Throwable> error = new AtomicReference<>();
    private volatile boolean running = true;
    private final Thread thread;

    ConsumerLoop(IngestConsumer consumer) {
        this.consumer = consumer;
        this.thread = Thread.ofPlatform().daemon().start(() -> {
            RecordHandler handler = (producer, sequence, timestampNs, buffer, offset, length) -> seen.add(
                new Seen(producer, sequence, buffer.asSlice(offset, length).toArray(ValueLayout.JAVA_BYTE)));
            while (running) {
                try {
                    if (consumer.poll(handler, 256) == 0) {
                        Thread.onSpinWait();
                    }
                } catch (Throwable e) {
                    error.set(e);
                    return;
                }
            }
        });
    }

    /** Stops polling (the consumer stays open). */
    void stop() throws InterruptedException {
        running = false;
        thread.join(10_000);
    }

    @Override
    public void close() throws InterruptedException {
        stop();
        consumer.close();
    }

    /** A payload that names its producer and sequence, of a length that varies with both. */
    static byte[] payload(int producer, long sequence, int maxLength) {
        int length = 16 + (int) ((sequence * 31 + producer * 7) % Math.max(1, maxLength - 16));
        byte[] bytes = new byte[length];
        for (int i = 0; i < length; i++) {
            bytes[i] = (byte) (producer * 13 + sequence * 7 + i);
        }
        return bytes;
    }

    static MemorySegment wrap(byte[] bytes) {
        return MemorySegment.ofArray(bytes);
    }
}
