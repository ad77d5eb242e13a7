package io.jccl.transport.shm;

import io.jccl.common.BackgroundLinking;
import io.jccl.common.Config;

/**
 * Links the device's FFM downcalls ({@code syscall} for the futex doorbell, the lock probe's {@code open},
 * {@code fcntl} and {@code close}, the cross-memory-attach pair) on a background daemon thread when the first context
 * opens, instead of in the constructors on the caller's thread. The first downcall a JVM links costs tens of
 * milliseconds (linker start-up, a generated stub class per call shape); done here, after
 * {@link BackgroundLinking#DELAY_MS} (so that it does not compete with the rank's start-up for the CPU), a thread
 * that needs a handle earlier simply links it itself (or waits for the class initialisation in progress).
 * {@code JCCL_SHM_PRELINK=0} turns the thread off (handles are then linked on first use).
 */
final class NativeWarmup {
    private static boolean started;

    private NativeWarmup() {
    }

    /** Starts the warm-up thread once per JVM (no-op afterwards or when disabled). */
    static synchronized void start() {
        if (started) {
            return;
        }
        started = true;
        if (Config.value("JCCL_SHM_PRELINK", "1").equals("0")) {
            return;
        }
        BackgroundLinking.start("jccl-shm-prelink", new LinkAll());
    }

    /** {@link #linkAll} as a task. */
    private static final class LinkAll implements Runnable {
        @Override
        public void run() {
            linkAll();
        }
    }

    /** Links every handle (each holder class initialises once; failures leave the fallbacks in place). */
    static void linkAll() {
        Doorbell.isFutexAvailable();
        LockProbe.isLinked();
        CrossMemoryAttach.unavailable();
    }
}
