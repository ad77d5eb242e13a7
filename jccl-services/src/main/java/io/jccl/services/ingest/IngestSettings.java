package io.jccl.services.ingest;

import io.jccl.common.Config;

import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;

/**
 * Settings of both ends of a feature ingestion ring. The consumer's ring, record limit and hole timeout reach the
 * producers in the connection reply, so producers need only the device, their retention buffer and their deadline.
 *
 * @param device the verbs device both ends use (JCCL_INGEST_DEVICE: shm0 on one host, tcp0 across hosts)
 * @param bindAddress where the consumer listens for producers (port 0: any free port)
 * @param directory where the consumer keeps its snapshots (created if missing)
 * @param ringBytes the ring's data bytes in the consumer's memory, a power of two (JCCL_INGEST_RING_BYTES)
 * @param maxPayloadBytes the largest record payload (JCCL_INGEST_MAX_RECORD_BYTES); at most a quarter of the ring
 *     and of the retention buffer
 * @param maxProducers producer ids are 0 to maxProducers - 1 (JCCL_INGEST_MAX_PRODUCERS, 1 to 1024)
 * @param snapshotIntervalNs how often the consumer makes what it read durable (JCCL_INGEST_SNAPSHOT_MS)
 * @param holeTimeoutNs how long the consumer waits at a reservation nobody commits before it skips it as a hole
 *     (JCCL_INGEST_HOLE_TIMEOUT_MS); producers write a reservation only within half of it (their lease)
 * @param appendTimeoutNs the longest {@code append}/{@code flush} waits for space, acknowledgements or a consumer
 *     to come back (JCCL_INGEST_APPEND_TIMEOUT_MS)
 * @param retentionBytes a producer's buffer of records kept until acknowledged (JCCL_INGEST_RETENTION_BYTES)
 * @param batchBytes the most bytes of records one reservation and commit carries, and the amount of offered records
 *     that makes {@code offer} send (JCCL_INGEST_BATCH_BYTES; at most a quarter of the ring is used)
 */
