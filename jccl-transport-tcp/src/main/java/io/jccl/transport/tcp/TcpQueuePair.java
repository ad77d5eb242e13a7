package io.jccl.transport.tcp;

import io.jccl.common.Log;
import io.jccl.common.SecureIds;
import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.Counter;
import io.jccl.verbs.Endpoint;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.QueuePairState;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.VerbsException;
import io.jccl.verbs.WorkCompletionOpcode;
import io.jccl.verbs.WorkCompletionStatus;
import io.jccl.verbs.spi.AbstractQueuePair;
import io.jccl.verbs.spi.CounterSet;
import io.jccl.verbs.spi.ReceiveSlot;
import io.jccl.verbs.spi.SendSlot;
import io.jccl.verbs.spi.SoftMemoryRegion;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.channels.CancelledKeyException;
import java.nio.channels.SelectionKey;
import java.util.concurrent.locks.ReentrantLock;

/**
 * A reliable-connected queue pair over one TCP connection. The same connection carries this QP's requests and its
 * responses to the peer's requests, in both directions. This class wires the parts together, as rxe's and siw's QP
 * structures hold theirs:
 * <ul>
 *   <li>{@link TcpConnection}: who connects, connect/retry, HELLO/CHALLENGE/PROOF, parked connections, deadlines,
 *   close;</li>
 *   <li>{@link TcpRequester}: send queue → requests, in-order completion, RNR retries, READ/atomic limits;</li>
 *   <li>{@link TcpResponder}: request checks, execution, READ/atomic responses, the ACK/NAK ring;</li>
 *   <li>{@link TcpOutput} / {@link TcpInput}: framing, the output pump and its budget / parsing and placement;</li>
 *   <li>{@link TcpLiveness}: the hung-peer limit from the QP's timeout and retry count, PING/PONG probes;</li>
 *   <li>{@link IoDriverPolicy.QueuePairIo}: whether an application thread or the progress thread drives the socket.</li>
 * </ul>
 * All of it runs under the QP's {@link #lock}, taken by the progress thread, by posting threads that transmit
 * directly, and by completion-queue polls that drive I/O themselves. The roles are separate classes outside the
 * base class's package, so what they use of its protected state goes through the package-private methods at the end.
 */
final class TcpQueuePair extends AbstractQueuePair implements TcpEngine.Handler {
    /**
     * Bytes one output pump writes before it lets go of the QP lock ({@link TcpOutput#pump()}). Not final only so
     * that a test can make it small enough to be hit whatever the socket buffers and the machine's load (at 4 MiB a
     * busy reader fills the socket first).
     */
    static long writeBudget = 4L << 20;
    /**
     * Bytes a thread posting a list ({@code postSend(requests, count)}) writes into the socket before it leaves the
     * rest to the progress thread (an urgent kick) and to the completion polls; single posts write up to
     * {@link #writeBudget} as before. A posting thread that wrote a whole large post list alone did the kernel's
     * copy for every queue pair in turn on one core while the progress thread idled: the transfer engine posts a
     * batch of 64 × 64 KiB as one list per queue pair, and its submit wrote 2 MiB into one socket, then 2 MiB into
     * the other (1.5-1.8 ms of a 1.9-2.0 ms batch, 0.69-0.77x a raw WRITE stream on loopback); with 256 KiB the two
     * threads write the two sockets at once, 0.97-1.07x (docs/transport-tcp.md, "A large post list is not the
     * poster's to copy alone"). Lists only: with it on every post, 2-rank tcp0 all-reduces of 256 KiB (single
     * posts) measured 1.50 against 2.01 GB/s busbw at the median of five runs, a hand-over costing a wake-up per
     * message.
     */
    static final long POSTING_WRITE_BUDGET_BYTES = 256L << 10;
    /** Largest message whose ACK a delivering poll holds back ({@link IoDriverPolicy#HOLD_MAX_BYTES}; tests). */
    static final int HOLD_MAX_BYTES = IoDriverPolicy.HOLD_MAX_BYTES;
    /** How long after a kick that found the lock taken the progress thread looks again (as timers do). */
    static final long KICK_RETRY_NS = 200_000L;

