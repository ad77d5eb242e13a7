package io.jccl.transport.tcp;

import io.jccl.common.Log;
import io.jccl.verbs.Counter;
import io.jccl.verbs.QueuePairAttributes;

import java.io.IOException;

/**
 * Link liveness of a QP's connection, done by the provider as a NIC would do it: the failure-detection policy of the
 * tcp provider in one place. Runs under the QP's lock, from the engine's timers and from whichever thread reads the
 * connection (the progress thread, or an application thread polling a CQ): no thread of its own, no busy loop.
 *
 * <p><b>The limit</b> is the QP's own: {@code 4.096 µs × 2^timeout × (retry_cnt+1)} from its RTS attributes, as an
 * RC NIC's local ACK timeout and retry count bound how long a request may go unanswered; timeout 0 is infinite (no
 * probe is sent and silence never fails the QP). It is at least {@link #MIN_LIMIT_NS} (1 s), see there.
 *
 * <p><b>Probes.</b> When the connection has received nothing for a quarter of the limit, this side sends a PING; the
 * peer's engine answers PONG from whatever thread reads the connection, without its application (a peer whose
 * application threads compute and never poll still answers: its progress thread serves a QP nobody polls). A
 * quarter, not a third or a half: a peer that stops (a GC pause, SIGSTOP) right after it last sent survives a stop of
 * the whole limit, and one that was idle when it stopped survives at least three quarters of it (the probe goes out
 * at most a quarter after its last frame). The idle cost is one PING and one PONG of 48 bytes per quarter limit per
 * connection (JCCL_PEER_TIMEOUT's default 30 s: one of each every 7.5 s), checked by the engine's timer pass that
 * already runs at least every 100 ms.
 *
 * <p><b>Long frames.</b> Frames are never interleaved, so a PING (or PONG) of a side that is writing a long frame
 * waits behind it, and that side hears nothing while the peer has nothing to send (one 1 GiB WRITE on a slow link).
 * So a side that is reading a frame of the peer's and has sent nothing for {@link #HEARTBEAT_NS} sends a PING of its
 * own, whatever its own limit: every side's limit is at least {@link #MIN_LIMIT_NS}, four times that interval.
 *
 * <p><b>Declared dead</b> when nothing at all arrived for the limit, with or without requests outstanding (PINGs
 * would have been answered): the QP goes to ERR as on a lost connection ({@code local_ack_timeout_err}++,
 * {@code link_downed}++, the oldest outstanding send RETRY_EXC_ERR, everything else flushed, receives included), so
 * a side that only waits on receives notices within about the limit. Before it declares, it reads what the socket
 * holds: a process that was itself stopped finds its peer's frames waiting. And the silence counted is the silence
 * it saw while running: the timer pass adds at most {@link #MAX_CHECK_STEP_NS} per pass, so a side that was stopped
 * (or starved of CPU) does not blame its peer for the time it did not run (with a shorter limit than its peer's it
 * would otherwise fail it on waking, before the peer had a reason to probe).
 *
 * <p>On tcp the "NIC" is code in the peer's JVM, so a frozen process is a lost link here, unlike RDMA hardware (the
 * HCA keeps acknowledging while the process is stopped) or shm (nothing to probe; the collectives' heartbeat
 * decides there). docs/transport-tcp.md, "Errors and lost connections", has the rules and numbers.
 *
 * <p>Wire: PING and PONG are 48-byte headers with every field 0 except the PSN field, which holds a 24-bit probe
 * sequence number (1, 2, ... per connection and direction; a PONG echoes the last PING received and answers every
 * PING up to it, as ACKs are cumulative). A PING out of sequence, a PONG for no outstanding PING, or either with a
 * non-zero field (a length, a payload) is a protocol error like any other malformed frame.
 */
