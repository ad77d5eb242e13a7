package io.jccl.transport.roce;

import io.jccl.common.CpuAffinity;
import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.ReceiveWorkRequest;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.VerbsException;
import io.jccl.verbs.WorkCompletion;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicReference;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * {@code JCCL_ROCE_POLL_WAIT}: a thread that polls one context's completion queue and finds nothing that many times
 * in a row waits in {@code ppoll} on the socket instead of spinning on (docs/transport-roce.md, "A poller that
 * waits"); a datagram that arrives meanwhile wakes it and completes its work; 0 turns it off. Counts, not times.
 */
class RocePollerWaitTest {
    private static final long GUARD_NS = 20_000_000_000L; // against hanging, not a timing assertion
    private static final java.lang.invoke.VarHandle STOP =
        java.lang.invoke.MethodHandles.arrayElementVarHandle(boolean[].class);

    @AfterEach
    void clearProperties() {
        System.clearProperty("jccl.roce.poll.wait");
        System.clearProperty("jccl.roce.poll.yield");
    }

    @Test
    void shouldWaitOnTheSocketAfterPollsInARowThatFindNothing() throws Exception {
        assumeTrue(FfmUdpSocket.available(), "FFM sockets: " + FfmUdpSocket.unavailableReason());
        System.setProperty("jccl.roce.poll.yield", "0"); // a yield on a loaded host may take a time slice
        long[] waits = inFreshThread(() -> emptyPollsAfterTraffic(RoceContext.POLL_WAIT_DEFAULT + 64));
        assertEquals(0, waits[0], "waits within the first " + (RoceContext.POLL_WAIT_DEFAULT - 32) + " empty polls");
        assertTrue(waits[1] > 0, "no wait in " + (RoceContext.POLL_WAIT_DEFAULT + 64) + " empty polls");
        System.setProperty("jccl.roce.poll.wait", "0");
        long[] none = inFreshThread(() -> emptyPollsAfterTraffic(RoceContext.POLL_WAIT_DEFAULT + 64));
        assertEquals(0, none[0] + none[1], "waits with JCCL_ROCE_POLL_WAIT=0");
        System.setProperty("jccl.roce.poll.wait", "-1");
        VerbsException e = assertThrows(VerbsException.class,
            () -> RoceProvider.device().open(new RoceSettings("127.0.0.1", 0, 1024)).close());
        assertTrue(e.getMessage().contains("JCCL_ROCE_POLL_WAIT=-1"), e.getMessage());
    }

    @Test
    void shouldWaitAfterAYieldThatGaveTheCoreAwayUnlessPinnedToOneCpu() throws Exception {
        assumeTrue(FfmUdpSocket.available(), "FFM sockets: " + FfmUdpSocket.unavailableReason());
        assumeTrue(CpuAffinity.available(), "sched_setaffinity");
        List<Integer> cpus = CpuAffinity.allowedCpus();
        assumeTrue(cpus.size() >= 2, "one CPU: " + cpus);
        // a busy thread bound to each CPU: wherever the poller runs, its yield may hand the core to one of them
        List<Thread> spinners = new ArrayList<>();
        boolean[] stop = new boolean[1];
        for (int cpu : cpus) {
            spinners.add(Thread.ofPlatform().daemon().name("spinner-" + cpu).start(() -> {
                CpuAffinity.bindCurrentThread(cpu);
                while (!((boolean) STOP.getVolatile(stop, 0))) {
                    Thread.onSpinWait();
                }
            }));
        }
        try {
            long waits = inFreshThread(RocePollerWaitTest::waitsAfterAYieldGaveTheCoreAway)[0];
            assertTrue(waits > 0, "no wait in a full idle streak after a yield that gave the core to another thread");
            long pinned = inFreshThread(() -> {
                CpuAffinity.bindCurrentThread(cpus.get(0));
                return waitsAfterAYieldGaveTheCoreAway();
            })[0];
            assertEquals(0, pinned, "a poller pinned to one CPU waited (it should keep yielding)");
        } finally {
            STOP.setVolatile(stop, 0, true);
            for (Thread t : spinners) {
                t.join();
            }
        }
    }

    /**
     * One 100-byte WRITE polled to completion on this thread, then empty polls until a yield gave the core away
     * ({@link RoceContext#pollerYieldsGivenAway}; the scheduler may also run the yielding thread on at once) and one
     * full idle streak after it: returns {waits in the run}. A wait after idle polls alone comes at 256, far later.
     * Retried where no yield gave the core away within 8 streaks, or where the traffic was 9 ms old or more at the
     * end (no wait is due then: a yield on a loaded host may take a time slice or more).
     */
    private static long[] waitsAfterAYieldGaveTheCoreAway() {
        return onWriteLink((ca, link, source, target) -> {
            WorkCompletion[] wc = WorkCompletion.array(1);
            int streak = RoceContext.POLL_YIELD_DEFAULT;
            for (int attempt = 0; attempt < 20; attempt++) {
                writeAndAwait(link.a(), link.qa(), source, target, 100);
                long waitsBefore = ca.pollerWaits();
                long givenAwayBefore = ca.pollerYieldsGivenAway();
                int end = 8 * streak;
                boolean gaveAway = false;
                for (int i = 0; i < end; i++) {
                    assertEquals(0, link.qa().poll(wc, 1));
                    if (!gaveAway && ca.pollerYieldsGivenAway() > givenAwayBefore) {
                        gaveAway = true;
                        end = i + 1 + streak + 4; // one full streak more (and a few polls the WRITE left counted)
                    }
                }
                boolean timely = System.nanoTime() - ca.lastDatagramNs() < RoceContext.RECENT_ACTIVITY_NS * 9 / 10;
                if (gaveAway && timely) {
                    return new long[] {ca.pollerWaits() - waitsBefore};
                }
            }
            assumeTrue(false, "20 tries without a yield that gave the core away within 9 ms of the traffic");
            return null;
        });
    }

    @Test
    void shouldWakeAWaitingPollerWithTheDatagramItWaitsFor() throws Exception {
        assumeTrue(FfmUdpSocket.available(), "FFM sockets: " + FfmUdpSocket.unavailableReason());
        RoceSettings settings = new RoceSettings("127.0.0.1", 0, 4096);
        try (RoceContext ca = (RoceContext) RoceProvider.device().open(settings);
             RoceContext cb = (RoceContext) RoceProvider.device().open(settings)) {
            LoopbackQueuePairs link = LoopbackQueuePairs.connect(ca, cb, 64, AccessFlag.REMOTE_WRITE);
            MemoryRegion source = link.pa().allocateMemory(1 << 16, AccessFlag.LOCAL_WRITE);
            MemoryRegion target = link.pb().allocateMemory(1 << 16, AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE);
            for (int i = 0; i < 1 << 16; i += 8) {
                source.segment().set(ValueLayout.JAVA_LONG, i, i * 0x9E3779B97F4A7C15L);
            }
            link.b().postReceive(new ReceiveWorkRequest().local(target, 0, 1 << 16));
            // B's poller: polls its queue alone until the SEND arrives (it drains B's socket, and waits in between)
            AtomicReference<WorkCompletion> received = new AtomicReference<>();
            Thread poller = Thread.ofPlatform().name("roce-wait-poller").start(() -> {
                WorkCompletion[] wc = WorkCompletion.array(1);
                long deadline = System.nanoTime() + GUARD_NS;
                while (System.nanoTime() < deadline) {
                    if (link.qb().poll(wc, 1) > 0) {
                        received.set(wc[0]);
                        return;
                    }
                }
            });
            // small WRITEs keep B's socket recently active (a poller waits only then) until B's poller has waited
            long deadline = System.nanoTime() + GUARD_NS;
            while (cb.pollerWaits() == 0) {
                writeAndAwait(link.a(), link.qa(), source, target, 64);
                assertTrue(System.nanoTime() < deadline, "B's poller never waited");
            }
            long waitsBefore = cb.pollerWaits();
            link.a().postSend(new SendWorkRequest().opcode(SendOpcode.SEND).flags(SendFlag.SIGNALED)
                .local(source, 0, 1 << 16));
            awaitCompletion(link.qa());
            poller.join(GUARD_NS / 1_000_000);
            WorkCompletion wc = received.get();
            assertTrue(wc != null && wc.isSuccess(), "B's waiting poller got no receive completion: " + wc);
            assertEquals(1 << 16, wc.byteLength());
            assertEquals(-1L, target.segment().mismatch(source.segment()));
            assertTrue(cb.pollerWaits() >= waitsBefore);
        }
    }

    /**
     * One 100-byte WRITE polled to completion on this thread (A's queue only, so the thread drives A's context
     * alone), then {@code polls} empty polls: returns {waits during the first POLL_WAIT_DEFAULT - 32, waits after}.
     * Retried where this thread was descheduled so long that the traffic may be over 10 ms old (no wait is due then).
     */
    private static long[] emptyPollsAfterTraffic(int polls) {
        return onWriteLink((ca, link, source, target) -> {
            WorkCompletion[] wc = WorkCompletion.array(1);
            long[] result = new long[2];
            for (int attempt = 0; attempt < 10; attempt++) { // the first ones run cold (interpreted downcalls)
                writeAndAwait(link.a(), link.qa(), source, target, 100);
                long before = ca.pollerWaits();
                // (a few polls between the ACK's arrival and its completion count as idle too)
                int early = RoceContext.POLL_WAIT_DEFAULT - 32;
                boolean timely = true;
                for (int i = 0; i < polls; i++) {
                    if (i == early) {
                        result[0] = ca.pollerWaits() - before;
                    }
                    if (i == RoceContext.POLL_WAIT_DEFAULT) {
                        // the 256th poll without a datagram came before this one (the count began at or before
                        // poll 0): within 9 ms of the last datagram it had to wait (a wait is due within 10 ms)
                        timely = System.nanoTime() - ca.lastDatagramNs() < RoceContext.RECENT_ACTIVITY_NS * 9 / 10;
                    }
                    assertEquals(0, link.qa().poll(wc, 1));
                }
                result[1] = ca.pollerWaits() - before - result[0];
                if (timely) {
                    return result;
                }
            }
            assumeTrue(false, "10 tries, each 9 ms or more after the last datagram: the host is too loaded");
            return result;
        });
    }

    /** What the empty-poll runs measure on: context A (polled), its link to B, and 4 KiB regions on both ends. */
    private interface WriteLinkBody {
        long[] run(RoceContext ca, LoopbackQueuePairs link, MemoryRegion source, MemoryRegion target);
    }

    /** Two contexts on loopback (MTU 1024), a linked queue pair each and a region each; closed after {@code body}. */
    private static long[] onWriteLink(WriteLinkBody body) {
        RoceSettings settings = new RoceSettings("127.0.0.1", 0, 1024);
        try (RoceContext ca = (RoceContext) RoceProvider.device().open(settings);
             RoceContext cb = (RoceContext) RoceProvider.device().open(settings)) {
            LoopbackQueuePairs link = LoopbackQueuePairs.connect(ca, cb, 64, AccessFlag.REMOTE_WRITE);
            MemoryRegion source = link.pa().allocateMemory(4096, AccessFlag.LOCAL_WRITE);
            MemoryRegion target = link.pb().allocateMemory(4096, AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE);
            return body.run(ca, link, source, target);
        }
    }

    private static void writeAndAwait(QueuePair a, CompletionQueue qa, MemoryRegion source, MemoryRegion target,
                                      int bytes) {
        a.postSend(new SendWorkRequest().opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED)
            .local(source, 0, bytes).remote(target.address(), target.rkey()));
        awaitCompletion(qa);
    }

    private static void awaitCompletion(CompletionQueue cq) {
        WorkCompletion[] wc = WorkCompletion.array(1);
        long deadline = System.nanoTime() + GUARD_NS;
        while (cq.poll(wc, 1) == 0) {
            assertTrue(System.nanoTime() < deadline, "no completion in 20 s");
        }
        assertTrue(wc[0].isSuccess(), wc[0]::toString);
    }

    /** Runs {@code body} in a new thread: a poller's count of empty polls is per thread (and per context pair). */
    private static long[] inFreshThread(java.util.function.Supplier<long[]> body) throws Exception {
        AtomicReference<long[]> result = new AtomicReference<>();
        AtomicReference<Throwable> failure = new AtomicReference<>();
        Thread t = Thread.ofPlatform().start(() -> {
            try {
                result.set(body.get());
            } catch (Throwable e) {
                failure.set(e);
            }
        });
        t.join();
        Throwable f = failure.get();
        if (f instanceof RuntimeException r) {
            throw r; // an assumption that aborts the test, too
        }
        if (f instanceof Error e) {
            throw e;
        }
        return result.get();
    }
}
