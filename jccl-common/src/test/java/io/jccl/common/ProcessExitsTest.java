package io.jccl.common;

import org.junit.jupiter.api.Test;

import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A watched process's exit is reported by the kernel (a pidfd), not found by polling: a {@code kill -9}'d peer on
 * this host is detected at once (issue 17). The waits below only bound a hang; nothing is timed.
 */
class ProcessExitsTest {
    @Test
    void aKilledProcessIsReportedAndALiveOneIsNot() throws Exception {
        Process victim = new ProcessBuilder("sleep", "60").start();
        Process bystander = new ProcessBuilder("sleep", "60").start();
        try {
            CountDownLatch exited = new CountDownLatch(1);
            CountDownLatch wrong = new CountDownLatch(1);
            try (ProcessExits.Watch w = ProcessExits.watch(victim.pid(), exited::countDown);
                 ProcessExits.Watch b = ProcessExits.watch(bystander.pid(), wrong::countDown)) {
                victim.destroyForcibly();
                assertTrue(exited.await(30, TimeUnit.SECONDS), "the kill of pid " + victim.pid() + " was not reported");
                assertEquals(1, wrong.getCount(), "a live process was reported as exited");
            }
        } finally {
            victim.destroyForcibly();
            bystander.destroyForcibly();
        }
    }

    @Test
    void aProcessGoneBeforeTheWatchIsReportedAtOnce() throws Exception {
        Process gone = new ProcessBuilder("true").start();
        gone.waitFor(); // reaped: its pid names no process now
        CountDownLatch exited = new CountDownLatch(1);
        try (ProcessExits.Watch w = ProcessExits.watch(gone.pid(), exited::countDown)) {
            assertTrue(exited.await(30, TimeUnit.SECONDS));
        }
    }

    @Test
    void aCancelledWatchIsNotReported() throws Exception {
        Process victim = new ProcessBuilder("sleep", "60").start();
        CountDownLatch exited = new CountDownLatch(1);
        CountDownLatch other = new CountDownLatch(1);
        Process marker = new ProcessBuilder("sleep", "60").start();
        try {
            ProcessExits.Watch w = ProcessExits.watch(victim.pid(), exited::countDown);
            w.close();
            victim.destroyForcibly();
            victim.waitFor();
            // a later watch's report says the thread has looked at the exit since
            try (ProcessExits.Watch m = ProcessExits.watch(marker.pid(), other::countDown)) {
                marker.destroyForcibly();
                assertTrue(other.await(30, TimeUnit.SECONDS));
            }
            assertEquals(1, exited.getCount(), "a cancelled watch was reported");
        } finally {
            victim.destroyForcibly();
            marker.destroyForcibly();
        }
    }
}
