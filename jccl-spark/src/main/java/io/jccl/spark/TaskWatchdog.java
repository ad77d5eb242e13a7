package io.jccl.spark;

import org.apache.spark.TaskContext;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

/**
 * Closes a task's communicator and store once Spark marks the task killed. Spark kills the other tasks of a barrier
 * stage when one fails, but it need not interrupt their threads, and a thread blocked in a collective or in the
 * bootstrap would otherwise wait for JCCL's failure detection or timeout; closing makes it fail at once
 * ({@code Aborted}). One daemon thread per JVM polls the watched tasks every {@value #POLL_MS} ms: a read of a
 * volatile field per task, nothing while no task is watched.
 */
final class TaskWatchdog {
    static final long POLL_MS = 100;
    private static final Map<Registration, Boolean> WATCHED = new ConcurrentHashMap<>();
    private static final ScheduledExecutorService POLLER = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread t = new Thread(r, "jccl-spark-task-watchdog");
        t.setDaemon(true);
        return t;
    });

    static {
        POLLER.scheduleWithFixedDelay(TaskWatchdog::poll, POLL_MS, POLL_MS, TimeUnit.MILLISECONDS);
    }

    private TaskWatchdog() {
    }

    static Registration watch(TaskContext context) {
        Registration r = new Registration(context);
        WATCHED.put(r, Boolean.TRUE);
        return r;
    }

    private static void poll() {
        for (Registration r : WATCHED.keySet()) {
            if (r.context.isInterrupted() || r.context.isFailed()) {
                r.kill();
            }
        }
    }

    /** What to close when one task is killed. */
    static final class Registration {
        private final TaskContext context;
        private final CopyOnWriteArrayList<AutoCloseable> resources = new CopyOnWriteArrayList<>();
        private volatile boolean killed;

        Registration(TaskContext context) {
            this.context = context;
        }

        void closeOnKill(AutoCloseable resource) {
            resources.add(resource);
            if (killed) {
                kill();
            }
        }

        boolean killed() {
            return killed;
        }

        void cancel() {
            WATCHED.remove(this);
        }

        private void kill() {
            killed = true;
            WATCHED.remove(this);
            // Newest first: the communicator before the store it uses.
            for (int i = resources.size() - 1; i >= 0; i--) {
                AutoCloseable c = resources.remove(i);
                try {
                    c.close();
                } catch (Exception ignored) {
                    // closing is best effort: the point is to wake the task's thread
                }
            }
        }
    }
}
