package io.jccl.transport.tcp;

import io.jccl.verbs.Counter;
import io.jccl.verbs.spi.CounterSet;
import io.jccl.verbs.spi.SoftMemoryRegion;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;

/**
 * The byte level of a QP's receive side (soft-iWARP's {@code siw_qp_rx}): a staging buffer that frame headers are
 * read into and parsed from ({@link FrameHeaderFlyweight}), header checks common to every frame, dispatch to the
 * responder (requests) or requester (responses), and the <em>sink</em>: where the current frame's payload goes.
 * Payload bytes already staged are copied; the rest is read from the socket straight into registered memory (or
 * skipped, for a refused request). Runs under the QP's lock.
 */
final class TcpInput {
    static final int STAGING_BYTES = 32 * 1024;
    /** Bytes one read round takes before it lets others (the output, other QPs) have a turn. */
    private static final long READ_BUDGET_BYTES = 4L << 20;
    /**
     * A payload piece smaller than this that is not staged yet is read through the staging buffer, not straight into
     * its registered memory: a READ_RESPONSE_LIST's rows past the end of one staging read used to be read one
     * {@code read()} per row (280 B each, ~12 per 256-row lookup); through staging one call takes what the socket
     * has, up to 32 KiB, at the cost of one copy of bytes that are hot anyway. Larger pieces (big READs and WRITEs)
     * still go straight to memory.
     */
    static final long DIRECT_READ_MIN_BYTES = 16 * 1024;

    // Who is told when the sink is full.
    private static final int SINK_NONE = 0;
    private static final int SINK_RESPONDER = 1;
    private static final int SINK_REQUESTER = 2;
    private static final int SINK_DISCARD = 3;

    private final TcpQueuePair qp;
    private final TcpConnection connection;
    private final CounterSet counters;
    private final MemorySegment stagingSegment;
    /** Staging buffer, kept in read mode: position = next unparsed byte, limit = end of data. */
    private final ByteBuffer staging;
    private final FrameHeaderFlyweight header = new FrameHeaderFlyweight();
    private final RegionViews views = new RegionViews();
    /** The connection is closing: everything read is thrown away until the peer closes. */
    private boolean drainAll;
    /** Reading requests is paused until the responder's ring drains. */
    private boolean paused;
    private int sinkOwner = SINK_NONE;
    private final SoftMemoryRegion[] sinkRegion;
    private final long[] sinkOffset;
    private final long[] sinkLength;
    private int sinkCount;
    private int sinkIndex;
    private long sinkDone;
    /** {@code read()} calls that returned bytes on this QP's sockets (tests, diagnostics: frames per read). */
    private long readCalls;
    /** Every {@code read()} on the connection's socket, empty ones included (tests, diagnostics). */
    private long readAttempts;
    /** Whether the last {@code readIntoStaging} left room in the buffer: the socket was drained. */
    private boolean stagingReadDrained;
    /** Whether the last read into staging inside {@link #fillSink} left room (the socket had nothing more). */
    private boolean sinkReadDrained;
    /** Entries of the READ_LIST being parsed still to come, and the next one's PSN. */
    private int listEntriesLeft;
    private int listPsn;
    /** READs of the READ_RESPONSE_LIST being placed whose payloads are still to come after the current one. */
    private int listResponsesLeft;
    /** READ_LIST entries parsed (tests, diagnostics). */
    private long listEntries;

    TcpInput(TcpQueuePair qp, Arena arena, int maxSges) {
        this.qp = qp;
        this.connection = qp.connection;
        this.counters = qp.counters;
        stagingSegment = arena.allocate(STAGING_BYTES, 64);
        staging = stagingSegment.asByteBuffer();
        staging.limit(0);
        sinkRegion = new SoftMemoryRegion[maxSges];
        sinkOffset = new long[maxSges];
        sinkLength = new long[maxSges];
    }

    /** The staging buffer (read mode), for the connector's CHALLENGE, which precedes every frame. */
    ByteBuffer staging() {
        return staging;
    }

    boolean paused() {
        return paused;
    }

    /** Whether the payload of a peer's frame is being read (the peer's output is busy with it). */
    boolean midFrame() {
        return sinkIndex < sinkCount;
    }

    /** {@code read()} calls that returned bytes on this QP's sockets so far (empty polls not counted). */
    long readCalls() {
        return readCalls;
    }

