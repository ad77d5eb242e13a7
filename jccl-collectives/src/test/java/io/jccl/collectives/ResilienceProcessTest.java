package io.jccl.collectives;

import org.junit.jupiter.api.Test;

import java.util.Map;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Revoke and shrink with ranks as separate JVMs (MultiProcessTest's Job): a revocation, and a kill -9. */
class ResilienceProcessTest {
    @Test
    void everyProcessFailsWithTheRevocation() throws Exception {
        for (String transport : new String[] {"shm0", "tcp0"}) {
            try (MultiProcessTest.Job job = new MultiProcessTest.Job(4, "revoke", Map.of("JCCL_TRANSPORT", transport),
                true, "2")) {
                for (int r = 0; r < 4; r++) {
                    assertTrue(job.processes.get(r).waitFor(60, TimeUnit.SECONDS), transport + " rank " + r
                        + " hung:\n" + job.out(r));
                    assertEquals(0, job.processes.get(r).exitValue(), job.out(r));
                    assertTrue(job.out(r).contains("REVOKED rank " + r + " by 2"), transport + ":\n" + job.out(r));
                }
            }
        }
    }

    /** 4 ranks, rank 2 killed with kill -9 (rank 0 hosts the store), the 3 survivors shrink and all-reduce. */
    @Test
    void theSurvivorsOfAKillShrinkAndAllReduce() throws Exception {
        for (String transport : new String[] {"shm0", "tcp0"}) {
            int victim = 2;
            try (MultiProcessTest.Job job = new MultiProcessTest.Job(4, "shrink", Map.of("JCCL_TRANSPORT", transport),
                true)) {
                for (int r = 0; r < 4; r++) {
                    job.assertLine(r, "RUNNING", 60_000, transport);
                }
                long t0 = System.nanoTime();
                job.processes.get(victim).destroyForcibly(); // SIGKILL
                int sum = 1 + 2 + 4; // old ranks 0, 1, 3, plus one each
                for (int r = 0; r < 4; r++) {
                    if (r == victim) {
                        continue;
                    }
                    assertTrue(job.processes.get(r).waitFor(60, TimeUnit.SECONDS), transport + " rank " + r
                        + " hung:\n" + job.out(r));
                    assertEquals(0, job.processes.get(r).exitValue(), job.out(r));
                    int newRank = r < victim ? r : r - 1;
                    assertTrue(job.out(r).contains("SHRUNK rank " + r + " newRank " + newRank + " size 3 sum " + sum),
                        transport + ":\n" + job.out(r));
                }
                long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
                System.out.println("kill -9 of rank " + victim + " of 4 over " + transport + ": survivors shrank, "
                    + "all-reduced and exited " + ms + " ms after the kill; " + job.output.get(0).stream()
                    .filter(l -> l.startsWith("SHRUNK")).findFirst().orElse(""));
            }
        }
    }

    /**
     * Rank 0 hosts the job's store (fromEnvironment) and is killed with kill -9: the survivors fail over to rank 1's
     * standby store (StoreSuccession), agree (the same value and failed set on each), shrink there and all-reduce
     * the right sum, over shm0 and tcp0.
     */
    @Test
    void killingTheStoresHostRank0TheSurvivorsShrinkThroughAStandbyStore() throws Exception {
        for (String transport : new String[] {"shm0", "tcp0"}) {
            try (MultiProcessTest.Job job = new MultiProcessTest.Job(4, "shrink", Map.of("JCCL_TRANSPORT", transport,
                "JCCL_PEER_TIMEOUT", "5s"), true, "agree")) {
                for (int r = 0; r < 4; r++) {
                    job.assertLine(r, "RUNNING", 60_000, transport);
                }
                long t0 = System.nanoTime();
                job.processes.get(0).destroyForcibly(); // SIGKILL of the store's host
                for (int r = 1; r < 4; r++) {
                    assertTrue(job.processes.get(r).waitFor(60, TimeUnit.SECONDS), transport + " rank " + r
                        + " hung:\n" + job.out(r));
                    assertEquals(0, job.processes.get(r).exitValue(), job.out(r));
                    assertTrue(job.out(r).contains("AGREED rank " + r + " value 11110001 failed [0]"), transport + ":\n"
                        + job.out(r));
                    assertTrue(job.out(r).contains("SHRUNK rank " + r + " newRank " + (r - 1) + " size 3 sum 9"),
                        transport + ":\n" + job.out(r));
                }
                System.out.println("kill -9 of rank 0 (the store's host) of 4 over " + transport + ": survivors shrank "
                    + "through a standby store, all-reduced and exited " + TimeUnit.NANOSECONDS.toMillis(
                    System.nanoTime() - t0) + " ms after the kill; " + job.output.get(1).stream()
                    .filter(l -> l.startsWith("SHRUNK")).findFirst().orElse(""));
            }
        }
    }

    /**
     * A split communicator gets the parent's standby stores: world rank 0 (the store's host, the split one's last
     * rank) is killed and the split communicator's survivors agree and shrink through a standby store, with the
     * default settings. Without them its agreement had no store left.
     */
    @Test
    void aSplitCommunicatorSurvivesTheStoresHostThroughTheParentsStandbyStores() throws Exception {
        try (MultiProcessTest.Job job = new MultiProcessTest.Job(4, "shrink", Map.of("JCCL_TRANSPORT", "shm0"), true,
            "split-agree")) {
            for (int r = 0; r < 4; r++) {
                job.assertLine(r, "RUNNING", 60_000, "start-up");
            }
            job.processes.get(0).destroyForcibly();
            for (int r = 1; r < 4; r++) {
                int split = 3 - r;
                assertTrue(job.processes.get(r).waitFor(60, TimeUnit.SECONDS), "rank " + r + " hung:\n" + job.out(r));
                assertEquals(0, job.processes.get(r).exitValue(), job.out(r));
                assertTrue(job.out(r).contains("AGREED rank " + split + " value 11111000 failed [3]"), job.out(r));
                assertTrue(job.out(r).contains("SHRUNK rank " + split + " newRank " + split + " size 3 sum 6"),
                    job.out(r));
            }
        }
    }

    /**
     * A second failure right after recovery: rank 0 (the store's host) is killed, the survivors shrink; then old
     * rank 1, rank 0 of the shrunk communicator and the host of the store it decided through, is killed too: the
     * last two shrink again, through the next standby store.
     */
    @Test
    void aSecondFailureAfterTheShrinkIsSurvivedToo() throws Exception {
        try (MultiProcessTest.Job job = new MultiProcessTest.Job(4, "shrink", Map.of("JCCL_TRANSPORT", "shm0",
            "JCCL_PEER_TIMEOUT", "5s"), true, "twice")) {
            for (int r = 0; r < 4; r++) {
                job.assertLine(r, "RUNNING rank", 60_000, "start-up");
            }
            job.processes.get(0).destroyForcibly();
            for (int r = 1; r < 4; r++) {
                job.assertLine(r, "RUNNING2", 60_000, "start-up");
                assertTrue(job.out(r).contains("SHRUNK rank " + r + " newRank " + (r - 1) + " size 3 sum 9"),
                    job.out(r));
            }
            job.processes.get(1).destroyForcibly();
            for (int r = 2; r < 4; r++) {
                assertTrue(job.processes.get(r).waitFor(60, TimeUnit.SECONDS), "rank " + r + " hung:\n" + job.out(r));
                assertEquals(0, job.processes.get(r).exitValue(), job.out(r));
                assertTrue(job.out(r).contains("SHRUNK2 rank " + r + " newRank " + (r - 2) + " size 2 sum 7"),
                    job.out(r));
            }
        }
    }

    /**
     * A failure during the shrink itself: rank 0 (the store's host) is killed, and rank 1, the host of the first
     * standby store, halts at a random moment 0-300 ms into its shrink. Whatever the moment, ranks 2 and 3 end with
     * the same members (themselves) and the right sum: the agreement moves on to the next standby store, and a
     * decision that named rank 1 is followed by a failed join and a second attempt.
     */
    @Test
    void aRankThatDiesDuringTheShrinkLeavesTheOthersAgreeing() throws Exception {
        try (MultiProcessTest.Job job = new MultiProcessTest.Job(4, "shrink", Map.of("JCCL_TRANSPORT", "shm0",
            "JCCL_PEER_TIMEOUT", "3s"), true, "die-in-shrink")) {
            for (int r = 0; r < 4; r++) {
                job.assertLine(r, "RUNNING", 60_000, "start-up");
            }
            job.processes.get(0).destroyForcibly();
            assertTrue(job.processes.get(1).waitFor(60, TimeUnit.SECONDS), "rank 1 did not halt:\n" + job.out(1));
            for (int r = 2; r < 4; r++) {
                assertTrue(job.processes.get(r).waitFor(90, TimeUnit.SECONDS), "rank " + r + " hung:\n" + job.out(r));
                assertEquals(0, job.processes.get(r).exitValue(), job.out(r));
                assertTrue(job.out(r).contains("SHRUNK rank " + r + " newRank " + (r - 2) + " size 2 sum 7"),
                    job.out(r));
            }
        }
    }

    /**
     * Without standby stores (JCCL_STANDBY_STORES=0) rank 0 hosts the only store: when it is killed the survivors'
     * shrink says so within the peer timeout instead of waiting out JCCL_TIMEOUT (60 s here).
     */
    @Test
    void withoutStandbyStoresLosingTheStoresHostFailsTheShrinkWithAClearError() throws Exception {
        try (MultiProcessTest.Job job = new MultiProcessTest.Job(3, "shrink", Map.of("JCCL_TRANSPORT", "shm0",
            "JCCL_PEER_TIMEOUT", "3s", "JCCL_STANDBY_STORES", "0"), true)) {
            for (int r = 0; r < 3; r++) {
                job.assertLine(r, "RUNNING", 60_000, "start-up");
            }
            job.processes.get(0).destroyForcibly();
            for (int r = 1; r < 3; r++) {
                assertTrue(job.processes.get(r).waitFor(50, TimeUnit.SECONDS), "rank " + r + " hung:\n" + job.out(r));
                assertEquals(4, job.processes.get(r).exitValue(), job.out(r));
                assertTrue(job.out(r).contains("SHRINK FAILED rank " + r) && job.out(r).contains("did not answer within"
                    + " 3000 ms (JCCL_PEER_TIMEOUT)"), job.out(r));
            }
        }
    }

    /**
     * Rank 3 is stopped (SIGSTOP) until the survivors have failed it (JCCL_PEER_TIMEOUT=2s), shrunk and all-reduced;
     * when it wakes (SIGCONT) its old communicator fails and its shrink is refused: it was left out, and the new
     * communicator never sees it.
     */
    @Test
    void aStoppedRankThatWakesAfterTheShrinkFindsItselfLeftOut() throws Exception {
        try (MultiProcessTest.Job job = new MultiProcessTest.Job(4, "shrink", Map.of("JCCL_TRANSPORT", "shm0",
            "JCCL_PEER_TIMEOUT", "2s"), true, "linger")) {
            for (int r = 0; r < 4; r++) {
                job.assertLine(r, "RUNNING", 60_000, "start-up");
            }
            signal(job.processes.get(3), "STOP");
            try {
                for (int r = 0; r < 3; r++) {
                    assertTrue(job.waitForLine(r, "SHRUNK rank " + r + " newRank " + r + " size 3 sum 6", 60_000),
                        "rank " + r + ":\n" + job.out(r));
                }
            } finally {
                signal(job.processes.get(3), "CONT");
            }
            assertTrue(job.processes.get(3).waitFor(60, TimeUnit.SECONDS), "rank 3 hung:\n" + job.out(3));
            assertEquals(4, job.processes.get(3).exitValue(), job.out(3));
            assertTrue(job.out(3).contains("SHRINK FAILED rank 3") && job.out(3).contains("was left out of shrink 1"),
                job.out(3));
            for (int r = 0; r < 3; r++) {
                job.processes.get(r).getOutputStream().write('\n');
                job.processes.get(r).getOutputStream().close();
            }
            for (int r = 0; r < 3; r++) {
                assertTrue(job.processes.get(r).waitFor(60, TimeUnit.SECONDS), "rank " + r + " hung:\n" + job.out(r));
                assertEquals(0, job.processes.get(r).exitValue(), job.out(r));
            }
        }
    }

    /**
     * Rank 1, the host of the first standby store, is stopped (SIGSTOP) and rank 0, the job store's host, killed:
     * ranks 2 and 3 give up on rank 1's silent store after the peer timeout, shrink through rank 2's and all-reduce.
     * When rank 1 wakes, its own standby store answers it, but before proposing there it finds the others gathered on
     * a later store and their decision: it is refused and never acts as a member.
     */
    @Test
    void aStoppedStandbyHostThatWakesFindsTheDecisionOnALaterStore() throws Exception {
        try (MultiProcessTest.Job job = new MultiProcessTest.Job(4, "shrink", Map.of("JCCL_TRANSPORT", "shm0",
            "JCCL_PEER_TIMEOUT", "2s"), true, "linger")) {
            for (int r = 0; r < 4; r++) {
                job.assertLine(r, "RUNNING", 60_000, "start-up");
            }
            signal(job.processes.get(1), "STOP");
            try {
                job.processes.get(0).destroyForcibly();
                for (int r = 2; r < 4; r++) {
                    assertTrue(job.waitForLine(r, "SHRUNK rank " + r + " newRank " + (r - 2) + " size 2 sum 7",
                        60_000), "rank " + r + ":\n" + job.out(r));
                }
            } finally {
                signal(job.processes.get(1), "CONT");
            }
            assertTrue(job.processes.get(1).waitFor(60, TimeUnit.SECONDS), "rank 1 hung:\n" + job.out(1));
            assertEquals(4, job.processes.get(1).exitValue(), job.out(1));
            assertTrue(job.out(1).contains("SHRINK FAILED rank 1") && job.out(1).contains("was left out of shrink 1"),
                job.out(1));
            for (int r = 2; r < 4; r++) {
                job.processes.get(r).getOutputStream().write('\n');
                job.processes.get(r).getOutputStream().close();
            }
            for (int r = 2; r < 4; r++) {
                assertTrue(job.processes.get(r).waitFor(60, TimeUnit.SECONDS), "rank " + r + " hung:\n" + job.out(r));
                assertEquals(0, job.processes.get(r).exitValue(), job.out(r));
            }
        }
    }

    private static void signal(Process p, String signal) throws Exception {
        Process kill = new ProcessBuilder("kill", "-" + signal, Long.toString(p.pid())).inheritIO().start();
        assertTrue(kill.waitFor(10, TimeUnit.SECONDS) && kill.exitValue() == 0, "kill -" + signal);
    }
}
