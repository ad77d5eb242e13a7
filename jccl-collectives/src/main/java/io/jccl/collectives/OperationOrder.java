package io.jccl.collectives;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

/**
 * The issue order of a communicator's operations: every call takes a ticket and runs when the operations before it
 * are done, so calls from several threads, blocking or asynchronous, complete in the order they were issued (and
 * every rank must issue the same order, as with NCCL). Asynchronous calls run on one executor thread, created on
 * first use.
 */
final class OperationOrder {
    /** Work that runs with a ticket on the executor thread. */
    @FunctionalInterface
    interface Ticketed {
        void run(long ticket);
    }

    private final Object turn = new Object();
    private final String threadName;
    /** Tickets: the next one to hand out, the number of operations finished, threads waiting in awaitTurn. */
    private volatile long nextTicket;
    private volatile long served;
    private volatile int turnWaiters;
    private ExecutorService executor;
    private static final java.lang.invoke.VarHandle NEXT_TICKET;

    static {
        try {
            NEXT_TICKET = java.lang.invoke.MethodHandles.lookup().findVarHandle(OperationOrder.class, "nextTicket",
                long.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    /** The order of a communicator whose executor thread is called {@code threadName}. */
    OperationOrder(String threadName) {
        this.threadName = threadName;
    }

    /** Takes the next ticket. */
    long take() {
        return (long) NEXT_TICKET.getAndAdd(this, 1L);
    }

    /** Waits until the operations before {@code ticket} are done. */
    void awaitTurn(long ticket) {
        if (served == ticket) {
            return;
        }
        synchronized (turn) {
            // Waiters register before re-reading served; release writes served before reading turnWaiters (both
            // volatile), so one of the two sees the other and no wake-up is lost (wait(10) bounds it anyway).
            turnWaiters++;
            try {
                while (served != ticket) {
                    try {
                        turn.wait(10);
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                        throw new CollectiveException.Aborted("interrupted while waiting for earlier operations", e);
                    }
                }
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
