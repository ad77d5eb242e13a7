package io.jccl.collectives.store;

import io.jccl.collectives.CollectiveException;
import org.junit.jupiter.api.Test;

import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Bug #5 of issue 16: the usual start-up failure, a store timeout, is caught with the other collective failures. */
class StoreExceptionHierarchyTest {
    @Test
    void shouldCatchAStoreTimeoutAsACollectiveException() {
        try (InMemoryStore store = new InMemoryStore()) {
            CollectiveException e = assertThrows(CollectiveException.class,
                () -> store.get("nobody-sets-this", TimeUnit.MILLISECONDS.toNanos(1)));
            assertInstanceOf(StoreTimeoutException.class, e);
            assertTrue(e.getMessage().contains("nobody-sets-this"), e.getMessage());
        }
        // Code written against the old hierarchy still compiles and catches the same exceptions.
        RuntimeException old = new StoreException("x");
        assertInstanceOf(CollectiveException.class, old);
    }
}
