package io.jccl.transport.tcp;

/**
 * Who drives a tcp QP's socket I/O, and when the progress thread stays out of the way: the one place where that is
 * decided. One instance per progress thread ({@link TcpEngine}), one {@link QueuePairIo} per queue pair.
 *
 * <p>A QP's socket is read and written under the QP's lock by whoever takes it: an <b>application thread</b> (a
 * completion-queue poll does the QP's I/O inline, {@link TcpQueuePair#progress()}; a post writes its request itself)
 * or the QP's <b>progress thread</b> (readiness from its selector, kicks, timers). Waking a blocked thread costs
 * 40–150 µs on the target machines, so the common path must not need the progress thread, and the progress thread
 * must not take a core from pollers on a 2-core machine. The rules:
 *
 * <ol>
 *   <li><b>Application-driven QP.</b> A QP is application-driven while an application poll or post drove it, or found
 *       its lock taken by someone doing its I/O, less than {@link #DRIVEN_NS} ago (longer than a scheduler time slice,
 *       so a poller preempted for a moment does not hand the I/O over). A poll drives an idle QP (nothing posted, no
 *       receive posted) only within {@link #RECENT_ACTIVITY_NS} of the connection's last traffic, so a CQ with
 *       hundreds of idle QPs costs no system calls per poll.</li>
 *   <li><b>Standby.</b> While <em>every</em> connected QP of a progress thread is application-driven, the thread is
 *       in standby: it neither spins nor blocks in {@code select()} (spinning takes a core from the pollers, a blocked
 *       selector is woken by every segment), it parks and looks every {@link #STANDBY_TICK_NS} (non-blocking select,
 *       hand-over tasks, kicks, timers) and leaves readiness of driven QPs to the pollers. Otherwise it is
 *       <b>active</b>: it serves every ready QP, spinning and then blocking in {@code select()} when idle.</li>
 *   <li><b>ACK hold.</b> A poll that hands the application a message of at most {@link #HOLD_MAX_BYTES} holds that
 *       message's ACK (the response ring's only entry) back, so that the answer the application posts next carries it:
 *       one {@code write()} per message instead of two. Never two polls in a row, not when the progress thread is
 *       blocked in {@code select()} (it would not look), and not for larger messages (an application copies or
 *       reduces those before it answers, while the sender waits for the ACK). The progress thread leaves a holding
 *       QP alone for {@link #ACK_HOLD_NS} after the last poll, then sends the ACK itself; the QP's next poll, post or
 *       I/O round also ends the hold.</li>
 *   <li><b>Kicks.</b> A QP is kicked when the progress thread should look at it. <em>Urgent</em> kicks (a post that
 *       found the lock taken, a state change, a hand-over task) wake the thread at once, in standby too.
 *       <em>Lazy</em> kicks (an ACK hold) wait for the next loop or standby look; with only lazy kicks pending a
 *       thread in standby looks again after {@link #ACK_HOLD_NS}, not at once (looping on them kept it busy for as
 *       long as ACKs were held). A kick that found the lock taken is retried with the timers, 0.2 ms later
 *       (rule 5).</li>
 *   <li><b>Never park the progress thread behind an application thread.</b> It only try-locks a QP. A lock that is
 *       taken means its holder is doing the QP's I/O, so the QP counts as application-driven and is re-kicked lazily
 *       (a driven QP's next poll pumps its output anyway); readiness is level-triggered, so the next select reports
 *       what is left. Timers and kicks that find the lock taken retry 0.2 ms later (a kick retried at once kept
 *       the thread from ever blocking while an application thread held the lock: a core).</li>
 *   <li><b>A parking poller hands over.</b> A blocking completion-queue poll that found nothing while spinning and
 *       yielding ({@code SoftCompletionQueue}: 250 µs by default) parks for up to a millisecond; before it does, the
 *       QPs it drove stop counting as application-driven and a thread in standby is kicked urgently, so that it
 *       serves their sockets from {@code select()}. Without this a peer's READ arriving at a server whose only
 *       poller was parked waited for that poller or the next standby look: 1–2 ms (the transfer engine's agent
 *       polls its inbound queue this way). Before every park of the poll, not only its first: the poll after
 *       each wake-up drives the QPs again, and the progress thread goes back to standby.</li>
 *   <li><b>A polled socket's input is the poller's.</b> When the progress thread is woken by input on a QP whose lock
 *       an application thread holds, that has requests of its own outstanding (the poller waits for their responses;
 *       a passive QP's poller, a server's agent, may be slow to come back, and READs must not wait for it), and an
 *       application poll read that QP's socket within {@link #DRIVEN_NS}, it stops
 *       watching that socket for input ({@code OP_READ} off) instead of finding it ready again on every
 *       {@code select()} until the poller has read it: that loop took a core from the poller (a tcp0 embedding
 *       client at batch 1: 8 000–117 000 selects per second on the client's progress thread, up to 10 % of a core,
 *       and one wake-up per lookup). It watches the socket again once no poll read it for {@link #DRIVEN_NS}
 *       (it looks at least every {@link #STANDBY_TICK_NS} while any is muted) or at once when the poller is about
 *       to park (rule 6), so a poller that stops is served as before. A QP driven only by posts (an application
 *       that polls memory, not the CQ) is never muted: nobody else would read its input.</li>
 * </ol>
 *
 * <p>These replace six flags that used to be spread over {@code TcpQueuePair} and {@code TcpEngine}: per QP
 * {@code drivenNs}, {@code ackHeld} and {@code kicked} (fields of {@link QueuePairIo}), per thread {@code standby},
 * {@code kickPending} and {@code urgentKick} (fields here). The measurements behind the numbers are in
 * docs/transport-tcp.md, "Why the I/O policy is what it is".
 */