    /**
     * One {@code read()} into the staging buffer's free space, which is then flipped for parsing; sets
     * {@code stagingReadDrained} (the read left room, so the socket had no more).
     */
    private int readIntoStaging(SocketChannel channel) throws IOException {
        int room = staging.remaining();
        readAttempts++;
        int n;
        try {
            n = channel.read(staging);
        } finally {
            staging.flip();
        }
        stagingReadDrained = n < room;
        return n;
    }

    /** Every {@code read()} so far, those that found the socket empty included. */
    long readAttempts() {
        return readAttempts;
    }

    /** Reading requests resumes (the responder's ring drained). */
    void resume() {
        paused = false;
    }

    // ------------------------------------------------------------------------------------------------ reading

    /** Reads and handles what the socket has, up to the read budget. Returns a work count. */
    int read() throws IOException {
        int work = 0;
        long bytes = 0;
        boolean drained = false;
        SocketChannel channel;
        while ((channel = connection.channel()) != null) {
            if (drainAll) {
                staging.clear();
                int n = channel.read(staging);
                staging.clear().limit(0);
                if (n < 0) {
                    qp.hardClose();
                    return work + 1;
                }
                if (n == 0) {
                    return work;
                }
                work++;
                continue;
            }
            if (!connection.up()) {
                return work;
            }
            if (sinkIndex < sinkCount) {
                long readsBefore = readCalls;
                long n = fillSink(channel);
                if (readCalls != readsBefore) {
                    // The socket was read after the short read: in a stream (large WRITEs) the next frame is
                    // usually there already, so the next header is read at once, as before; unless that read went
                    // through staging and left room (the socket is empty).
                    drained = sinkReadDrained;
                }
                if (n < 0) {
                    counters.increment(Counter.PORT_RCV_ERRORS); // the stream ended inside a payload
                    qp.onLinkLost();
                    return work + 1;
                }
                if (sinkIndex < sinkCount) {
                    if (n == 0) {
                        return work;
                    }
                    bytes += n;
                    if (bytes > READ_BUDGET_BYTES) {
                        return work + 1;
                    }
                    continue;
                }
                sinkCount = sinkIndex = 0;
                payloadDone();
                work++;
                continue;
            }
            if (listResponsesLeft > 0) {
                // The next READ of a READ_RESPONSE_LIST: its payload follows the previous one's.
                listResponsesLeft--;
                qp.requester.onListedReadResponse();
                work++;
                continue;
            }
            if (listEntriesLeft > 0) {
                if (staging.remaining() >= Wire.LIST_ENTRY) {
                    if (qp.responder.free() < 2) {
                        paused = true; // as for a request header: the list goes on once responses drained
                        qp.updateInterest();
                        return work;
                    }
                    onListEntry();
                    work++;
                    continue;
                }
            } else if (staging.remaining() >= Wire.HEADER) {
                int type = staging.get(staging.position()) & 0xFF;
                if (Wire.isRequest(type) && qp.responder.free() < 2) {
                    // Our responses are backed up: stop reading requests until the peer drains them.
                    paused = true;
                    qp.updateInterest();
                    return work;
                }
                onFrame();
                work++;
                continue;
            }
            if (bytes > READ_BUDGET_BYTES) {
                return work + 1;
            }
            if (drained) {
                // The last read left room in the buffer: the socket had nothing more then. Another read() would
                // almost always find it empty (one system call per round saved); what comes later is reported by
                // the selector or found by the next poll.
                return work;
            }
            if (staging.hasRemaining()) {
                staging.compact(); // a partial header moves to the front
            } else {
                staging.clear(); // the common case, and every empty poll: no copy, no memory-session access
            }
            int n = readIntoStaging(channel);
            drained = stagingReadDrained;
            if (n < 0) {
                if (staging.hasRemaining()) {
                    counters.increment(Counter.PORT_RCV_ERRORS); // the stream ended inside a frame header
                }
                qp.onLinkLost();
                return work + 1;
            }
            if (n == 0) {
                return work;
            }
            readCalls++;
            connection.received(System.nanoTime());
            bytes += n;
        }
        return work;
    }

