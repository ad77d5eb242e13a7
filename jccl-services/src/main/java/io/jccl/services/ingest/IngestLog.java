package io.jccl.services.ingest;

import java.nio.file.Path;

/**
 * Reads what a consumer made durable: the records of every committed snapshot in a directory, in the order the
 * consumer accepted them, each checked against its CRC32C. For rebuilding state after a restart, and for audits.
 */
public final class IngestLog {
    private IngestLog() {
    }

    /**
     * Hands every durable record to {@code handler}.
     *
     * @return the highest durable sequence per producer id (index), as the manifest records it
     * @throws IngestException naming the file and offset when a record fails its checks
     */
    public static long[] replay(Path directory, RecordHandler handler) {
        return SnapshotStore.replay(directory, handler).durable();
    }
}
