package io.jccl.services.ingest;

import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.file.Path;

/**
 * A consumer in a process of its own for {@link IngestKillTest}: args {@code dir device port}. Recovers the
 * directory, prints {@code READY port}, then polls until killed.
 */
public final class IngestConsumerChild {
    private IngestConsumerChild() {
    }

    /** Entry point. */
    public static void main(String[] args) {
        IngestSettings s = IngestRingTest.settings(args[1], Path.of(args[0])).withTimes(10, 2000, 30_000)
            .withBindAddress(new InetSocketAddress(InetAddress.getLoopbackAddress(), Integer.parseInt(args[2])));
        IngestConsumer consumer = IngestConsumer.open(s);
        System.out.println("READY " + consumer.address().getPort());
        System.out.flush();
        RecordHandler ignore = (producer, sequence, timestampNs, buffer, offset, length) -> { };
        while (true) {
            if (consumer.poll(ignore, 256) == 0) {
                Thread.onSpinWait();
            }
        }
    }
}
