package io.jccl.transport.shm;

import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.ReceiveWorkRequest;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.WorkCompletion;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The futex doorbell: a sleeper is woken through another mapping of the file (as a peer process would ring it),
 * and a ring between announcing and sleeping is not lost. Bounds are generous: a wake must come well before the
 * 20 s sleep would end by itself.
 */
class ShmDoorbellTest {
    /**
     * The futex handle is customized by the JDK (bytecode generated and loaded, ~64 KiB) where it is linked, not on
     * the thread of a sleeper's 128th wait, which can come at any time (roce0's ppoll did that mid-stream). A fresh
     * JVM, so that no earlier test in this one has made the 128 calls already.
     */
    @Test
    void shouldNotCustomizeTheFutexHandleOnASleepersThread() throws Exception {
        java.util.List<String> cmd = java.util.List.of(ProcessHandle.current().info().command().orElse("java"),
            "--enable-native-access=ALL-UNNAMED", "-XX:+UseSerialGC", "-Xmx64m", "-cp",
            System.getProperty("java.class.path"), FutexPrimingMain.class.getName());
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), java.nio.charset.StandardCharsets.UTF_8);
        assertTrue(p.waitFor(60, TimeUnit.SECONDS), out);
        org.junit.jupiter.api.Assumptions.assumeTrue(p.exitValue() != 2, out);
        java.util.regex.Matcher m = java.util.regex.Pattern.compile("allocated (\\d+)").matcher(out);
        assertTrue(m.find(), out);
        long bytes = Long.parseLong(m.group(1));
        assertTrue(bytes < 8192, bytes + " bytes allocated by 254 futex-handle calls: " + out);
    }

    private static final long LONG_SLEEP_NS = TimeUnit.SECONDS.toNanos(20);

    @Test
    void shouldWakeASleeperFromAnotherMappingOfTheContextFile() throws Exception {
        assertTrue(Doorbell.isFutexAvailable(), "futex downcall available on this platform");
        try (ShmTestSupport.Side side = new ShmTestSupport.Side(); Arena arena = Arena.ofShared()) {
            ShmContext context = (ShmContext) side.context;
            MemorySegment otherMapping = ShmFiles.mapExisting(context.path(), ShmKeyTable.FILE_SIZE, arena);
            Doorbell sleeperSide = context.doorbell();
            Doorbell ringerSide = new Doorbell(otherMapping);
            CompletableFuture<Long> sleeper = CompletableFuture.supplyAsync(() -> {
                long start = System.nanoTime();
                int sequence = sleeperSide.enter();
                try {
                    sleeperSide.await(sequence, LONG_SLEEP_NS, Arena.ofAuto().allocate(16, 8));
                } finally {
                    sleeperSide.leave();
                }
                return System.nanoTime() - start;
            });
            while (otherMapping.get(ValueLayout.JAVA_INT, Doorbell.SLEEPERS) == 0) {
                Thread.onSpinWait();
            }
            Thread.sleep(50);
            ringerSide.ring();
            long sleptNs = sleeper.get(15, TimeUnit.SECONDS);
            assertTrue(sleptNs < LONG_SLEEP_NS / 2, "woken by the ring, not by the timeout: " + sleptNs + " ns");
            assertEquals(0, otherMapping.get(ValueLayout.JAVA_INT, Doorbell.SLEEPERS));
        }
    }

    @Test
    void shouldNotLoseARingBetweenAnnouncingAndSleeping() {
        try (ShmTestSupport.Side side = new ShmTestSupport.Side()) {
            Doorbell doorbell = ((ShmContext) side.context).doorbell();
            long start = System.nanoTime();
            int sequence = doorbell.enter();
            doorbell.ring(); // lands after enter() and before await(): await must return at once
            doorbell.await(sequence, LONG_SLEEP_NS, Arena.ofAuto().allocate(16, 8));
            doorbell.leave();
            assertTrue(System.nanoTime() - start < LONG_SLEEP_NS / 2);
        }
    }

    @Test
    void shouldDeliverToAPollerSleepingOnTheDoorbell() throws Exception {
        try (ShmTestSupport.Side a = new ShmTestSupport.Side(); ShmTestSupport.Side b = new ShmTestSupport.Side()) {
            ShmTestSupport.connect(a, b);
            MemoryRegion source = a.pd.allocateMemory(4096, AccessFlag.LOCAL_WRITE);
            MemoryRegion sink = b.pd.allocateMemory(4096, AccessFlag.LOCAL_WRITE);
            for (int round = 0; round < 5; round++) {
                b.qp.postReceive(new ReceiveWorkRequest().wrId(round).local(sink, 0, 64));
                CompletableFuture<Integer> poller = CompletableFuture.supplyAsync(
                    () -> b.cq.poll(WorkCompletion.array(1), 1, LONG_SLEEP_NS));
                Thread.sleep(5L * round); // land in the spin, yield and sleep phases
                a.qp.postSend(new SendWorkRequest().opcode(SendOpcode.SEND).local(source, 0, 8));
                assertEquals(1, poller.get(15, TimeUnit.SECONDS));
            }
        }
    }
}