    final TcpContext tcp;
    final TcpEngine engine;
    final CounterSet counters;
    /**
     * This QP's 128-bit secret, published in its endpoint record: with the peer's, the input of the pair key that
     * the handshake proves (never sent on the wire).
     */
    final long secretHigh;
    final long secretLow;
    private final String addressText;
    /** Why the last connection was dropped for bad input (diagnostics; shown by toString). */
    private volatile String lastProtocolError;
    /**
     * Empty polls of the socket by CQ polls: once the socket has been empty for {@link #POLL_READ_GAP_AFTER_NS}
     * (longer than a loopback round trip, so ping-pongs are not touched), a poll reads it again only
     * {@link #pollReadGapNs} after the last empty read, a quarter of the wait so far, at most 8 µs: a lookup
     * waiting 150 µs for 256 rows polled the socket every ~3 µs, 30-odd empty {@code read()}s per batch, CPU its
     * server needed on a loaded host; the answer is picked up at most a quarter of the wait (≤ 8 µs) late. Lock held.
     */
    static final long POLL_READ_GAP_AFTER_NS = 16_000L;
    static final long POLL_READ_GAP_MAX_NS = 8_000L;
    /** When the current run of empty poll reads began (0: the last read had data). Lock held. */
    private long emptyPollReadsSinceNs;
    /** No poll reads the socket before this (after an empty read). Lock held. */
    private long nextPollReadNs;
    /** Requests posted when the empty run began: a new request starts a new wait, with short gaps again. */
    private long emptyPollReadsPosted;
    /** Poll reads skipped by the gap so far (tests, diagnostics). Lock held. */
    long pollReadsSkipped;
    /** Who drives this QP's socket I/O (application threads or the progress thread). */
    final IoDriverPolicy.QueuePairIo io;
    final TcpConnection connection;
    final TcpInput input;
    final TcpOutput output;
    final TcpRequester requester;
    final TcpResponder responder;
    final TcpLiveness liveness;

    TcpQueuePair(TcpProtectionDomain domain, TcpContext tcp, QueuePairInitAttributes init) {
        // Assigned before super(): the superclass publishes the QP in the context's QP table, where the
        // listener may look it up (it hands connections to its engine). The parts are made after super() (they
        // need the arena); no HELLO can name this QP before its endpoint record exists, which is later, and
        // the listener's hand-over and progress() (the CQs' polls) check for them.
        long high = SecureIds.nonce();
        long low = SecureIds.nonce();
        this.secretHigh = high;
        this.secretLow = low;
        this.tcp = tcp;
        this.counters = tcp.counterSet();
        TcpEngine assigned = tcp.nextEngine();
        this.engine = assigned;
        this.io = assigned.policy.newQueuePair();
        super(domain, init);
        this.addressText = new EndpointAddress(tcp.advertised, high, low).format();
        int sges = Math.max(init.maxSendSge(), init.maxReceiveSge()) + 1;
        connection = new TcpConnection(this);
        input = new TcpInput(this, arena, sges);
        output = new TcpOutput(this, arena, sges, TcpContext.MAX_INLINE);
        requester = new TcpRequester(this);
        responder = new TcpResponder(this);
        liveness = new TcpLiveness(this);
        engine.add(this);
    }

    @Override
    protected String localAddress() {
        return addressText;
    }

    // ================================================================================================ transitions

