package io.jccl.collectives;

import io.jccl.collectives.store.InMemoryStore;

/** Child JVM of {@link NativeAccessDeniedTest}: creates a communicator and prints how it failed. */
public final class NativeAccessDeniedMain {
    private NativeAccessDeniedMain() {
    }

    /** Creates a one-rank communicator; prints "FAILED " and the exception, or "CREATED". */
    public static void main(String[] args) {
        try (InMemoryStore store = new InMemoryStore();
             Communicator c = Communicator.create(store, 0, 1, CommunicatorOptions.defaults())) {
            System.out.println("CREATED " + c.size());
        } catch (RuntimeException e) {
            System.out.println("FAILED " + e.getClass().getName() + ": " + e.getMessage());
        }
    }
}
