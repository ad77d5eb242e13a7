package io.jccl.collectives;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

/**
 * The issue order of a communicator's operations: every call takes a ticket and runs when the operations before it
 * are done, so calls complete in the order they were issued, and every rank must issue the same order (as with
 * NCCL). Asynchronous calls run on one executor thread, created on first use.
 *
 * <p>One thread issues at a time. Calls from two threads whose order no rank controls would pair different calls
 * on different ranks and mix their buffers without an error, so a call issued while calls of another thread are in
 * flight (queued or running) fails at once with an {@link IllegalStateException}; a thread may take over once the
 * calls of the previous one are done. The issuer travels in the ticket word itself (the high bits: part of the
 * thread id; the low bits: the ticket), so the check costs no more than the atomic increment it replaces.
 */
final class OperationOrder {
    /** Work that runs with a ticket on the executor thread. */
    @FunctionalInterface
    interface Ticketed {
        void run(long ticket);
    }

    /** Ticket bits of the ticket word (tickets wrap modulo 2^44; only equality is ever compared). */
    private static final int TICKET_BITS = 44;
    private static final long TICKET_MASK = (1L << TICKET_BITS) - 1;
    private static final VarHandle NEXT;

    static {
        try {
            NEXT = MethodHandles.lookup().findVarHandle(OperationOrder.class, "next", long.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    private final Object turn = new Object();
    private final String threadName;
    private final String communicator;
    /** The ticket word: issuing thread (high bits of its id) and the next ticket to hand out (low bits). */
    private volatile long next;
    /** Operations finished (only the turn holder writes it; compared modulo 2^44 with tickets). */
    private volatile long served;
    private volatile int turnWaiters;
    /** The thread that issued the last call (for the error message only). */
    private volatile Thread issuer;
    private ExecutorService executor;

    /** The order of communicator {@code communicator} whose executor thread is called {@code threadName}. */
    OperationOrder(String communicator, String threadName) {
        this.communicator = communicator;
        this.threadName = threadName;
    }

    /**
     * Takes the next ticket for a call the current thread issues.
     *
     * @throws IllegalStateException when calls another thread issued are still in flight
     */
    long take() {
        Thread me = Thread.currentThread();
        long id = me.threadId() & ((1L << (64 - TICKET_BITS)) - 1);
        while (true) {
            long word = next;
            long ticket = word & TICKET_MASK;
            if (word >>> TICKET_BITS != id && ticket != (served & TICKET_MASK)) {
                Thread other = issuer;
                throw new IllegalStateException("communicator " + communicator + ": thread '" + me.getName()
                    + "' issued a call while calls issued by thread '" + (other == null ? "?" : other.getName())
                    + "' are still in flight. Ranks pair calls by their order, and two threads' calls are ordered "
                    + "differently on different ranks: issue calls from one thread at a time (asynchronous calls "
                    + "from one thread keep their order), or use one communicator per thread (split)");
            }
            if (NEXT.compareAndSet(this, word, id << TICKET_BITS | ((ticket + 1) & TICKET_MASK))) {
                if (issuer != me) {
                    issuer = me;
                }
                return ticket;
            }
        }
    }

    /** Takes the next ticket whoever issued the calls in flight (close waits behind them). */
    long takeAfterAll() {
        long id = Thread.currentThread().threadId() & ((1L << (64 - TICKET_BITS)) - 1);
        while (true) {
            long word = next;
            long ticket = word & TICKET_MASK;
            if (NEXT.compareAndSet(this, word, id << TICKET_BITS | ((ticket + 1) & TICKET_MASK))) {
                return ticket;
            }
        }
    }

    /** Waits until the operations before {@code ticket} are done. */
    void awaitTurn(long ticket) {
        if ((served & TICKET_MASK) == ticket) {
            return;
        }
        awaitTurn(ticket, Long.MAX_VALUE);
    }

    /** Waits at most {@code timeoutNs} until the operations before {@code ticket} are done; returns whether they are. */
    boolean awaitTurn(long ticket, long timeoutNs) {
        if ((served & TICKET_MASK) == ticket) {
            return true;
        }
        long deadline = timeoutNs == Long.MAX_VALUE ? Long.MAX_VALUE : System.nanoTime() + timeoutNs;
        synchronized (turn) {
            // Waiters register before re-reading served; release writes served before reading turnWaiters (both
            // volatile), so one of the two sees the other and no wake-up is lost (wait(10) bounds it anyway).
            turnWaiters++;
            try {
                while ((served & TICKET_MASK) != ticket) {
                    if (deadline != Long.MAX_VALUE && System.nanoTime() - deadline >= 0) {
                        return false;
                    }
                    try {
                        turn.wait(10);
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                        throw new CollectiveException.Aborted("interrupted while waiting for earlier operations", e);
                    }
                }
                return true;
            } finally {
                turnWaiters--;
            }
        }
    }

    /** The turn holder is done: the next ticket runs. */
    void release() {
        served = served + 1; // only the turn holder writes it
        if (turnWaiters > 0) {
            synchronized (turn) {
                turn.notifyAll();
            }
        }
    }

    /** Takes a ticket and runs {@code work} with it on the executor thread; the future completes when it returns. */
    CompletableFuture<Void> submit(Ticketed work) {
        CompletableFuture<Void> future = new CompletableFuture<>();
        synchronized (turn) {
            // under the lock: tickets reach the single executor thread in increasing order
            long ticket = take();
            if (executor == null) {
                executor = Executors.newSingleThreadExecutor(r -> Thread.ofPlatform().daemon().name(threadName)
                    .unstarted(r));
            }
            executor.execute(() -> {
                try {
                    work.run(ticket);
                    future.complete(null);
                } catch (Throwable e) {
                    future.completeExceptionally(e);
                }
            });
        }
        return future;
    }

    /** Stops the executor thread once the queued operations are done. */
    void shutdown() {
        synchronized (turn) {
            if (executor != null) {
                executor.shutdown();
            }
        }
    }
}