    /** Parses the staged header, checks what every frame must satisfy, and hands it to its role. */
    private void onFrame() {
        ByteBuffer b = staging;
        int p = b.position();
        FrameHeaderFlyweight h = header.wrap(b, p);
        int type = h.type();
        int flags = h.flags();
        int syndrome = h.syndrome();
        int timer = h.rnrTimer();
        int psn = h.psn();
        int length = h.length();
        int rkey = h.rkey();
        long va = h.va();
        long operand1 = h.operand1();
        long operand2 = h.operand2();
        int imm = h.immediate();
        int ack = h.ackWord();
        b.position(p + Wire.HEADER);
        counters.increment(Counter.PORT_RCV_PACKETS);
        boolean ackValid = ack == 0
            || (Wire.isRequest(type) && (ack & ~(Wire.ACK_PRESENT | Wire.PSN_MASK)) == 0);
        if (!ackValid || (psn & ~Wire.PSN_MASK) != 0 || length < 0 || length > TcpContext.MAX_MESSAGE
            || (flags & ~(Wire.FLAG_SOLICITED | Wire.FLAG_FENCE)) != 0) {
            qp.malformed("bad header fields", false);
            return;
        }
        if (ack != 0) {
            // An ACK riding on the peer's request: handled exactly like an ACK frame just before it.
            int ackPsn = ack & Wire.PSN_MASK;
            if (!qp.requester.acknowledge(ackPsn, true)) {
                qp.malformed("piggybacked ACK for PSN " + ackPsn + " that is not outstanding", true);
                return;
            }
        }
        if (type == Wire.READ_LIST) {
            if (imm < 2 || imm > Wire.LIST_MAX || length != imm * Wire.LIST_ENTRY || rkey != 0 || va != 0) {
                qp.malformed("READ_LIST of " + imm + " entries in " + length + " bytes", false);
                return;
            }
            // The entries are parsed one by one as they are staged (onListEntry), each a READ of its own.
            listEntriesLeft = imm;
            listPsn = psn;
        } else if (Wire.isRequest(type)) {
            qp.responder.onRequest(type, psn, length, rkey, va, operand1, operand2, imm);
        } else if (type == Wire.READ_RESPONSE_LIST) {
            qp.requester.onResponse(type, syndrome, timer, psn, length, imm);
        } else if (Wire.isResponse(type)) {
            qp.requester.onResponse(type, syndrome, timer, psn, length, operand1);
        } else if (Wire.isControl(type)) {
            qp.liveness.onFrame(h); // PING / PONG (kept out of this hot method: it checks and reports on its own)
        } else {
            qp.malformed("unknown opcode " + Wire.typeName(type), false);
        }
    }

    /** Parses the next staged READ_LIST entry and hands it to the responder as the READ it stands for. */
    private void onListEntry() {
        ByteBuffer b = staging;
        int p = b.position();
        int rkey = b.getInt(p + Wire.LIST_OFF_RKEY);
        int length = b.getInt(p + Wire.LIST_OFF_LENGTH);
        long va = b.getLong(p + Wire.LIST_OFF_VA);
        b.position(p + Wire.LIST_ENTRY);
        int psn = listPsn;
        listPsn = (psn + 1) & Wire.PSN_MASK;
        listEntriesLeft--;
        listEntries++;
        if (length < 0 || length > TcpContext.MAX_MESSAGE) {
            qp.malformed("READ_LIST entry of length " + length, false);
            return;
        }
        qp.responder.onRequest(Wire.READ_REQUEST, psn, length, rkey, va, 0, 0, 0);
    }

    /** The requester takes the first of {@code count} READ responses of a list; the input hands it the others. */
    void listResponses(int count) {
        listResponsesLeft = count - 1;
    }

    /** READ_LIST entries parsed so far (tests, diagnostics). */
    long listEntries() {
        return listEntries;
    }

    private void clearLists() {
        listEntriesLeft = 0;
        listResponsesLeft = 0;
    }

    // ------------------------------------------------------------------------------------------------ the sink