final class IoDriverPolicy {
    /** How long after an application thread last drove a QP it still counts as application-driven. */
    static final long DRIVEN_NS = 1_000_000L;
    /** How long after the application's last poll a held-back ACK is left to it. */
    static final long ACK_HOLD_NS = 200_000L;
    /** How often a progress thread in standby looks at its connections. */
    static final long STANDBY_TICK_NS = 1_000_000L;
    /** Largest message whose ACK a delivering poll may hold back (above it the application works before answering). */
    static final int HOLD_MAX_BYTES = TcpOutput.SMALL_PAYLOAD_BYTES;
    /** How long after a connection's last traffic a CQ poll still reads it when nothing is outstanding. */
    static final long RECENT_ACTIVITY_NS = 10_000_000L;

    private final TcpEngine engine;
    /** Whether every connected QP of this thread is application-driven (rule 2). */
    private volatile boolean standby;
    /** Some QP was kicked, or a task handed over: the thread looks at them at its next loop or standby look. */
    private volatile boolean kickPending;
    /**
     * A kick that must not wait for the next standby look (rule 4). Written before the engine's sleeping state is
     * read, read after it is written, so a parking thread either sees it or is unparked.
     */
    private volatile boolean urgentKick;
    /** Standbys ended because a poller went to park (rule 6; racy increments, read by tests and diagnostics). */
    volatile long pollerHandOvers;

    IoDriverPolicy(TcpEngine engine) {
        this.engine = engine;
    }

    /** The driving state of a new queue pair of this thread. */
    QueuePairIo newQueuePair() {
        return new QueuePairIo(this);
    }

    // ------------------------------------------------------------------------------------- progress-thread side

    /** An urgent kick or a hand-over task: look at once, waking the thread from select or standby. */
    void kickUrgently() {
        urgentKick = true;
        kickPending = true;
        engine.wakeupIfSleeping();
    }

    /** A lazy kick: look at the next loop or standby look, without waking a sleeping thread. */
    void kickLazily() {
        kickPending = true;
    }

    /** Takes the pending kicks (urgent or lazy) for one round of tasks and kicked QPs; false when there are none. */
    boolean takeKicks() {
        if (!kickPending) {
            return false;
        }
        kickPending = false;
        urgentKick = false;
        return true;
    }

    /** Whether kicks are pending: the thread must not block in select. */
    boolean kickPending() {
        return kickPending;
    }

    /** Whether standby is wanted now: every connected QP application-driven, and at least one connected. */
    boolean standbyWanted(TcpQueuePair[] queuePairs, long nowNs) {
        boolean any = false;
        for (TcpQueuePair qp : queuePairs) {
            if (qp.connected()) {
                if (!qp.io.applicationDriven(nowNs)) {
                    return false;
                }
                any = true;
            }
        }
        return any;
    }

    /** Whether the thread is in standby now (tests). */
    boolean inStandby() {
        return standby;
    }

    /** Enters (or stays in) standby. */
    void enterStandby() {
        standby = true;
    }

    /** The thread found work while some QP is not application-driven: it is active. */
    void active() {
        standby = false;
    }

    /**
     * Leaves standby when the applications stopped driving, with nothing else to do; true if it was in standby. A
     * lazy kick makes the thread look at every kicked QP at once: they may hold back an ACK while driven.
     */
    boolean leaveStandby() {
        if (!standby) {
            return false;
        }
        standby = false;
        kickPending = true;
        return true;
    }

    /** Whether a thread about to park in standby may (no urgent kick pending; read after it said it parks). */
    boolean mayParkInStandby() {
        return !urgentKick;
    }

    /**
     * How long a thread in standby parks: its tick, or only the ACK hold time while lazy kicks are pending (a QP
     * holding back an ACK while its application polls: look again when the hold may have run out, not at once).
     */
    long standbyParkNs(long tickNs) {
        return kickPending ? Math.min(tickNs, ACK_HOLD_NS) : tickNs;
    }