public record IngestSettings(String device, InetSocketAddress bindAddress, Path directory, int ringBytes,
                             int maxPayloadBytes, int maxProducers, long snapshotIntervalNs, long holeTimeoutNs,
                             long appendTimeoutNs, int retentionBytes, int batchBytes) {
    /** Default ring: 4 MiB. */
    public static final int RING_BYTES_DEFAULT = 4 << 20;
    /** Default largest payload: 64 KiB. */
    public static final int MAX_PAYLOAD_DEFAULT = 64 << 10;
    /** Default producer ids: 64. */
    public static final int MAX_PRODUCERS_DEFAULT = 64;
    /** Default snapshot interval: 50 ms. */
    public static final long SNAPSHOT_MS_DEFAULT = 50;
    /** Default hole timeout: 4 s. */
    public static final long HOLE_TIMEOUT_MS_DEFAULT = 4000;
    /** Default append deadline: 10 s. */
    public static final long APPEND_TIMEOUT_MS_DEFAULT = 10_000;
    /** Default retention buffer: 8 MiB. */
    public static final int RETENTION_BYTES_DEFAULT = 8 << 20;
    /** Default batch: 64 KiB. */
    public static final int BATCH_BYTES_DEFAULT = 64 << 10;

    /** Checks the ranges. */
    public IngestSettings {
        if (device == null || device.isEmpty() || bindAddress == null || directory == null) {
            throw new IllegalArgumentException("ingest settings need a device, a bind address and a directory");
        }
        if (ringBytes < 4096 || ringBytes > (1 << 30) || Integer.bitCount(ringBytes) != 1) {
            throw new IllegalArgumentException("ring bytes " + ringBytes + ": a power of two in 4 KiB..1 GiB");
        }
        if (maxPayloadBytes < 1 || RecordFormat.recordBytes(maxPayloadBytes) > ringBytes / 4
            || RecordFormat.recordBytes(maxPayloadBytes) > retentionBytes / 4) {
            throw new IllegalArgumentException("largest payload " + maxPayloadBytes + " B: at least 1 and, with its "
                + RecordFormat.HEADER_BYTES + "-byte header, at most a quarter of the ring (" + ringBytes
                + " B) and of the retention buffer (" + retentionBytes + " B)");
        }
        if (maxProducers < 1 || maxProducers > 1024) {
            throw new IllegalArgumentException("max producers " + maxProducers + " outside 1..1024");
        }
        if (batchBytes < 1) {
            throw new IllegalArgumentException("batch bytes " + batchBytes + " must be positive");
        }
        if (snapshotIntervalNs <= 0 || holeTimeoutNs < TimeUnit.MILLISECONDS.toNanos(20) || appendTimeoutNs <= 0) {
            throw new IllegalArgumentException("snapshot interval and append timeout must be positive, the hole"
                + " timeout at least 20 ms");
        }
    }

    /** The defaults: tcp0, loopback with any port, ./ingest-data. */
    public static IngestSettings defaults() {
        return new IngestSettings("tcp0", new InetSocketAddress(InetAddress.getLoopbackAddress(), 0),
            Path.of("ingest-data"), RING_BYTES_DEFAULT, MAX_PAYLOAD_DEFAULT, MAX_PRODUCERS_DEFAULT,
            TimeUnit.MILLISECONDS.toNanos(SNAPSHOT_MS_DEFAULT), TimeUnit.MILLISECONDS.toNanos(HOLE_TIMEOUT_MS_DEFAULT),
            TimeUnit.MILLISECONDS.toNanos(APPEND_TIMEOUT_MS_DEFAULT), RETENTION_BYTES_DEFAULT, BATCH_BYTES_DEFAULT);
    }

    /** The defaults overridden by the JCCL_INGEST_* variables. */
    public static IngestSettings fromEnvironment() {
        IngestSettings d = defaults();
        return new IngestSettings(Config.value("JCCL_INGEST_DEVICE", d.device), d.bindAddress, d.directory,
            (int) Config.longValue("JCCL_INGEST_RING_BYTES", d.ringBytes),
            (int) Config.longValue("JCCL_INGEST_MAX_RECORD_BYTES", d.maxPayloadBytes),
            (int) Config.longValue("JCCL_INGEST_MAX_PRODUCERS", d.maxProducers),
            TimeUnit.MILLISECONDS.toNanos(Config.longValue("JCCL_INGEST_SNAPSHOT_MS", SNAPSHOT_MS_DEFAULT)),
            TimeUnit.MILLISECONDS.toNanos(Config.longValue("JCCL_INGEST_HOLE_TIMEOUT_MS", HOLE_TIMEOUT_MS_DEFAULT)),
            TimeUnit.MILLISECONDS.toNanos(Config.longValue("JCCL_INGEST_APPEND_TIMEOUT_MS",
                APPEND_TIMEOUT_MS_DEFAULT)),
            (int) Config.longValue("JCCL_INGEST_RETENTION_BYTES", d.retentionBytes),
            (int) Config.longValue("JCCL_INGEST_BATCH_BYTES", d.batchBytes));
    }

    /** A copy with another device. */
    public IngestSettings withDevice(String name) {
        return new IngestSettings(name, bindAddress, directory, ringBytes, maxPayloadBytes, maxProducers,
            snapshotIntervalNs, holeTimeoutNs, appendTimeoutNs, retentionBytes, batchBytes);
    }

    /** A copy with another listening address. */
    public IngestSettings withBindAddress(InetSocketAddress address) {
        return new IngestSettings(device, address, directory, ringBytes, maxPayloadBytes, maxProducers,
            snapshotIntervalNs, holeTimeoutNs, appendTimeoutNs, retentionBytes, batchBytes);
    }

    /** A copy with another snapshot directory. */
    public IngestSettings withDirectory(Path path) {
        return new IngestSettings(device, bindAddress, path, ringBytes, maxPayloadBytes, maxProducers,
            snapshotIntervalNs, holeTimeoutNs, appendTimeoutNs, retentionBytes, batchBytes);
    }

    /** A copy with another ring size and largest payload. */
    public IngestSettings withRing(int bytes, int maxPayload) {
        return new IngestSettings(device, bindAddress, directory, bytes, maxPayload, maxProducers,
            snapshotIntervalNs, holeTimeoutNs, appendTimeoutNs, retentionBytes, batchBytes);
    }

    /** A copy with other intervals and deadlines (milliseconds). */
    public IngestSettings withTimes(long snapshotMs, long holeTimeoutMs, long appendTimeoutMs) {
        return new IngestSettings(device, bindAddress, directory, ringBytes, maxPayloadBytes, maxProducers,
            TimeUnit.MILLISECONDS.toNanos(snapshotMs), TimeUnit.MILLISECONDS.toNanos(holeTimeoutMs),
            TimeUnit.MILLISECONDS.toNanos(appendTimeoutMs), retentionBytes, batchBytes);
    }

    /** A copy with another retention buffer. */
    public IngestSettings withRetentionBytes(int bytes) {
        return new IngestSettings(device, bindAddress, directory, ringBytes, maxPayloadBytes, maxProducers,
            snapshotIntervalNs, holeTimeoutNs, appendTimeoutNs, bytes, batchBytes);
    }

    /** A copy with another batch size. */
    public IngestSettings withBatchBytes(int bytes) {
        return new IngestSettings(device, bindAddress, directory, ringBytes, maxPayloadBytes, maxProducers,
            snapshotIntervalNs, holeTimeoutNs, appendTimeoutNs, retentionBytes, bytes);
    }
}
