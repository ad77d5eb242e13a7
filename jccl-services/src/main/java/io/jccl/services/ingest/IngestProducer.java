package io.jccl.services.ingest;

import io.jccl.common.Log;
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
import io.jccl.verbs.VerbsException;
import io.jccl.verbs.WorkCompletion;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;
import java.util.zip.CRC32C;

/**
 * A producer of a feature ingestion ring (see {@link IngestConsumer} for the protocol). {@link #append} stamps the
 * record (sequence, time, CRC32C) into the retention buffer, reserves ring space with FETCH_ADD, WRITEs it and
 * commits it with WRITE_WITH_IMM; it returns once the commit completed, that is once the record is in the consumer's
 * memory. The record stays in the retention buffer until the consumer acknowledges it (a snapshot holds it):
 * after a consumer restart or a lost record the producer sends again, from the consumer's next expected sequence.
 *
 * <p>Every wait (ring full, retention buffer full, consumer gone) is bounded by the append deadline and ends in an
 * {@link IngestException} that says what was waited for; a record whose {@code append} threw after it was stamped
 * stays retained and is sent by the next {@code append} or {@link #flush}. One thread at a time.
 */
public final class IngestProducer implements AutoCloseable {
    private static final Log LOG = Log.get();
    private static final long STATUS_INTERVAL_NS = TimeUnit.MILLISECONDS.toNanos(2);
    private static final long STATUS_GRACE_NS = TimeUnit.SECONDS.toNanos(1);
    private static final long SCRATCH_FETCH = 0;
    private static final long SCRATCH_HEAD = 8;
    private static final long SCRATCH_SLOT = 24;

    private final InetSocketAddress consumerAddress;
    private final int producerId;
    private final IngestSettings settings;
    private final Context context;
    private final ProtectionDomain domain;
    private final CompletionQueue queue;
    private final MemoryRegion retention;
    private final MemorySegment retained;
    private final ByteBuffer retainedView;
    private final int retentionBytes;
    private final MemoryRegion scratchRegion;
    private final MemorySegment scratch;
    private final CRC32C crc = new CRC32C();
    private final SendWorkRequest fetchAdd = new SendWorkRequest();
    private final SendWorkRequest write = new SendWorkRequest();
    private final SendWorkRequest read = new SendWorkRequest();
    private final WorkCompletion[] completions = WorkCompletion.array(4);

    // Retained records: a ring of entries (offset and size in the retention buffer, ring position when sent).
    private final int[] entryOffset;
    private final int[] entrySize;
    private final long[] entryPosition;
    private int firstIndex;
    private int count;
    private long firstSequence = 1;
    private long nextSequence = 1;
    private long nextToSend = 1;
    private int retentionTail;
    /** Bytes offered since the last send. */
    private int pendingBytes;

    private QueuePair queuePair;
    private Wire.Reply reply;
    private long cachedHead;
    private long expectedSequence = 1;
    private long acknowledgedSequence;
    private long lastStatusNs;
    private long reconnects;
    private long resent;
    private long abandoned;
    private long epoch = -1;
    // A reservation kept by an append that timed out waiting for ring space (-1: none).
    private long heldSequence = -1;
    private long heldPosition = -1;
    private long heldReservedAtNs;
    private int heldRecords;
    private long heldEpoch;
    private boolean closed;

    /** A failed link: the queue pair is closed and the caller reconnects. Control flow only, no stack. */
    private static final class LinkFailure extends Exception {
        LinkFailure(String message) {
            super(message, null, false, false);
        }
    }

    private IngestProducer(InetSocketAddress consumerAddress, int producerId, IngestSettings settings) {
        if (producerId < 0) {
            throw new IllegalArgumentException("producer id " + producerId + " is negative");
        }
        this.consumerAddress = consumerAddress;
        this.producerId = producerId;
        this.settings = settings;
        this.retentionBytes = settings.retentionBytes();
        int maxEntries = retentionBytes / RecordFormat.recordBytes(1) + 1;
        this.entryOffset = new int[maxEntries];
        this.entrySize = new int[maxEntries];
        this.entryPosition = new long[maxEntries];
        Context ctx = null;
        ProtectionDomain pd = null;
        CompletionQueue cq = null;
        MemoryRegion ret = null;
        MemoryRegion scr = null;
        try {
            ctx = Verbs.device(settings.device()).open();
            pd = ctx.allocateProtectionDomain();
            cq = ctx.createCompletionQueue(64);
            ret = pd.allocateMemory(retentionBytes, AccessFlag.LOCAL_WRITE);
            scr = pd.allocateMemory(64, AccessFlag.LOCAL_WRITE);
        } catch (RuntimeException e) {
            IngestConsumer.closeAll(scr, ret, cq, pd, ctx);
            throw new IngestException("cannot open an ingest producer on " + settings.device() + ": "
                + e.getMessage(), e);
        }
        this.context = ctx;
        this.domain = pd;
        this.queue = cq;
        this.retention = ret;
        this.retained = ret.segment();
        this.retainedView = retained.asByteBuffer();
        this.scratchRegion = scr;
        this.scratch = scr.segment();
    }

