package io.jccl.services.embedding;

import io.jccl.common.Log;
import io.jccl.services.transfer.LocalSegment;
import io.jccl.services.transfer.RemoteSegment;
import io.jccl.services.transfer.TransferBatch;
import io.jccl.services.transfer.TransferEngine;
import io.jccl.services.transfer.TransferException;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.time.Duration;

/**
 * Sends a row's invalidation to every subscribed client of a table, for whoever wrote the row (the server's own
 * update or a client's remote one): per subscriber a batch of one 8-byte WRITE of the new version into the
 * subscriber's inbox word plus a notification carrying (table id, row, version), which the transfer engine delivers
 * after the WRITE landed. The batches to all subscribers go out together and are awaited together.
 *
 * <p>Message format (24 bytes, little-endian): magic "EMBI" | table id | row | version.
 */
final class Invalidations implements AutoCloseable {
    static final int MAGIC = 0x49424D45; // "EMBI"
    static final int MESSAGE_BYTES = 24;
    private static final Log LOG = Log.get();

    private final TransferEngine engine;
    private final String table;
    private final int tableId;
    private final LocalSegment scratch;
    private final long scratchOffset;
    private final RemoteSegment[] targets;
    private final long[] targetWords;
    private final TransferBatch[] batches;
    private final int[] postedRanks;
    private final byte[] message = new byte[MESSAGE_BYTES];
    private final ByteBuffer messageView = ByteBuffer.wrap(message).order(ByteOrder.LITTLE_ENDIAN);
    private long sent;
    private long failed;

    Invalidations(TransferEngine engine, String table, int tableId, LocalSegment scratch, long scratchOffset) {
        this.engine = engine;
        this.table = table;
        this.tableId = tableId;
        this.scratch = scratch;
        this.scratchOffset = scratchOffset;
        targets = new RemoteSegment[engine.size()];
        targetWords = new long[engine.size()];
        batches = new TransferBatch[engine.size()];
        postedRanks = new int[engine.size()];
    }

    /** The inbox segment of the client of {@code rank} whose subscriber word is {@code word}. */
    static String inboxName(String table, int rank, long word) {
        return EmbeddingServer.segmentName(table) + "/c/" + rank + "/" + Long.toHexString(word);
    }

    /** Offset of the inbox word in a client segment of a job of {@code ranks}. */
    static long inboxOffset(int ranks) {
        return TableLayout.dataOffset(ranks);
    }

    /**
     * Tells every subscriber in {@code words} (one word per rank at {@code wordsOffset} of {@code words}, non-zero
     * for a subscriber; this rank skipped) that {@code row} is at {@code version} now. Returns the subscribers
     * reached; a subscriber that cannot be reached (closed, gone) is logged and skipped, never waited for past the
     * engine's deadline.
     */
    synchronized int send(MemorySegment words, long wordsOffset, long row, long version) {
        messageView.putInt(0, MAGIC).putInt(4, tableId).putLong(8, row).putLong(16, version);
        scratch.memory().set(ValueLayout.JAVA_LONG_UNALIGNED, scratchOffset, version);
        int posted = 0;
        for (int r = 0; r < targets.length; r++) {
            long word = words.get(ValueLayout.JAVA_LONG_UNALIGNED, wordsOffset + (long) r * Long.BYTES);
            if (word == 0) {
                continue;
            }
            if (r == engine.rank()) {
                EmbeddingClient.invalidateLocal(engine, tableId, row, version);
                continue;
            }
            if (targets[r] == null || targetWords[r] != word) {
                try {
                    targets[r] = engine.openSegment(inboxName(table, r, word), Duration.ZERO);
                    targetWords[r] = word;
                } catch (TransferException e) {
                    int rank = r;
                    LOG.info(engine.rank(), Log.Subsys.NET, () -> "embedding table '" + table + "': subscriber rank "
                        + rank + " has no inbox (" + e.getMessage() + "); skipped");
                    targets[r] = null;
                    failed++;
                    continue;
                }
            }
            if (batches[r] == null) {
                batches[r] = engine.newBatch(1);
            } else {
                batches[r].clear();
            }
            batches[r].write(scratch, scratchOffset, targets[r], inboxOffset(targets.length), Long.BYTES);
            batches[r].notify(message).submit();
            postedRanks[posted++] = r;
        }
        int reached = 0;
        for (int i = 0; i < posted; i++) {
            int r = postedRanks[i];
            TransferBatch b = batches[r];
            if (b.await() && b.notificationError() == null) {
                reached++;
                sent++;
            } else {
                failed++;
                targets[r] = null; // reopened next time: the client may have re-subscribed with a new inbox
                int rank = r;
                LOG.info(engine.rank(), Log.Subsys.NET, () -> "embedding table '" + table + "': invalidation of row "
                    + row + " did not reach rank " + rank + ": " + b);
            }
        }
        return reached;
    }

    synchronized long sent() {
        return sent;
    }

    synchronized long failed() {
        return failed;
    }

    @Override
    public synchronized void close() {
        for (TransferBatch b : batches) {
            if (b != null) {
                b.close();
            }
        }
    }
}
