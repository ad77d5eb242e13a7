package io.jccl.collectives.core;

import io.jccl.collectives.CollectiveException;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * A peer's exit brings a wait's health check forward (issue 17: a kill -9 on this host detected in milliseconds,
 * not at the next 100 ms check). Counts checks; reads no clock.
 */
class WaitPolicyHealthTest {
    private static final class Owner implements WaitPolicy.Owner {
        @Override
        public void checkNotAborted() {
        }

        @Override
        public void deadlineStarted(long nowNs) {
        }

        @Override
        public CollectiveException.Timeout timeout(String what) {
            return new CollectiveException.Timeout(what);
        }
    }

    private static final class Subject implements WaitPolicy.Subject {
        int checks;

        @Override
        public String describeWait() {
            return "a peer";
        }

        @Override
        public void checkHealth() {
            checks++;
        }
    }

    @Test
    void aPeerExitMakesTheNextIdleRoundCheckHealth() {
        WaitPolicy w = new WaitPolicy(new Owner());
        w.opBegan(System.nanoTime(), 60_000_000_000L);
        Subject s = new Subject();
        w.beginWait();
        w.check(s);
        assertEquals(0, s.checks, "the first health check is one interval away");
        w.peerExited();
        w.check(s);
        assertEquals(1, s.checks, "a peer's exit makes the next idle round check the peers");
        assertEquals(1, w.healthChecks);
    }
}