    /**
     * Connects a producer to a consumer (retrying until the append deadline).
     *
     * @param consumer the consumer's {@link IngestConsumer#address()}
     * @param producerId this producer's id, unique among the consumer's producers (0 to its maxProducers - 1); a
     *     restarted producer with the same id continues its stream at the consumer's next expected sequence
     * @param settings the device (the consumer's), retention buffer and append deadline
     * @throws IngestException when the consumer cannot be reached in time or refuses the id
     */
    public static IngestProducer connect(InetSocketAddress consumer, int producerId, IngestSettings settings) {
        IngestProducer producer = new IngestProducer(consumer, producerId, settings);
        try {
            synchronized (producer) {
                producer.reconnect(System.nanoTime() + settings.appendTimeoutNs());
            }
            return producer;
        } catch (RuntimeException e) {
            producer.close();
            throw e;
        }
    }

    /** This producer's id. */
    public int producerId() {
        return producerId;
    }

    /** The sequence the next append gets. */
    public synchronized long nextSequence() {
        return nextSequence;
    }

    /** The highest sequence the consumer has acknowledged (durable), as last read. */
    public synchronized long acknowledgedSequence() {
        return acknowledgedSequence;
    }

    /** Records kept until acknowledged. */
    public synchronized int retainedRecords() {
        return count;
    }

    /** Connections made after the first (consumer restarts, failed links). */
    public synchronized long reconnects() {
        return reconnects;
    }

    /** Records sent again (after a reconnection or a record the consumer skipped). */
    public synchronized long resent() {
        return resent;
    }

    /** Reservations given up because the lease ran out while waiting for ring space. */
    public synchronized long abandonedReservations() {
        return abandoned;
    }

    /**
     * Takes a record into the retention buffer without sending it: offered records go out together, in one
     * reservation and one commit per batch (up to the batch bytes), when they reach the batch bytes, or at the next
     * {@link #send}, {@link #append} or {@link #flush}. For throughput; {@link #append} is for latency.
     *
     * @return the record's sequence
     * @throws IllegalArgumentException for a payload above the consumer's largest record
     * @throws IngestException as {@link #append}
     */
    public synchronized long offer(MemorySegment payload, long offset, int length) {
        long deadlineNs = System.nanoTime() + settings.appendTimeoutNs();
        long sequence = take(payload, offset, length, deadlineNs);
        pendingBytes += RecordFormat.recordBytes(length);
        if (pendingBytes >= settings.batchBytes()) {
            send(deadlineNs);
        }
        return sequence;
    }

    /**
     * Sends every offered record: returns once they are all committed in the consumer's ring.
     *
     * @throws IngestException as {@link #append}
     */
    public synchronized void send() {
        send(System.nanoTime() + settings.appendTimeoutNs());
    }

    private void send(long deadlineNs) {
        sendPending(deadlineNs);
        pendingBytes = 0;
        if (System.nanoTime() - lastStatusNs > STATUS_INTERVAL_NS) {
            status(deadlineNs); // acknowledgements and lost records, every few milliseconds
        }
    }

    /** Appends a record from a heap array (copied into the retention buffer). */
    public long append(byte[] payload) {
        return append(MemorySegment.ofArray(payload), 0, payload.length);
    }

    /**
     * Appends a record: returns once it is committed in the consumer's ring (visible to its next poll).
     *
     * @return the record's sequence
     * @throws IllegalArgumentException for a payload above the consumer's largest record
     * @throws IngestException when the retention buffer stays full (nothing is taken then), or the ring stays full or
     *     the consumer unreachable past the append deadline (the record is kept and sent by the next call)
     */
    public synchronized long append(MemorySegment payload, long offset, int length) {
        long deadlineNs = System.nanoTime() + settings.appendTimeoutNs();
        long sequence = take(payload, offset, length, deadlineNs);
        send(deadlineNs);
        return sequence;
    }

