package io.jccl.common;

/**
 * Runs work that only prepares for later (linking FFM downcalls ahead of their first use) on a daemon thread after
 * a delay. Started right away, such a thread competes with the process's own start-up for the CPU: with two ranks
 * on two cores, the shm and CPU-affinity prelinking cost the first barrier about 20 ms (StartupProbe with and
 * without it). Delayed past the start-up burst it still links long before a typical first use (a thread that needs
 * a handle earlier links it itself, as it would without prelinking).
 */
public final class BackgroundLinking {
    /** How long the thread waits before it starts. */
    public static final long DELAY_MS = 200;

    private BackgroundLinking() {
    }

    /** Starts {@code work} on a daemon thread named {@code name} after {@link #DELAY_MS}. */
    public static void start(String name, Runnable work) {
        Thread t = new Thread(new Delayed(work), name);
        t.setDaemon(true);
        t.start();
    }

    /** The delayed task (a named class: a lambda would be spun into a class at start-up). */
    private record Delayed(Runnable work) implements Runnable {
        @Override
        public void run() {
            try {
                Thread.sleep(DELAY_MS);
            } catch (InterruptedException e) {
                return;
            }
            work.run();
        }
    }
}