    /** Moves payload bytes from staging, then straight from the socket, into the sink. */
    private long fillSink(SocketChannel channel) throws IOException {
        long moved = 0;
        while (sinkIndex < sinkCount) {
            long remaining = sinkLength[sinkIndex] - sinkDone;
            if (remaining == 0) {
                sinkRegion[sinkIndex] = null;
                sinkIndex++;
                sinkDone = 0;
                continue;
            }
            SoftMemoryRegion region = sinkRegion[sinkIndex];
            int staged = staging.remaining();
            if (staged > 0) {
                int n = (int) Math.min(staged, remaining);
                if (region != null) {
                    MemorySegment.copy(stagingSegment, staging.position(), region.segment(),
                        sinkOffset[sinkIndex] + sinkDone, n);
                }
                staging.position(staging.position() + n);
                sinkDone += n;
                moved += n;
                continue;
            }
            int n;
            if (region == null) {
                staging.clear();
                staging.limit((int) Math.min(staging.capacity(), remaining));
                readAttempts++;
                try {
                    n = channel.read(staging);
                } finally {
                    staging.clear().limit(0);
                }
                sinkReadDrained = false;
            } else if (remaining < DIRECT_READ_MIN_BYTES) {
                // A small piece: read what the socket has into staging; the loop copies this piece from it and the
                // frames behind it are parsed from there (one read() per 32 KiB, not one per row of a list).
                staging.clear();
                n = readIntoStaging(channel);
                if (n > 0) {
                    sinkReadDrained = stagingReadDrained;
                    readCalls++;
                    connection.received(System.nanoTime());
                    continue;
                }
            } else {
                ByteBuffer view = views.view(region, sinkOffset[sinkIndex] + sinkDone, remaining);
                readAttempts++;
                n = channel.read(view);
                sinkReadDrained = false;
            }
            if (n < 0) {
                return -1;
            }
            if (n == 0) {
                return moved;
            }
            readCalls++;
            connection.received(System.nanoTime());
            sinkDone += n;
            moved += n;
        }
        return moved == 0 ? 1 : moved;
    }

    /** Starts an empty sink for the payload of the frame just parsed. */
    void clearSink() {
        sinkCount = sinkIndex = 0;
        sinkDone = 0;
    }

    /** Adds {@code length} bytes at {@code offset} of {@code region} to the sink. */
    void sink(SoftMemoryRegion region, long offset, long length) {
        sinkRegion[sinkCount] = region;
        sinkOffset[sinkCount] = offset;
        sinkLength[sinkCount] = length;
        sinkCount++;
    }

    /** Forgets a sink being built (a scatter entry failed its check): no payload is placed. */
    void dropSink() {
        for (int k = 0; k < sinkCount; k++) {
            sinkRegion[k] = null;
        }
        sinkCount = 0;
    }

    /** The payload of the request just parsed is read and thrown away. */
    void discardPayload(int length) {
        sinkCount = sinkIndex = 0;
        sinkDone = 0;
        if (length > 0) {
            sink(null, 0, length);
            sinkOwner = SINK_DISCARD;
        }
    }

    /** The sink is complete: the responder is told when it is full (at once when it is empty). */
    void placeForResponder() {
        sinkOwner = SINK_RESPONDER;
        if (sinkCount == 0) {
            payloadDone();
        }
    }

    /** The sink is complete: the requester is told when it is full (at once when it is empty). */
    void placeForRequester() {
        sinkOwner = SINK_REQUESTER;
        if (sinkCount == 0) {
            payloadDone();
        }
    }

    private void payloadDone() {
        int owner = sinkOwner;
        sinkOwner = SINK_NONE;
        if (owner == SINK_RESPONDER) {
            qp.responder.onPayloadPlaced();
        } else if (owner == SINK_REQUESTER) {
            qp.requester.onReadResponsePlaced();
        }
    }

    // ------------------------------------------------------------------------------------------------ lifecycle

    /** A new connection: nothing staged, no sink, reading. */
    void reset() {
        staging.clear().limit(0);
        sinkCount = sinkIndex = 0;
        sinkDone = 0;
        sinkOwner = SINK_NONE;
        drainAll = false;
        paused = false;
        clearLists();
        views.clear();
    }

    /** The QP entered ERR: the payload being placed is abandoned. */
    void abortPayload() {
        sinkCount = sinkIndex = 0;
        sinkOwner = SINK_NONE;
        clearLists();
    }

    /** The connection closes gracefully: read and discard everything until the peer closes. */
    void startDraining() {
        drainAll = true;
        paused = false;
        clearLists();
    }

    /** Reads away what already arrived, so that closing does not reset the connection (best effort). */
    void drainAvailable(SocketChannel channel) throws IOException {
        staging.clear();
        while (channel.read(staging) > 0) {
            staging.clear();
        }
    }

    /** The socket closed: drop the sink. */
    void abandon() {
        sinkCount = sinkIndex = 0;
        for (int i = 0; i < sinkRegion.length; i++) {
            sinkRegion[i] = null;
        }
        drainAll = false;
        clearLists();
    }
}