    /** Stamps a record into the retention buffer (waiting for room there): from now on it is kept until acked. */
    private long take(MemorySegment payload, long offset, int length, long deadlineNs) {
        if (closed) {
            throw new IllegalStateException("ingest producer closed");
        }
        int maxPayload = Math.min(settings.maxPayloadBytes(), reply == null ? Integer.MAX_VALUE : reply.maxPayload());
        if (length < 0 || length > maxPayload) {
            throw new IllegalArgumentException("record of " + length + " B: the consumer takes 0 to " + maxPayload
                + " B per record");
        }
        int size = RecordFormat.recordBytes(length);
        int at;
        long idleNs = 1000;
        while ((at = place(size)) < 0) {
            if (nextToSend < nextSequence) {
                sendPending(deadlineNs); // offered records first: they may be what the consumer waits for
            }
            status(deadlineNs);
            if ((at = place(size)) >= 0) {
                break;
            }
            if (System.nanoTime() - deadlineNs > 0) {
                throw new IngestException("ingest producer " + producerId + ": retention buffer full (" + count
                    + " records, " + retentionBytes + " B) for " + Duration.ofNanos(settings.appendTimeoutNs())
                    + ": the consumer at " + consumerAddress + " acknowledged up to sequence " + acknowledgedSequence
                    + " of " + (nextSequence - 1) + " (is it polling and snapshotting?); the record was not taken");
            }
            LockSupport.parkNanos(idleNs);
            idleNs = Math.min(idleNs * 2, TimeUnit.MILLISECONDS.toNanos(1));
        }
        MemorySegment.copy(payload, offset, retained, at + RecordFormat.HEADER_BYTES, length);
        long sequence = nextSequence++;
        RecordFormat.writeHeader(retained, retainedView, at, length, producerId, sequence, Wire.epochNanos(), crc);
        int index = (firstIndex + count) % entryOffset.length;
        entryOffset[index] = at;
        entrySize[index] = size;
        entryPosition[index] = -1;
        count++;
        retentionTail = at + size;
        return sequence;
    }

    /**
     * Sends what is pending and waits until the consumer acknowledged every record appended so far (a snapshot
     * holds them).
     *
     * @throws IngestException when that does not happen within {@code timeout}
     */
    public synchronized void flush(Duration timeout) {
        long deadlineNs = System.nanoTime() + timeout.toNanos();
        long idleNs = 10_000;
        while (true) {
            sendPending(deadlineNs);
            status(deadlineNs);
            if (acknowledgedSequence >= nextSequence - 1 && nextToSend >= nextSequence) {
                return;
            }
            if (System.nanoTime() - deadlineNs > 0) {
                throw new IngestException("ingest producer " + producerId + ": the consumer at " + consumerAddress
                    + " acknowledged up to sequence " + acknowledgedSequence + " of " + (nextSequence - 1)
                    + " within " + timeout + " (records are kept and sent again)");
            }
            LockSupport.parkNanos(idleNs);
            idleNs = Math.min(idleNs * 2, TimeUnit.MILLISECONDS.toNanos(2));
        }
    }

    /** Where a record of {@code size} bytes fits in the retention buffer, or -1. */
    private int place(int size) {
        if (count == 0) {
            retentionTail = 0;
            return size <= retentionBytes ? 0 : -1;
        }
        if (count == entryOffset.length) {
            return -1;
        }
        int headOffset = entryOffset[firstIndex];
        if (retentionTail > headOffset) {
            if (retentionTail + size <= retentionBytes) {
                return retentionTail;
            }
            return size < headOffset ? 0 : -1;
        }
        return retentionTail + size < headOffset ? retentionTail : -1;
    }

    private void sendPending(long deadlineNs) {
        while (nextToSend < nextSequence) {
            if (queuePair == null) {
                reconnect(deadlineNs);
                continue;
            }
            long sequence = nextToSend;
            int first = (int) ((firstIndex + (sequence - firstSequence)) % entryOffset.length);
            int records = batch(first, (int) (nextSequence - sequence), sequence);
            try {
                send(first, records, sequence, deadlineNs);
                if (nextToSend == sequence) {
                    nextToSend += records; // else a status read during the send moved it back to a lost record
                }
            } catch (LinkFailure e) {
                closeLink(e.getMessage());
            }
        }
    }

