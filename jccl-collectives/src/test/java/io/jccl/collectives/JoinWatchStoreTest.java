package io.jccl.collectives;

import io.jccl.collectives.store.InMemoryStore;
import io.jccl.collectives.store.StoreTimeoutException;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

/**
 * A shrink's new join fails as soon as a member's process is gone (killed after the agreement), instead of waiting
 * for its records until the join's bound (60 s with the default settings). The waits below are an hour: without
 * the watch the test would time out, not pass.
 */
class JoinWatchStoreTest {
    private static final long HOUR_NS = TimeUnit.HOURS.toNanos(1);

    @Test
    void aWaitForAMemberThatIsGoneFailsNamingIt() {
        try (InMemoryStore base = new InMemoryStore()) {
            JoinWatchStore s = new JoinWatchStore(base, 3, 0, j -> j == 2);
            CollectiveException.PeerFailure e = assertThrows(CollectiveException.PeerFailure.class,
                () -> s.get("hello/2", HOUR_NS));
            assertEquals(2, e.rank());
            assertThrows(CollectiveException.PeerFailure.class, () -> s.waitFor(List.of("connected/2"), HOUR_NS));
        }
    }

    @Test
    void whileEveryMemberLivesItWaitsAsTheStoreDoesAndDisarmedItPassesThrough() {
        try (InMemoryStore base = new InMemoryStore()) {
            JoinWatchStore s = new JoinWatchStore(base, 3, 0, j -> false);
            assertThrows(StoreTimeoutException.class, () -> s.get("never", TimeUnit.MILLISECONDS.toNanos(50)));
            base.setString("k", "v", HOUR_NS);
            assertArrayEquals("v".getBytes(), s.get("k", HOUR_NS));
            JoinWatchStore dead = new JoinWatchStore(s, 3, 0, j -> true);
            dead.disarm();
            assertArrayEquals("v".getBytes(), dead.get("k", HOUR_NS));
            assertEquals(base, dead.inner(), "one level of watching, however many shrinks");
        }
    }
}