final class TcpLiveness {
    /**
     * Smallest hung-peer limit, whatever the QP's attributes say. perftest's defaults (timeout 14, retry 7) give
     * 0.54 s, and the 'NIC' that has to answer here is a thread of a JVM, which a loaded 2-core host can deschedule
     * for a few hundred milliseconds and a young collection can pause for tens of them; with probes at a quarter of
     * the limit a stop shorter than 0.75 s always survives a limit of 1 s. A stop longer than that is failed: that is
     * what the attributes asked for (ask for more with a larger timeout, as the collectives do from JCCL_PEER_TIMEOUT).
     */
    static final long MIN_LIMIT_NS = 1_000_000_000L;
    /** Probes go out after a quarter of the limit without input. */
    static final int PROBE_FRACTION = 4;
    /**
     * A side reading a long frame of the peer's and sending nothing sends a PING this often: a quarter of the
     * smallest limit any peer can have, since the peer's own PINGs wait behind that frame.
     */
    static final long HEARTBEAT_NS = MIN_LIMIT_NS / PROBE_FRACTION;
    /**
     * Most silence one timer pass counts. The engine runs its timers at least every 100 ms; a longer gap means this
     * side did not run (stopped, paused or starved), which is no evidence against the peer.
     */
    static final long MAX_CHECK_STEP_NS = 250_000_000L;

    private final TcpQueuePair qp;
    private final TcpConnection connection;
    private final TcpOutput output;

    /** The sequence number of our last PING built, and the last one the peer answered. */
    private int pingSent;
    private int pingAnswered;
    /** A PING is to be built at the next frame boundary. */
    private boolean pingDue;
    /** When our last PING was asked for. */
    private long lastPingNs;
    /** The sequence number of the peer's last PING; whether our PONG for it is still to be built. */
    private int peerPing;
    private boolean pongOwed;

    /** Silence accounting: whether the connection's first check happened, when the last was, what it saw. */
    private boolean started;
    private long checkedNs;
    private long rxSeenNs;
    private long silentNs;
    /** The limit of the last check (attributes change at RTS, and may change again). */
    private long limitSeenNs;

    /** PINGs sent, PONGs received, PONGs sent (tests, diagnostics). */
    private long pingsSent;
    private long pongsReceived;
    private long pongsSent;

    TcpLiveness(TcpQueuePair qp) {
        this.qp = qp;
        this.connection = qp.connection;
        this.output = qp.output;
    }

    /**
     * The hung-peer limit for the QP's timeout code and retry count: {@code max(1 s, 4.096 µs × 2^timeout ×
     * (retry_cnt+1))}, {@link Long#MAX_VALUE} (never) for timeout 0.
     */
    static long limitNs(int timeout, int retryCount) {
        long ns = QueuePairAttributes.linkTimeoutNs(timeout, retryCount);
        return ns == Long.MAX_VALUE ? ns : Math.max(MIN_LIMIT_NS, ns);
    }

    /** A new connection (INIT→RTR, RESET): sequence numbers start over, nothing owed, silence not counted yet. */
    void reset() {
        pingSent = pingAnswered = peerPing = 0;
        pingDue = pongOwed = false;
        started = false;
        silentNs = 0;
    }

    // ------------------------------------------------------------------------------------------------ frames

    /** Whether a PING or PONG waits to be built (checked at every frame boundary: two field reads). */
    boolean frameDue() {
        return pongOwed | pingDue;
    }

    /** Builds the due control frame into the output: the PONG first (the peer is waiting for it). */
    void buildFrame() {
        if (pongOwed) {
            pongOwed = false;
            output.header(Wire.PONG, 0, 0, 0, peerPing, 0, 0, 0, 0, 0, 0);
            pongsSent++;
        } else {
            pingDue = false;
            pingSent = (pingSent + 1) & Wire.PSN_MASK;
            output.header(Wire.PING, 0, 0, 0, pingSent, 0, 0, 0, 0, 0, 0);
            pingsSent++;
        }
    }

    /**
     * A PING or PONG arrived (the input checked the PSN's 24 bits, the flags' known bits and the ACK word). Anything
     * but the sequence number non-zero, a PING out of sequence or a PONG for no outstanding PING is malformed input.
     */
    void onFrame(FrameHeaderFlyweight h) {
        int type = h.type();
        int sequence = h.psn();
        if ((h.flags() | h.syndrome() | h.rnrTimer() | h.length() | h.rkey() | h.immediate()) != 0
            || (h.va() | h.operand1() | h.operand2()) != 0) {
            qp.malformed(Wire.typeName(type) + " with non-zero fields", false);
            return;
        }
        if (type == Wire.PING) {
            if (sequence != ((peerPing + 1) & Wire.PSN_MASK)) {
                qp.malformed("PING " + sequence + " out of sequence, expected " + ((peerPing + 1) & Wire.PSN_MASK),
                    false);
                return;
            }
            peerPing = sequence;
            pongOwed = true; // built by the output pump that follows every read
            return;
        }
        int outstanding = (pingSent - pingAnswered) & Wire.PSN_MASK;
        int distance = (sequence - pingAnswered) & Wire.PSN_MASK;
        if (distance == 0 || distance > outstanding) {
            qp.malformed("PONG " + sequence + " for no outstanding PING", false);
            return;
        }
        pingAnswered = sequence;
        pongsReceived++;
    }

