package io.jccl.verbs.spi;

/** Something a completion queue's poll drives forward (a queue pair's send or receive side). */
public interface Progressable {
    /**
     * Makes whatever progress is possible now without blocking.
     *
     * @return how much work was done (0 when there was nothing to do)
     */
    int progress();

    /**
     * The thread that drove this through a blocking poll found nothing for a while and is about to park: whatever
     * relied on that poller for progress (a provider's progress thread standing by) must take over now.
     */
    default void pollerParks() {
    }
}