    /**
     * How many records from {@code first} go in one reservation: contiguous in the retention buffer, at most the batch
     * bytes and a quarter of the ring (a held reservation keeps the batch it was made for).
     */
    private int batch(int first, int pending, long sequence) {
        if (heldSequence == sequence && heldPosition >= 0) {
            return heldRecords;
        }
        long limit = Math.min(settings.batchBytes(), reply.ringBytes() / 4);
        int records = 1;
        long bytes = entrySize[first];
        int index = first;
        while (records < pending) {
            int next = (index + 1) % entryOffset.length;
            if (entryOffset[next] != entryOffset[index] + entrySize[index] || bytes + entrySize[next] > limit) {
                break;
            }
            bytes += entrySize[next];
            index = next;
            records++;
        }
        return records;
    }

    private void send(int first, int records, long sequence, long deadlineNs) throws LinkFailure {
        int size = 0;
        for (int k = 0, index = first; k < records; k++, index = (index + 1) % entryOffset.length) {
            // Chain the batch: every record but the last says the next follows under the same commit.
            RecordFormat.setContinues(retained, retainedView, entryOffset[index], k < records - 1, crc);
            size += entrySize[index];
        }
        while (true) {
            long reservedAtNs;
            long position;
            if (heldSequence == sequence && heldPosition >= 0) {
                // A call that timed out waiting for space, or whose link failed, kept its reservation in this
                // consumer incarnation's ring: use it while its lease lasts, rather than leave a hole the consumer
                // would wait a hole timeout for; unless the consumer has passed it (its commit did arrive).
                reservedAtNs = heldReservedAtNs;
                position = heldPosition;
                readStatus(statusDeadline(deadlineNs));
                heldPosition = -1;
                if (cachedHead > position) {
                    continue;
                }
            } else {
                reservedAtNs = System.nanoTime();
                fetchAdd.opcode(SendOpcode.ATOMIC_FETCH_AND_ADD).flags(SendFlag.SIGNALED)
                    .remote(reply.ringAddress() + RingLayout.TAIL, reply.rkey()).atomic(size, 0)
                    .local(scratchRegion, SCRATCH_FETCH, 8);
                queuePair.postSend(fetchAdd);
                await(deadlineNs, "a ring reservation");
                position = scratch.get(ValueLayout.JAVA_LONG, SCRATCH_FETCH);
            }
            try {
                if (writeReserved(first, records, sequence, size, position, reservedAtNs, deadlineNs)) {
                    return;
                }
            } catch (LinkFailure e) {
                hold(sequence, position, records, reservedAtNs); // the consumer may still be there: reconnect
                throw e;
            }
        }
    }

    private void hold(long sequence, long position, int records, long reservedAtNs) {
        heldSequence = sequence;
        heldPosition = position;
        heldRecords = records;
        heldReservedAtNs = reservedAtNs;
        heldEpoch = epoch;
    }

    /** Waits for space and writes a reserved batch; false when the lease ran out (reserve again). */
    private boolean writeReserved(int first, int records, long sequence, int size, long position, long reservedAtNs,
                                  long deadlineNs) throws LinkFailure {
        long leaseNs = reply.holeTimeoutNs() / 2;
        int ringBytes = reply.ringBytes();
        long idleNs = 1000;
        boolean expired = false;
        while (position + size - cachedHead > ringBytes) {
            if (System.nanoTime() - reservedAtNs > leaseNs) {
                expired = true;
                break;
            }
            readStatus(statusDeadline(deadlineNs));
            if (position + size - cachedHead <= ringBytes) {
                break;
            }
            if (System.nanoTime() - deadlineNs > 0) {
                hold(sequence, position, records, reservedAtNs);
                throw new IngestException("ingest producer " + producerId + ": the ring of the consumer at "
                    + consumerAddress + " stayed full for " + Duration.ofNanos(settings.appendTimeoutNs())
                    + " (its head at " + cachedHead + ", our reservation at " + position + "): is it polling? The"
                    + " record is kept and sent by the next append or flush");
            }
            LockSupport.parkNanos(idleNs);
            idleNs = Math.min(idleNs * 2, TimeUnit.MILLISECONDS.toNanos(1));
        }
        if (expired || System.nanoTime() - reservedAtNs > leaseNs) {
            abandoned++; // the consumer will skip it as a hole; writing now could race with that skip
            return false;
        }
        long offset = position & (ringBytes - 1);
        long remote = reply.ringAddress() + reply.dataOffset();
        int firstPiece = (int) Math.min(size, ringBytes - offset);
        if (firstPiece < size) {
            write.opcode(SendOpcode.RDMA_WRITE).flags(0).remote(remote + offset, reply.rkey())
                .local(retention, entryOffset[first], firstPiece);
            queuePair.postSend(write);
            write.opcode(SendOpcode.RDMA_WRITE_WITH_IMM).flags(SendFlag.SIGNALED).remote(remote, reply.rkey())
                .immediateData((int) position).local(retention, entryOffset[first] + firstPiece,
                    size - firstPiece);
        } else {
            write.opcode(SendOpcode.RDMA_WRITE_WITH_IMM).flags(SendFlag.SIGNALED)
                .remote(remote + offset, reply.rkey()).immediateData((int) position)
                .local(retention, entryOffset[first], size);
        }
        queuePair.postSend(write);
        await(deadlineNs, "a record's commit");
        long at = position;
        for (int k = 0, index = first; k < records; k++, index = (index + 1) % entryOffset.length) {
            entryPosition[index] = at;
            at += entrySize[index];
        }
        return true;
    }