    @Override
    protected void beforeTransition(QueuePairState from, QueuePairState to, QueuePairAttributes attributes) {
        if (from == QueuePairState.INIT && to == QueuePairState.READY_TO_RECEIVE) {
            var remote = attributes.remote();
            if (!TcpProvider.NAME.equals(remote.provider())) {
                throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT, "ibv_modify_qp: remote endpoint "
                    + remote + " belongs to provider '" + remote.provider() + "'; a tcp QP connects only to tcp QPs");
            }
            EndpointAddress.parse(remote.address());
            if (remote.queuePairNumber() == queuePairNumber && remote.address().equals(addressText)) {
                throw new VerbsException(VerbsException.Reason.UNSUPPORTED, "ibv_modify_qp: a tcp QP cannot be "
                    + "connected to itself; create a second QP");
            }
        }
    }

    @Override
    protected void afterTransition(QueuePairState from, QueuePairState to) {
        if (to == QueuePairState.RESET) {
            hardClose();
            resetProtocol();
            connection.reset();
        } else if (from == QueuePairState.INIT && to == QueuePairState.READY_TO_RECEIVE) {
            resetProtocol();
            responder.sizeRing(Math.max(1, maxDestRdAtomic));
            connection.start();
        } else if (to == QueuePairState.READY_TO_SEND) {
            // The limit may have changed with the timeout and retry count: the liveness timer looks again.
            engine.schedule(System.nanoTime());
            if (connection.up()) {
                io.kickUrgently();
            }
        }
    }

    private void resetProtocol() {
        io.unmuteRead();
        input.reset();
        output.reset();
        responder.reset();
        requester.reset();
        liveness.reset();
        io.releaseHold();
    }

    /** The oldest outstanding send completes with {@code status} (or, with none, the QP just enters ERR). */
    void failQueuePair(WorkCompletionStatus status) {
        if (state == QueuePairState.ERROR || isClosed()) {
            return;
        }
        if (sendHead < sendTail) {
            completeSend(status, 0, 0);
        }
        enterError();
    }

    // ================================================================================================ engine entry

    /** Whether the connection is up (for the engine's standby decision). */
    boolean connected() {
        return connection.up();
    }

    @Override
    public void onSelected(SelectionKey selected) {
        long now = System.nanoTime();
        if (connection.up() && io.leaveReadinessToApplication(now)) {
            engine.dispatchFoundNothing();
            return; // an application thread is polling this QP and does its I/O; readiness is reported again
        }
        // Never park the progress thread behind an application thread (IoDriverPolicy, rule 5): the holder drives
        // the QP; without saying so the progress thread would loop on the still-ready key and take its core.
        if (!lock.tryLock()) {
            io.lockHeldElsewhere(now);
            engine.dispatchFoundNothing();
            try {
                if ((selected.readyOps() & SelectionKey.OP_READ) != 0 && sendHead != sendTail && connection.up()
                    && io.applicationPolls(now) && io.muteRead()) {
                    // Its poller waits for these responses and is reading them: stop finding the socket ready on
                    // every select (IoDriverPolicy, rule 7). Not a passive QP: its poller (a server's agent waiting
                    // for notifications) may be slow to come back, and a peer's READs must not wait for it.
                    engine.muted(this);
                    selected.interestOps(selected.interestOps() & ~SelectionKey.OP_READ);
                }
            } catch (CancelledKeyException closing) {
                // the lock holder is closing the connection: nothing to watch
            }
            return;
        }
        try {
            switch (connection.state()) {
                case TcpConnection.CONNECTING -> connection.finishConnect();
                case TcpConnection.HANDSHAKE -> connection.readChallenge();
                case TcpConnection.UP, TcpConnection.CLOSING -> ioRound();
                default -> selected.cancel();
            }
        } catch (IOException e) {
            onLinkLost();
        } catch (RuntimeException e) {
            onInternalError(e);
        } finally {
            lock.unlock();
        }
    }

    /** The progress thread looks at this kicked QP; false when it found nothing it could do (not work). */
    boolean onKick() {
        if (io.ackHoldOpen()) {
            // The application polls this QP and will send the held ACK (on its answer or at its next poll).
            io.kickLazily();
            return true; // looked at again next round until the hold runs out (at most ACK_HOLD_NS)
        }
        if (!lock.tryLock()) {
            // The holder may have missed the new request: look again in 0.2 ms, with the timers (the holder drives
            // this QP, and a driven QP's next poll pumps its output anyway). A lazy kick here made the thread loop
            // on it, never blocking, for as long as an application thread held the lock: a core.
            long now = System.nanoTime();
            io.lockHeldElsewhere(now);
            io.kickLater();
            engine.retryKicksAt(now + KICK_RETRY_NS);
            return false;
        }
        try {
            int c = connection.state();
            if (c == TcpConnection.UP || c == TcpConnection.CLOSING) {
                ioRound();
            }
            return true;
        } catch (IOException e) {
            onLinkLost();
            return true;
        } catch (RuntimeException e) {
            onInternalError(e);
            return true;
        } finally {
            lock.unlock();
        }
    }

    /** Timers: connection retries and deadlines, RNR retry, peer liveness (probes, the limit), close linger. */
    long onTimer(long nowNs) {
        if (!lock.tryLock()) {
            return nowNs + 200_000L; // busy: try again shortly
        }
        try {
            long next = connection.onTimer(nowNs);
            if (connection.up()) {
                next = Math.min(next, requester.onTimer(nowNs));
            }
            if (connection.up()) {
                next = Math.min(next, liveness.onTimer(nowNs));
            }
            return next;
        } catch (IOException e) {
            onLinkLost();
            return Long.MAX_VALUE;
        } catch (RuntimeException e) {
            onInternalError(e);
            return Long.MAX_VALUE;
        } finally {
            lock.unlock();
        }
    }

    // ================================================================================================ application

    @Override
    protected void onSendPosted() {
        startPosted(false);
    }

    /** A post list: the poster writes at most {@link #POSTING_WRITE_BUDGET_BYTES} of it, the rest is handed over. */
    @Override
    protected void onSendListPosted() {
        startPosted(true);
    }

    private void startPosted(boolean list) {
        if (!connection.up()) {
            return; // sent once the connection is up
        }
        io.posted(System.nanoTime()); // a posting thread is active on this QP (and polls for the completion)
        if (lock.tryLock()) {
            try {
                if (connection.up()) {
                    if (!list) {
                        output.pump();
                    } else if (output.pumpForPoster()) {
                        io.kickUrgently(); // the rest of a large list: the progress thread writes it meanwhile
                    }
                }
            } catch (IOException e) {
                onLinkLost();
            } catch (RuntimeException e) {
                onInternalError(e);
            } finally {
                lock.unlock();
            }
        } else {
            io.kickUrgently();
        }
    }

    @Override
    public void pollerParks() {
        // Only a passive QP (nothing of its own outstanding: a server answering READs) is handed over; one with
        // requests outstanding has a poller that will be back for their completions (IoDriverPolicy, rule 6).
        if (sendHead == sendTail) {
            io.pollerParks();
        }
        if (io.readMuted()) {
            watchInputAgain(); // the poller will not read it for a while: the progress thread must (rule 7)
        }
    }

    /**
     * The progress thread watches this QP's input again (IoDriverPolicy, rule 7): its poller stopped or parks. False
     * when the lock is taken (someone is doing the I/O; try again later). Wakes a selecting progress thread when
     * called from another thread.
     */
    boolean watchInputAgain() {
        if (!lock.tryLock()) {
            return false;
        }
        try {
            io.unmuteRead();
            updateInterest();
            return true;
        } catch (CancelledKeyException closing) {
            return true; // the connection closed meanwhile: nothing to watch
        } finally {
            lock.unlock();
        }
    }

    @Override
    public int progress() {
        // Completion-queue polls drive the socket too: a busy-polling application then sees ACKs and incoming
        // messages without waiting for the progress thread to wake up. The base constructor attaches this QP to its
        // CQs before the parts exist, so a poll on another thread may come first.
        TcpConnection c = connection;
        if (c == null || !c.up()) {
            return 0;
        }
        long now = System.nanoTime();
        if (!lock.tryLock()) {
            io.lockHeldElsewhere(now); // someone is doing this QP's I/O right now; we keep polling
            return 0;
        }
        try {
            // With nothing of ours outstanding, read only a recently active connection: a peer's one-sided
            // requests (a WRITE ping-pong polls memory, not receives) then land without waiting for the progress
            // thread to be scheduled, while a CQ with hundreds of idle QPs costs no syscalls per poll.
            if (sendHead == sendTail && receiveHead == receiveTail
                && now - connection.quietSinceNs() > IoDriverPolicy.RECENT_ACTIVITY_NS) {
                return 0;
            }
            if (!connection.up()) {
                return 0;
            }
            // Hold back the ACK of a small message this poll delivers, so the application's answer can carry it
            // (IoDriverPolicy, rule 3).
            boolean mayHold = io.beginApplicationRound(now);
            long delivered = responder.markDeliveries();
            int work = pollRead(now);
            if (mayHold && responder.deliveredSmallSince(delivered) && connection.up()) {
                io.holdAck();
            }
            work += output.pump();
            return work + resumeInput();
        } catch (IOException e) {
            onLinkLost();
            return 1;
        } catch (RuntimeException e) {
            onInternalError(e);
            return 1;
        } finally {
            lock.unlock();
        }
    }

    /**
     * A CQ poll's read of the socket, skipped while an empty run's gap lasts (see {@link #POLL_READ_GAP_AFTER_NS}):
     * polls come far more often than data, and each empty read is a system call. Lock held.
     */
    private int pollRead(long now) throws IOException {
        long since = emptyPollReadsSinceNs;
        if (since != 0 && emptyPollReadsPosted != sendTail) {
            since = 0; // a request posted since: its answer is a new wait (a ping-pong's gaps start short again)
        }
        if (since != 0 && now - nextPollReadNs < 0) {
            pollReadsSkipped++;
            return 0;
        }
        long readsBefore = input.readCalls();
        int work = input.read();
        if (work > 0 || input.readCalls() != readsBefore) {
            emptyPollReadsSinceNs = 0;
        } else {
            if (since == 0) {
                since = now == 0 ? 1 : now;
                emptyPollReadsSinceNs = since;
                emptyPollReadsPosted = sendTail;
            }
            nextPollReadNs = now + pollReadGapNs(now - since);
        }
        return work;
    }

    /**
     * The gap before the next poll read after {@code emptyForNs} of empty ones: none for the first 16 µs, then a
     * quarter of the wait, at most 8 µs.
     */
    static long pollReadGapNs(long emptyForNs) {
        return emptyForNs < POLL_READ_GAP_AFTER_NS ? 0 : Math.min(POLL_READ_GAP_MAX_NS, emptyForNs >> 2);
    }

    // ================================================================================================ I/O rounds

    /** An I/O round from outside the usual entries (the acceptor's connection just authenticated); lock held. */
    void ioRoundOrFail() {
        try {
            ioRound();
        } catch (IOException e) {
            onLinkLost();
        } catch (RuntimeException e) {
            onInternalError(e);
        }
    }

    /** Reads what arrived, writes what is due (with the lock held). */
    int ioRound() throws IOException {
        io.releaseHold();
        int work = input.read();
        work += output.pump();
        return work + resumeInput();
    }

    /** Reading requests was paused for a full response ring: resume once it drained. */
    private int resumeInput() throws IOException {
        int work = 0;
        if (input.paused() && responder.free() >= 2 && connection.up()) {
            input.resume();
            updateInterest();
            work += input.read();
            work += output.pump();
        }
        return work;
    }

    /** Selector interest follows what is pending: reads unless paused, writes while output is waiting. */
    void updateInterest() {
        SelectionKey k = connection.key();
        if (k == null || !k.isValid()) {
            return;
        }
        boolean wantWrite = output.busy() || (connection.up() && (responder.hasResponses() || liveness.frameDue()));
        boolean watchRead = !input.paused() && !io.readMuted();
        int ops = (watchRead ? SelectionKey.OP_READ : 0) | (wantWrite ? SelectionKey.OP_WRITE : 0);
        if (k.interestOps() != ops) {
            k.interestOps(ops);
            if (Thread.currentThread() != engine.thread) {
                engine.wakeupIfSelecting();
            }
        }
    }

    /**
     * Builds the next frame into the output: a due PONG or PING first (they wait for nothing), then responses (in
     * order), then this QP's next request. When the ring's only response is an ACK, the next request carries it;
     * with no request to send, a held ACK stays for the application's answer, otherwise it goes out as a frame of
     * its own.
     */
    boolean nextFrame() {
        if (liveness.frameDue() && connection.up()) {
            liveness.buildFrame();
            return true;
        }
        if (responder.hasResponses()) {
            if (!responder.onlyAckLeft() || !connection.up()) {
                responder.buildResponse();
                return true;
            }
            output.offerAck(responder.soleAckWord());
            boolean built = requester.nextRequest();
            if (!output.ackOffered()) {
                return built; // the request took it
            }
            output.withdrawAck();
            if (built) {
                return true; // (a request is never built without taking it; kept for safety)
            }
            if (io.holdingAck()) {
                return false;
            }
            responder.buildResponse();
            return true;
        }
        return requester.nextRequest();
    }

    // ================================================================================================ errors, close

    /**
     * The peer sent something that is not the protocol: count it, fail the QP and drop the connection at once
     * (nothing more from this peer is read).
     */
    void malformed(String what, boolean response) {
        counters.increment(Counter.PORT_RCV_ERRORS);
        lastProtocolError = what;
        hardClose();
        if (state != QueuePairState.ERROR && !isClosed()) {
            if (response && sendHead < sendNext) {
                completeSend(WorkCompletionStatus.BAD_RESP_ERR, 0, 0);
            }
            enterError();
        }
    }

    /** The connection failed (EOF, reset, I/O error, a peer silent for the limit). */
    void onLinkLost() {
        int c = connection.state();
        if (c == TcpConnection.CLOSING || c == TcpConnection.CLOSED || c == TcpConnection.IDLE) {
            hardClose();
            return;
        }
        if (c == TcpConnection.CONNECTING || c == TcpConnection.HANDSHAKE) {
            connection.retryLater();
            return;
        }
        counters.increment(Counter.LINK_DOWNED);
        hardClose();
        failQueuePair(WorkCompletionStatus.RETRY_EXC_ERR);
    }

    private void onInternalError(RuntimeException e) {
        // For example a region's memory freed under a transfer. Contained to this QP.
        Log.get().warn(-1, Log.Subsys.NET, "tcp: QP 0x" + Integer.toHexString(queuePairNumber) + ": " + e);
        hardClose();
        if (state != QueuePairState.ERROR && !isClosed()) {
            failQueuePair(WorkCompletionStatus.GENERAL_ERR);
        }
    }

    @Override
    protected void onError() {
        io.releaseHold();
        io.unmuteRead(); // the close drains input: the progress thread reads it
        requester.reset();
        input.abortPayload();
        switch (connection.state()) {
            case TcpConnection.UP -> {
                // Graceful: send what is queued (a NAK explaining why), FIN, then drain until the peer closes too.
                // Closing with unread input would send an RST, which can destroy the NAK before it is read.
                connection.beginClose();
                input.startDraining();
                io.kickUrgently();
            }
            case TcpConnection.CLOSING, TcpConnection.CLOSED -> {
            }
            default -> hardClose();
        }
    }

    /**
     * Sends what this QP still owes the peer before its socket closes: above all the ACK of the last message it
     * took, which may be held back to ride on an answer that will now never be posted (an RC NIC has sent it by the
     * time the receive completes; without this the peer's request failed with RETRY_EXC_ERR at the end of a job).
     * Responses only, never a new request; best effort and non-blocking. Then FIN, and input already here is read
     * away so the close does not become a reset that could destroy those last bytes before the peer reads them.
     */
    private void flushResponsesBeforeClose() {
        int c = connection.state();
        if ((c != TcpConnection.UP && c != TcpConnection.CLOSING) || connection.channel() == null) {
            return;
        }
        io.releaseHold();
        output.withdrawAck();
        try {
            if (output.busy() && !output.writeCurrent()) {
                return;
            }
            while (responder.hasResponses()) {
                responder.buildResponse();
                if (!output.writeCurrent()) {
                    return;
                }
            }
            output.shutdownOutput();
            input.drainAvailable(connection.channel());
        } catch (IOException ignored) {
            // the peer is gone already: nothing left to deliver
        }
    }

    /** Closes the socket at once and drops whatever was being sent or placed. */
    void hardClose() {
        connection.close();
        input.abandon();
        output.abandon();
    }

    @Override
    protected void destroy() {
        lock.lock();
        try {
            flushResponsesBeforeClose();
            hardClose();
            connection.closeCandidates();
        } finally {
            lock.unlock();
        }
        engine.remove(this);
    }

    /** Most bytes one posting thread's output pump wrote ({@link #POSTING_WRITE_BUDGET_BYTES}; tests). */
    long postingPumpBytesMax() {
        lock.lock();
        try {
            return output.postingPumpBytesMax();
        } finally {
            lock.unlock();
        }
    }

    /** Output pumps that let go of the lock at the write budget with more to write (tests, diagnostics). */
    long budgetStops() {
        lock.lock();
        try {
            return output.budgetStops();
        } finally {
            lock.unlock();
        }
    }

    /**
     * {@code write()} calls, frames built, {@code read()} calls that returned bytes and every {@code read()} call on
     * this QP's sockets so far (tests, diagnostics: how many frames one system call carries).
     */
    long[] ioCounts() {
        lock.lock();
        try {
            return new long[] {output.writeCalls(), output.framesBuilt(), input.readCalls(), input.readAttempts()};
        } finally {
            lock.unlock();
        }
    }

    /**
     * {READ_LIST frames sent, READ_LIST entries parsed, READ_RESPONSE_LIST frames built, READ_RESPONSE_LIST frames
     * received} so far (tests, diagnostics).
     */
    long[] listCounts() {
        lock.lock();
        try {
            return new long[] {requester.readListsSent(), input.listEntries(), responder.responseLists(),
                requester.readResponseListsReceived()};
        } finally {
            lock.unlock();
        }
    }

    /** Parking polls that handed this QP over to its progress thread so far (tests, diagnostics). */
    long handOvers() {
        return io.handOvers;
    }

    /** {PINGs sent, PONGs received, PONGs sent} so far (tests, diagnostics). */
    long[] probeCounts() {
        lock.lock();
        try {
            return liveness.counts();
        } finally {
            lock.unlock();
        }
    }

    /** {standalone ACK frames sent, ACKs carried on requests} so far (tests, diagnostics). */
    long[] ackCounts() {
        lock.lock();
        try {
            return responder.ackCounts();
        } finally {
            lock.unlock();
        }
    }

    @Override
    public String toString() {
        String error = lastProtocolError;
        return "TcpQueuePair{qpn=0x" + Integer.toHexString(queuePairNumber) + ", " + state.shortName() + ", "
            + connection.stateName() + (error == null ? "" : ", last bad input: " + error) + "}";
    }

    // ================================================================================================ for the parts
    // The base class's state and checks are protected (package io.jccl.verbs.spi); the parts reach them here.

    ReentrantLock lock() {
        return lock;
    }

    boolean closed() {
        return isClosed();
    }

    Endpoint remoteEndpoint() {
        return remote;
    }

    int destQpNumber() {
        return destQpNumber;
    }

    int maxDestRdAtomic() {
        return maxDestRdAtomic;
    }

    int maxRdAtomic() {
        return maxRdAtomic;
    }

    int timeout() {
        return timeout;
    }

    int retryCount() {
        return retryCount;
    }

    int rnrRetry() {
        return rnrRetry;
    }

    int minRnrTimer() {
        return minRnrTimer;
    }

    int sqPsn() {
        return sqPsn;
    }

    long sendHead() {
        return sendHead;
    }

    long sendNext() {
        return sendNext;
    }

    void sendNext(long index) {
        sendNext = index;
    }

    long sendTail() {
        return sendTail;
    }

    SendSlot request(long index) {
        return sendSlot(index);
    }

    /** Completes the oldest send (see {@code AbstractQueuePair.completeSend}). */
    void completeRequest(WorkCompletionStatus status, int byteLength) {
        completeSend(status, byteLength, 0);
    }

    SoftMemoryRegion checkedLocalRegion(long address, long length, int lkey, boolean write) {
        return localRegion(address, length, lkey, write);
    }

    boolean localEntriesValid(SendSlot slot, boolean write) {
        return checkLocal(slot, write);
    }

    /** Copies a send's gather list into {@code target} (false: an entry failed its local check). */
    boolean gatherInto(SendSlot slot, MemorySegment target, long targetOffset, long length) {
        return gather(slot, 0, target, targetOffset, length);
    }

    /** The responder's expected PSN (rq_psn). */
    int expectedPsn() {
        return rqPsn;
    }

    void advanceExpectedPsn() {
        rqPsn = (rqPsn + 1) & Wire.PSN_MASK;
    }

    boolean accessAllows(SendOpcode opcode) {
        return acceptsIncoming(opcode);
    }

    SoftMemoryRegion checkedRemoteRegion(int rkey, long address, long length, AccessFlag needed) {
        return remoteRegion(rkey, address, length, needed);
    }

    boolean receiveQueueEmpty() {
        return receiveHead == receiveTail;
    }

    ReceiveSlot nextReceive() {
        return receiveSlot(receiveHead);
    }

    /** Completes the oldest receive, from the peer QP (see {@code AbstractQueuePair.completeReceive}). */
    void completeNextReceive(WorkCompletionStatus status, WorkCompletionOpcode opcode, int byteLength,
                             int immediate, boolean withImmediate) {
        completeReceive(status, opcode, byteLength, immediate, withImmediate, destQpNumber);
    }

    /** Moves the QP to ERR unless it is there already. */
    void enterErrorUnlessThere() {
        if (state != QueuePairState.ERROR) {
            enterError();
        }
    }
}
