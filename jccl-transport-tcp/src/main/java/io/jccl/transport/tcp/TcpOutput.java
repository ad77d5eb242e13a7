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
 * The byte level of a QP's transmit side (soft-iWARP's {@code siw_qp_tx}): the frame buffer where every outgoing
 * header is built ({@link FrameHeaderFlyweight}), small payloads copied behind it, large payloads written straight
 * from registered memory (the first piece in one gathering write with its header: one system call and no lone
 * 48-byte segment), and the output pump, which writes frames as the requester and responder produce them
 * ({@link TcpQueuePair#nextFrame()}) until the socket is full or the write budget is spent. Frames that are ready
 * together are <em>coalesced</em>: the pump appends small frames to the buffer while it holds less than
 * {@link #COALESCE_BYTES} and writes them with one {@code write()} (a list of READ requests, or the READ responses
 * to one input read, leave in one system call and arrive in one read; nothing waits for more frames to come).
 * Runs under the QP's lock.
 */
final class TcpOutput {
    /** Payloads up to this size are copied into the frame buffer: one write() per small message. */
    static final int SMALL_PAYLOAD_BYTES = 16 * 1024;
    /**
     * Frames ready at once are appended to the buffer while it holds less than this, then written together: 32 KiB
     * carries 680 READ requests or ~100 READ responses of 256 B per system call (docs/transport-tcp.md, "Coalesced
     * frames").
     */
    static final int COALESCE_BYTES = 32 * 1024;

    private final TcpQueuePair qp;
    private final TcpConnection connection;
    private final CounterSet counters;
    private final MemorySegment frameSegment;
    /** The frame being written: header and, for small payloads, the payload; its remaining bytes are unsent. */
    private final ByteBuffer frame;
    private final FrameHeaderFlyweight header = new FrameHeaderFlyweight();
    /** Header + payload piece for gathering writes. */
    private final ByteBuffer[] gather = new ByteBuffer[2];
    /** Whether {@link #frame} holds bytes still to send. */
    private boolean framePending;
    /** Where the frame built last starts in {@link #frame} (frames before it are coalesced and not yet sent). */
    private int frameStart;
    /** {@code write()} calls on the socket, and frames built (tests, diagnostics: frames per system call). */
    private long writeCalls;
    private long framesBuilt;
    private final RegionViews views = new RegionViews();
    // The current frame's payload in registered memory, written after (or gathered with) the frame buffer.
    private final SoftMemoryRegion[] sourceRegion;
    private final long[] sourceOffset;
    private final long[] sourceLength;
    private int sourceCount;
    private int sourceIndex;
    private long sourceDone;
    /** Bytes written by the current pump, and what it may write ({@link #pump(long)}). */
    private long pumpBytes;
    private long pumpBudget = TcpQueuePair.writeBudget;
    /** Most bytes one posting thread's pump wrote ({@link TcpQueuePair#POSTING_WRITE_BUDGET_BYTES}; tests). */
    private long postingPumpBytesMax;
    /** Pumps that stopped at the write budget with more to write (tests, diagnostics). */
    private long budgetStops;
    /** ACK word for the next request header built (0: none); a request header takes it. */
    private int carryAck;
    /** Whether our side of the socket is shut down (FIN sent). */
    private boolean outputShut;

    TcpOutput(TcpQueuePair qp, Arena arena, int maxSges, int maxInlineBytes) {
        this.qp = qp;
        this.connection = qp.connection;
        this.counters = qp.counters;
        frameSegment = arena.allocate(COALESCE_BYTES + Wire.HEADER + Math.max(SMALL_PAYLOAD_BYTES, maxInlineBytes),
            64);
        frame = frameSegment.asByteBuffer();
        header.wrap(frame, 0);
        sourceRegion = new SoftMemoryRegion[maxSges];
        sourceOffset = new long[maxSges];
        sourceLength = new long[maxSges];
    }

    /** The frame buffer, for the connector's HELLO and PROOF (which precede every frame). */
    ByteBuffer frameBuffer() {
        return frame;
    }

    /** The frame buffer's remaining bytes are to be sent (a PROOF written into it). */
    void markPending() {
        framePending = true;
    }

    /** Whether a frame is partly unsent (OP_WRITE wanted). */
    boolean busy() {
        return framePending || sourceIndex < sourceCount;
    }

    /** Pumps that stopped at the budget with more to write. */
    long budgetStops() {
        return budgetStops;
    }

    /** {@code write()} calls made on this QP's sockets so far. */
    long writeCalls() {
        return writeCalls;
    }

    /** Frames built so far (handshake messages not counted). */
    long framesBuilt() {
        return framesBuilt;
    }

    /**
     * Whether another frame may be appended to the buffer before it is written: nothing unsent follows a header from
     * registered memory (a large payload must directly follow its header), and the buffer has room for the largest
     * inline frame.
     */
    private boolean mayAppend() {
        // sourceCount is 0 again only once a large payload is written to its last byte: until then nothing else
        // may enter the stream, even with the buffer itself sent.
        return sourceCount == 0 && (!framePending || frame.limit() <= COALESCE_BYTES);
    }

    // ------------------------------------------------------------------------------------------------ the pump

    /**
     * Writes frames (responses first, then requests) until the socket is full, nothing is left, or
     * {@link TcpQueuePair#writeBudget} bytes were written: a posting or polling thread that could keep writing while
     * the peer drains would otherwise hold the QP lock (and not poll) for tens of milliseconds, and the progress
     * thread would take over and contend with it. A closing connection with nothing left to send sends FIN.
     */
    int pump() throws IOException {
        return pump(TcpQueuePair.writeBudget);
    }

    /**
     * A posting thread's pump: at most {@link TcpQueuePair#POSTING_WRITE_BUDGET_BYTES} (and the frame it is in);
     * returns whether it stopped at that budget with more to write (output left for the progress thread). Output
     * that waits for something else (a full socket, the READ depth, the peer's credits) is not the poster's to hand
     * over: the selector or the next poll takes it on, as before.
     */
    boolean pumpForPoster() throws IOException {
        long stopsBefore = budgetStops;
        pump(TcpQueuePair.POSTING_WRITE_BUDGET_BYTES);
        postingPumpBytesMax = Math.max(postingPumpBytesMax, pumpBytes);
        return budgetStops != stopsBefore;
    }

    /** Most bytes one posting thread's pump wrote so far. */
    long postingPumpBytesMax() {
        return postingPumpBytesMax;
    }

    /** {@link #pump()} that writes about {@code budget} bytes at most (the frame in progress may end past it). */
    int pump(long budget) throws IOException {
        int frames = 0;
        if (connection.channel() == null) {
            return 0;
        }
        pumpBytes = 0;
        pumpBudget = budget;
        boolean more = true;
        while (true) {
            // Coalesce: build every frame that is ready now while the buffer has room, then write them at once.
            while (more && mayAppend()) {
                if (!qp.nextFrame()) {
                    more = false;
                } else {
                    frames++;
                }
            }
            if (!busy() || !writeCurrent()) {
                break;
            }
            if (pumpBytes >= budget) {
                if (qp.responder.hasResponses() || qp.requester.hasUnsent()) {
                    budgetStops++;
                }
                break;
            }
            if (!more) {
                break; // everything built is written, and nothing else was ready (writing starts nothing new)
            }
        }
        if (connection.state() == TcpConnection.CLOSING && !busy() && !qp.responder.hasResponses() && !outputShut) {
            try {
                shutdownOutput();
            } catch (IOException e) {
                qp.hardClose();
                return frames;
            }
        }
        qp.updateInterest();
        return frames;
    }

    /** Sends FIN once. */
    void shutdownOutput() throws IOException {
        if (!outputShut) {
            outputShut = true;
            connection.channel().shutdownOutput();
        }
    }

    /** Writes the current frame; false when the socket is full (or the budget ran out inside a payload). */
    boolean writeCurrent() throws IOException {
        SocketChannel channel = connection.channel();
        if (framePending && sourceIndex < sourceCount) {
            // Header and the first payload piece in one gathering write: one syscall and no lone 48-byte segment.
            ByteBuffer view = views.view(sourceRegion[sourceIndex], sourceOffset[sourceIndex] + sourceDone,
                sourceLength[sourceIndex] - sourceDone);
            int start = view.position();
            gather[0] = frame;
            gather[1] = view;
            long n;
            try {
                n = channel.write(gather);
            } finally {
                gather[1] = null;
            }
            writeCalls++;
            if (n > 0) {
                connection.sent(System.nanoTime());
                pumpBytes += n;
            }
            sourceDone += view.position() - start;
            if (frame.hasRemaining()) {
                return false;
            }
            framePending = false;
        }
        if (framePending) {
            int n = channel.write(frame);
            writeCalls++;
            if (n > 0) {
                connection.sent(System.nanoTime());
                pumpBytes += n;
            }
            if (frame.hasRemaining()) {
                return false;
            }
            framePending = false;
        }
        long budget = pumpBudget;
        while (sourceIndex < sourceCount) {
            long remaining = sourceLength[sourceIndex] - sourceDone;
            if (remaining == 0) {
                sourceRegion[sourceIndex] = null;
                sourceIndex++;
                sourceDone = 0;
                continue;
            }
            ByteBuffer view = views.view(sourceRegion[sourceIndex], sourceOffset[sourceIndex] + sourceDone,
                remaining);
            int n = channel.write(view);
            writeCalls++;
            if (n <= 0) {
                return false;
            }
            connection.sent(System.nanoTime());
            sourceDone += n;
            pumpBytes += n;
            if (pumpBytes >= budget && sourceDone < sourceLength[sourceIndex]) {
                budgetStops++;
                return false; // budget spent in the middle of a payload: the next pump goes on from here
            }
        }
        sourceCount = sourceIndex = 0;
        return true;
    }

    // ------------------------------------------------------------------------------------------------ framing

    /**
     * Builds a frame header. A request takes the offered ACK word ({@link #offerAck}) and so carries the ACK that
     * is the response ring's only entry instead of a frame of its own.
     */
    void header(int type, int flags, int syndrome, int timer, int psn, int length, int rkey, long va,
                long operand1, long operand2, int imm) {
        if (framePending) {
            frameStart = frame.limit(); // appended behind the unsent frames (mayAppend() said there is room)
        } else {
            frame.clear();
            frameStart = 0;
        }
        frame.limit(frameStart + Wire.HEADER);
        header.wrap(frame, frameStart);
        framesBuilt++;
        header.type(type).flags(flags).syndrome(syndrome).rnrTimer(timer).psn(psn).length(length).rkey(rkey).va(va)
            .operand1(operand1).operand2(operand2).immediate(imm);
        int ack = 0;
        if (carryAck != 0 && Wire.isRequest(type)) {
            ack = carryAck;
            carryAck = 0;
            qp.responder.ackCarried();
        } else if (type == Wire.ACK) {
            qp.responder.ackSentAlone();
        }
        header.ackWord(ack);
        framePending = true;
        counters.increment(Counter.PORT_XMIT_PACKETS);
    }

    /**
     * Payload bytes a frame built now may carry behind its header: the buffer's room after the frames coalesced in
     * it (at least {@link #SMALL_PAYLOAD_BYTES} whenever {@link #mayAppend()} allowed the frame). A READ_RESPONSE_LIST
     * takes as many READs as fit.
     */
    long listRoom() {
        return frame.capacity() - (framePending ? frame.limit() : 0) - Wire.HEADER;
    }

    /** The frame buffer's memory (small payloads are gathered or copied into it at {@link #payloadOffset()}). */
    MemorySegment frameSegment() {
        return frameSegment;
    }

    /** Where the payload of the header just built goes in {@link #frameSegment()} when it is copied behind it. */
    long payloadOffset() {
        return frameStart + Wire.HEADER;
    }

    /** The header just built is followed by {@code length} payload bytes already copied into the frame buffer. */
    void inlinePayload(int length) {
        frame.limit(frameStart + Wire.HEADER + length);
    }

    /**
     * The header just built is not sent after all (its request failed a local check while its payload was copied):
     * a carried ACK goes back to the response ring.
     */
    void cancelFrame() {
        counters.add(Counter.PORT_XMIT_PACKETS, -1);
        framesBuilt--;
        if (header.ackWord() != 0) {
            qp.responder.ackReturned();
        }
        frame.limit(frameStart); // the frames coalesced before it stay
        framePending = frame.hasRemaining();
    }

    /** Sets payload piece {@code index} of the next large frame (written from registered memory). */
    void source(int index, SoftMemoryRegion region, long offset, long length) {
        sourceRegion[index] = region;
        sourceOffset[index] = offset;
        sourceLength[index] = length;
    }

    /** The frame just built carries the first {@code count} payload pieces. */
    void sources(int count) {
        sourceCount = count;
        sourceIndex = 0;
        sourceDone = 0;
    }

    /** Forgets payload pieces set for a frame that is not built after all. */
    void dropSources(int count) {
        for (int k = 0; k < count; k++) {
            sourceRegion[k] = null;
        }
    }

    /** Offers a request built next the ACK word {@code ackWord} to carry (see {@link #header}). */
    void offerAck(int ackWord) {
        carryAck = ackWord;
    }

    /** Whether the offered ACK is still there (no request header took it). */
    boolean ackOffered() {
        return carryAck != 0;
    }

    /** Withdraws an offered ACK. */
    void withdrawAck() {
        carryAck = 0;
    }

    // ------------------------------------------------------------------------------------------------ lifecycle

    /** A new connection: nothing pending, FIN not sent, views dropped. */
    void reset() {
        frame.clear().limit(0);
        frameStart = 0;
        framePending = false;
        sourceCount = sourceIndex = 0;
        sourceDone = 0;
        carryAck = 0;
        outputShut = false;
        views.clear();
    }

    /** The socket closed: drop what was being sent. */
    void abandon() {
        sourceCount = sourceIndex = 0;
        for (int i = 0; i < sourceRegion.length; i++) {
            sourceRegion[i] = null;
        }
        framePending = false;
    }
}