    /** Reads the consumer's head and this producer's slot, releases what is acknowledged, spots lost records. */
    private void status(long deadlineNs) {
        while (true) {
            if (queuePair == null) {
                reconnect(deadlineNs);
                return; // reconnect read the status
            }
            try {
                readStatus(statusDeadline(deadlineNs));
                return;
            } catch (LinkFailure e) {
                closeLink(e.getMessage());
            }
        }
    }

    private void readStatus(long deadlineNs) throws LinkFailure {
        for (int attempt = 0; ; attempt++) {
            // The head first, then the slot: the consumer updates the slot before the head, so a head past a
            // record with a slot that has not accepted it means the record was skipped (lost), not in flight.
            read.opcode(SendOpcode.RDMA_READ).flags(SendFlag.SIGNALED)
                .remote(reply.ringAddress() + RingLayout.HEAD, reply.rkey()).local(scratchRegion, SCRATCH_HEAD, 16);
            queuePair.postSend(read);
            await(deadlineNs, "the ring's head");
            read.remote(reply.ringAddress() + RingLayout.slot(producerId), reply.rkey())
                .local(scratchRegion, SCRATCH_SLOT, 32);
            queuePair.postSend(read);
            await(deadlineNs, "this producer's acknowledgements");
            long head = RingLayout.checked(scratch, SCRATCH_HEAD);
            long expected = RingLayout.checked(scratch, SCRATCH_SLOT);
            long acknowledged = RingLayout.checked(scratch, SCRATCH_SLOT + 16);
            if (head < 0 || expected < 0 || acknowledged < 0) {
                if (attempt > 100) {
                    throw new LinkFailure("the consumer's status words keep failing their checks");
                }
                continue; // torn: read again
            }
            lastStatusNs = System.nanoTime();
            cachedHead = Math.max(cachedHead, head);
            expectedSequence = expected;
            release(acknowledged);
            if (expected >= firstSequence && expected < nextToSend) {
                int index = (int) ((firstIndex + (expected - firstSequence)) % entryOffset.length);
                long position = entryPosition[index];
                if (position >= 0 && head > position) {
                    resent += nextToSend - expected; // the consumer passed it without accepting: send again
                    nextToSend = expected;
                }
            }
            return;
        }
    }

    /**
     * The deadline of one status read: the call's, but at least {@link #STATUS_GRACE_NS} ahead. A read takes a round
     * trip; one that starts just before the call's deadline must not turn "the ring stayed full" into "the link
     * failed" (and cost a reconnection); the caller checks its own deadline right after.
     */
    private static long statusDeadline(long deadlineNs) {
        return Math.max(deadlineNs, System.nanoTime() + STATUS_GRACE_NS);
    }

    private void release(long acknowledged) {
        acknowledgedSequence = Math.max(acknowledgedSequence, acknowledged);
        while (count > 0 && firstSequence <= acknowledgedSequence) {
            firstIndex = (firstIndex + 1) % entryOffset.length;
            count--;
            firstSequence++;
        }
        if (count == 0) {
            firstSequence = nextSequence;
        }
        if (nextToSend < firstSequence) {
            nextToSend = firstSequence;
        }
    }

