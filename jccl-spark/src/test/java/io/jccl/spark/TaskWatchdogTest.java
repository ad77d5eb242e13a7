package io.jccl.spark;

import org.apache.spark.TaskContext$;
import org.apache.spark.TaskContextImpl;
import org.junit.jupiter.api.Test;

import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The watchdog closes what a task registered once Spark marks the task killed (without interrupting its thread),
 * newest first, and nothing after the task finished normally.
 */
class TaskWatchdogTest {
    @Test
    void shouldCloseTheCommunicatorThenTheStoreOfAKilledTask() throws Exception {
        TaskContextImpl task = TaskContext$.MODULE$.empty();
        TaskWatchdog.Registration registration = TaskWatchdog.watch(task);
        CountDownLatch closed = new CountDownLatch(2);
        StringBuffer order = new StringBuffer();
        registration.closeOnKill(() -> {
            order.append("store ");
            closed.countDown();
        });
        registration.closeOnKill(() -> {
            order.append("communicator ");
            closed.countDown();
        });
        assertFalse(closed.await(3 * TaskWatchdog.POLL_MS, TimeUnit.MILLISECONDS), "closed before any kill");
        task.markInterrupted("killed by the test (another barrier task failed)");
        assertTrue(closed.await(30, TimeUnit.SECONDS), "the watchdog never closed the killed task's resources");
        assertEquals("communicator store ", order.toString());
        assertTrue(registration.killed());
        // A resource registered after the kill is closed at once.
        AtomicInteger late = new AtomicInteger();
        registration.closeOnKill(late::incrementAndGet);
        assertEquals(1, late.get());
    }

    @Test
    void shouldLeaveAFinishedTaskAlone() throws Exception {
        TaskContextImpl task = TaskContext$.MODULE$.empty();
        TaskWatchdog.Registration registration = TaskWatchdog.watch(task);
        AtomicInteger closes = new AtomicInteger();
        registration.closeOnKill(closes::incrementAndGet);
        registration.cancel();
        task.markInterrupted("killed after it finished");
        Thread.sleep(5 * TaskWatchdog.POLL_MS);
        assertEquals(0, closes.get());
        assertFalse(registration.killed());
    }
}