    // ------------------------------------------------------------------------------------------------ timer

    /**
     * With the connection up: counts the silence, probes, and fails the QP after the limit. Returns when to look
     * again (the engine looks at least every 100 ms anyway).
     */
    long onTimer(long nowNs) throws IOException {
        long rx = connection.lastRxNs();
        if (!started) {
            started = true;
            checkedNs = nowNs;
            rxSeenNs = rx;
            silentNs = Math.max(0, nowNs - rx);
            lastPingNs = nowNs - (1L << 62);
            limitSeenNs = Long.MAX_VALUE;
        }
        long step = nowNs - checkedNs;
        checkedNs = nowNs;
        if (rx != rxSeenNs) {
            rxSeenNs = rx;
            silentNs = Math.max(0, nowNs - rx);
        } else if (step > 0) {
            silentNs += Math.min(step, MAX_CHECK_STEP_NS);
        }
        long next = Long.MAX_VALUE;
        long limit = limitNs(qp.timeout(), qp.retryCount());
        if (limit != limitSeenNs) {
            // A new limit (RTR→RTS after a silent wait at RTR, or a later modify): the peer gets a PING now and at
            // least three quarters of the new limit to answer it, whatever the silence before.
            limitSeenNs = limit;
            silentNs = Math.min(silentNs, limit / PROBE_FRACTION);
        }
        if (limit != Long.MAX_VALUE) {
            if (silentNs >= limit) {
                // Read what is there first: if this side was the one that stopped, the peer's frames are waiting.
                qp.ioRound();
                if (!connection.up()) {
                    return Long.MAX_VALUE;
                }
                if (connection.lastRxNs() == rxSeenNs) {
                    // Nothing at all arrived for the limit, probes included: the peer is gone or frozen.
                    Log.get().warn(-1, Log.Subsys.NET, "tcp: QP 0x" + Integer.toHexString(qp.queuePairNumber())
                        + ": nothing received for " + silentNs / 1_000_000 + " ms of running time (limit "
                        + limit / 1_000_000 + " ms from timeout " + qp.timeout() + ", retry_cnt " + qp.retryCount()
                        + "; last input " + (nowNs - rxSeenNs) / 1_000_000 + " ms ago, PINGs sent " + pingSent
                        + " answered " + pingAnswered + ", reading a frame: " + qp.input.midFrame()
                        + "): the peer is declared dead");
                    qp.counters.increment(Counter.LOCAL_ACK_TIMEOUT_ERR);
                    qp.onLinkLost();
                    return Long.MAX_VALUE;
                }
                rxSeenNs = connection.lastRxNs();
                silentNs = 0;
            }
            long probeNs = limit / PROBE_FRACTION;
            if (silentNs >= probeNs && nowNs - lastPingNs >= probeNs) {
                askForPing(nowNs);
            }
            long untilProbe = silentNs < probeNs ? probeNs - silentNs : lastPingNs + probeNs - nowNs;
            next = nowNs + Math.max(1_000_000L, Math.min(limit - silentNs, untilProbe));
        }
        if (qp.input.midFrame()) {
            // The peer is writing a long frame: its own PINGs wait behind it, so it hears from us (see class comment).
            long since = Math.max(connection.lastTxNs(), lastPingNs);
            if (nowNs - since >= HEARTBEAT_NS) {
                askForPing(nowNs);
                since = nowNs;
            }
            next = Math.min(next, since + HEARTBEAT_NS);
        }
        return next;
    }

    private void askForPing(long nowNs) throws IOException {
        lastPingNs = nowNs;
        pingDue = true;
        output.pump();
    }

    /** {PINGs sent, PONGs received, PONGs sent} on this QP's connections (tests, diagnostics). */
    long[] counts() {
        return new long[] {pingsSent, pongsReceived, pongsSent};
    }
}