    private void await(long deadlineNs, String what) throws LinkFailure {
        while (true) {
            long leftNs = deadlineNs - System.nanoTime();
            int n = queue.poll(completions, 1, Math.max(0, Math.min(leftNs, TimeUnit.MILLISECONDS.toNanos(100))));
            if (n > 0) {
                if (!completions[0].isSuccess()) {
                    throw new LinkFailure(what + " failed: " + completions[0].status());
                }
                return;
            }
            if (leftNs <= 0) {
                closeLink("deadline"); // a request is still outstanding: this queue pair cannot be reused
                throw new IngestException("ingest producer " + producerId + ": " + what + " from the consumer at "
                    + consumerAddress + " did not complete within " + Duration.ofNanos(settings.appendTimeoutNs())
                    + " (records are kept and sent again)");
            }
        }
    }

    private void closeLink(String why) {
        if (queuePair != null) {
            queuePair.close();
            queuePair = null;
            LOG.info(-1, Log.Subsys.NET, () -> "ingest producer " + producerId + ": link to " + consumerAddress
                + " closed (" + why + ")");
        }
    }

    private void reconnect(long deadlineNs) {
        closeLink("reconnecting");
        long backoffMs = 10;
        String lastError = "no attempt";
        while (true) {
            long leftNs = deadlineNs - System.nanoTime();
            if (leftNs <= 0) {
                throw new IngestException("ingest producer " + producerId + ": the consumer at " + consumerAddress
                    + " cannot be reached within " + Duration.ofNanos(settings.appendTimeoutNs()) + " (" + lastError
                    + "); " + count + " records are kept and sent once it is back");
            }
            ConnectionManager.Connection c;
            try {
                c = ConnectionManager.connect(domain, QueuePairInitAttributes.of(queue).withDepths(32, 1),
                    consumerAddress, Wire.parameters(Wire.request(producerId), Duration.ofNanos(Math.max(
                        TimeUnit.MILLISECONDS.toNanos(10), Math.min(leftNs, TimeUnit.SECONDS.toNanos(2))))));
            } catch (VerbsException e) {
                lastError = e.getMessage();
                LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(Math.min(backoffMs,
                    Math.max(1, TimeUnit.NANOSECONDS.toMillis(leftNs)))));
                backoffMs = Math.min(backoffMs * 2, 200);
                continue;
            }
            Wire.Reply r;
            try {
                r = Wire.Reply.decode(c.remotePrivateData());
            } catch (IngestException e) {
                c.queuePair().close();
                throw e;
            }
            if (producerId >= r.maxProducers()) {
                c.queuePair().close();
                throw new IngestException("producer id " + producerId + " outside 0.." + (r.maxProducers() - 1)
                    + ", the ids the consumer at " + consumerAddress + " takes (JCCL_INGEST_MAX_PRODUCERS)");
            }
            queuePair = c.queuePair();
            if (epoch != -1) {
                reconnects++;
            }
            boolean restarted = epoch != -1 && epoch != r.epoch();
            epoch = r.epoch();
            reply = r;
            cachedHead = 0;
            if (heldEpoch != r.epoch()) {
                heldPosition = -1; // a reservation belongs to the ring of one consumer incarnation
            }
            try {
                readStatus(deadlineNs);
            } catch (LinkFailure e) {
                lastError = e.getMessage();
                closeLink(e.getMessage());
                continue;
            }
            if (count == 0 && nextSequence < expectedSequence) {
                // A new producer with the id of one that had records accepted: continue its stream.
                firstSequence = nextSequence = nextToSend = expectedSequence;
            } else if (expectedSequence > nextSequence) {
                closeLink("sequence conflict");
                throw new IngestException("producer id " + producerId + " is in use by another producer: the consumer"
                    + " at " + consumerAddress + " expects sequence " + expectedSequence + ", this producer appended"
                    + " only up to " + (nextSequence - 1));
            }
            long from = Math.max(firstSequence, expectedSequence);
            if (from < nextToSend) {
                resent += nextToSend - from;
            }
            nextToSend = from;
            long retainedNow = count;
            LOG.info(-1, Log.Subsys.NET, () -> "ingest producer " + producerId + " connected to " + consumerAddress
                + (restarted ? " (a new consumer incarnation)" : "") + ", acknowledged up to " + acknowledgedSequence
                + ", " + retainedNow + " records retained");
            return;
        }
    }

    /** Closes the link and frees the buffers; records not yet acknowledged are dropped (never acknowledged). */
    @Override
    public synchronized void close() {
        if (closed) {
            return;
        }
        closed = true;
        closeLink("closed");
        IngestConsumer.closeAll(scratchRegion, retention, queue, domain, context);
    }
}
