package io.jccl.common.testing;

import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.stream.Stream;

/**
 * What a fuzz or flood test measures of this JVM to show that hostile input left nothing behind: live threads,
 * open file descriptors and heap in use after collections. Shared by every listener's fuzz test.
 */
public final class Footprint {
    private Footprint() {
    }

    /** Live threads of this JVM. */
    public static int threads() {
        return ManagementFactory.getThreadMXBean().getThreadCount();
    }

    /** Open file descriptors of this process (/proc/self/fd), or -1 where that cannot be read. */
    public static long openDescriptors() {
        try (Stream<Path> fds = Files.list(Path.of("/proc/self/fd"))) {
            return fds.count();
        } catch (IOException e) {
            return -1;
        }
    }

    /** Heap in use after full collections: the least of three readings (a reading can catch a transient buffer). */
    public static long heapUsedAfterGc() {
        long least = Long.MAX_VALUE;
        for (int i = 0; i < 3; i++) {
            System.gc();
            least = Math.min(least, ManagementFactory.getMemoryMXBean().getHeapMemoryUsage().getUsed());
        }
        return least;
    }

    /**
     * Waits up to {@code timeoutNs} for the open descriptors to drop to {@code limit} and stop changing (closed
     * sockets are released by the next select of whoever owned them); returns the last count.
     */
    public static long awaitDescriptors(long limit, long timeoutNs) throws InterruptedException {
        long deadline = System.nanoTime() + timeoutNs;
        long fds = openDescriptors();
        long previous = -1;
        while (System.nanoTime() - deadline < 0 && (fds > limit || fds != previous)) {
            Thread.sleep(50);
            previous = fds;
            fds = openDescriptors();
        }
        return fds;
    }
}