    /**
     * Who drives one queue pair: when an application thread last did, whether a delivering poll holds its ACK back,
     * and whether the progress thread was asked to look at it. Written by whichever thread does the QP's I/O.
     */
    static final class QueuePairIo {
        private final IoDriverPolicy policy;
        /** When an application thread last drove this QP (or found its lock held by someone doing its I/O). */
        private volatile long drivenNs = System.nanoTime() - (1L << 62);
        /** A delivering poll holds this QP's ACK back for the application's answer to carry (rule 3). */
        private volatile boolean ackHeld;
        /** The progress thread should look at this QP (rule 4). */
        private volatile boolean kicked;
        /** Parking polls that handed this QP over (rule 6; racy increments, read by tests and diagnostics). */
        volatile long handOvers;
        /** When an application poll last read this QP's socket (rule 7). */
        private volatile long polledNs = System.nanoTime() - (1L << 62);
        /** The progress thread does not watch this QP's socket for input: its poller reads it (rule 7). */
        private volatile boolean readMuted;
        /** Times the progress thread muted this QP's input (rule 7; tests, diagnostics). */
        volatile long mutes;

        private QueuePairIo(IoDriverPolicy policy) {
            this.policy = policy;
        }

        /** Whether an application thread drove this QP within {@link #DRIVEN_NS}. */
        boolean applicationDriven(long nowNs) {
            return nowNs - drivenNs < DRIVEN_NS;
        }

        /**
         * Whether the progress thread leaves this connected QP's readiness to the application: in standby while it
         * is application-driven, otherwise while its ACK hold is open.
         */
        boolean leaveReadinessToApplication(long nowNs) {
            return policy.standby ? applicationDriven(nowNs) : ackHeld && nowNs - drivenNs < ACK_HOLD_NS;
        }

        /** Whether a poll holds this QP's ACK back and polled within {@link #ACK_HOLD_NS}. */
        boolean ackHoldOpen() {
            return ackHeld && System.nanoTime() - drivenNs < ACK_HOLD_NS;
        }

        /** An application thread posted to this QP (and will poll for the completion). */
        void posted(long nowNs) {
            drivenNs = nowNs;
        }

        /**
         * The application thread that drove this QP through a blocking poll is about to park (rule 6): it is no
         * longer driven, and a thread in standby is woken to serve the socket (it would look only at its next tick).
         */
        void pollerParks() {
            if (!applicationDriven(System.nanoTime())) {
                return;
            }
            handOvers++;
            drivenNs = System.nanoTime() - DRIVEN_NS;
            if (policy.standby) {
                policy.pollerHandOvers++;
                kickUrgently();
            }
        }

        /** Someone else holds the QP lock: the holder is doing this QP's I/O, so it is driven (rule 5). */
        void lockHeldElsewhere(long nowNs) {
            drivenNs = nowNs;
        }

        /**
         * An application poll starts an I/O round on this QP: it is driven now, and any hold ends. Returns whether
         * this round may hold the ACK of a message it delivers (not right after a hold: never two in a row).
         */
        boolean beginApplicationRound(long nowNs) {
            drivenNs = nowNs;
            polledNs = nowNs;
            boolean mayHold = !ackHeld;
            ackHeld = false;
            return mayHold;
        }

        /**
         * The poll delivered a small message: hold its ACK. The progress thread must look later in case the
         * application goes quiet (it never blocks in select with a kick pending); a thread already blocked there
         * would not look, so then there is no hold.
         */
        void holdAck() {
            kickLazily();
            ackHeld = !policy.engine.blockedInSelect();
        }

        /** Whether an ACK is held back (the output then leaves the ring's lone ACK for a request to carry). */
        boolean holdingAck() {
            return ackHeld;
        }

        /** The hold ends: an I/O round by anyone, the ACK sent or carried, an error or reset. */
        void releaseHold() {
            ackHeld = false;
        }

        /** Whether an application poll read this QP's socket within {@link #DRIVEN_NS} (rule 7). */
        boolean applicationPolls(long nowNs) {
            return nowNs - polledNs < DRIVEN_NS;
        }

        /** Whether the progress thread leaves this QP's input to its poller (rule 7). */
        boolean readMuted() {
            return readMuted;
        }

        /** The progress thread stops watching this QP's input (rule 7); true if it was watching. */
        boolean muteRead() {
            if (readMuted) {
                return false;
            }
            readMuted = true;
            mutes++;
            return true;
        }

        /** The progress thread watches this QP's input again (with the QP lock held, then the interest is set). */
        void unmuteRead() {
            readMuted = false;
        }

        /** Asks the progress thread to look at this QP at once. */
        void kickUrgently() {
            kicked = true;
            policy.kickUrgently();
        }

        /**
         * Marks this QP kicked without asking the thread to look: it looks with the next kicks, or when the retry
         * its engine scheduled is due ({@link TcpEngine#retryKicksAt}; rule 5, a kick that found the lock taken).
         */
        void kickLater() {
            kicked = true;
        }

        /** Asks the progress thread to look at this QP at its next loop or standby look. */
        void kickLazily() {
            kicked = true;
            policy.kickLazily();
        }

        /** Takes this QP's kick; false when it was not kicked. */
        boolean takeKick() {
            if (!kicked) {
                return false;
            }
            kicked = false;
            return true;
        }
    }
}
