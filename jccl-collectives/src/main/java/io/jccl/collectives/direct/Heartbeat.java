package io.jccl.collectives.direct;

import java.util.Arrays;
import java.util.concurrent.locks.LockSupport;

/**
 * One daemon thread per process that advances the heartbeat word of every live direct path's control block, so a
 * same-host peer can tell a rank whose process has stopped running (SIGSTOP, a pause longer than the peer timeout,
 * starved of CPU) from one that is merely busy elsewhere: over tcp a frozen peer stops answering its transport's
 * probes; over shared memory nothing else would notice, and the two transports must fail a frozen peer alike
 * (JCCL_PEER_TIMEOUT). It beats every {@code peer timeout / 8} of the shortest registered timeout (between 5 ms and
 * 1 s: one wake-up a second by default) and parks when nothing is registered.
 */
final class Heartbeat {
    static final long MIN_INTERVAL_NS = 5_000_000L;
    static final long MAX_INTERVAL_NS = 1_000_000_000L;

    private static final Object LOCK = new Object();
    /** Guarded by LOCK; replaced, never changed in place. */
    private static ControlBlockFlyweight[] blocks = new ControlBlockFlyweight[0];
    private static long[] timeouts = new long[0];
    private static volatile long intervalNs = MAX_INTERVAL_NS;
    private static Thread thread;

    private Heartbeat() {
    }

    /** Beats {@code block} from now on; its peers fail it after {@code peerTimeoutNs} without a beat. */
    static void register(ControlBlockFlyweight block, long peerTimeoutNs) {
        synchronized (LOCK) {
            int n = blocks.length;
            blocks = Arrays.copyOf(blocks, n + 1);
            timeouts = Arrays.copyOf(timeouts, n + 1);
            blocks[n] = block;
            timeouts[n] = peerTimeoutNs;
            block.beat();
            intervalNs = interval();
            if (thread == null) {
                thread = new Thread(null, new Beater(), "jccl-heartbeat", 64 * 1024, false);
                thread.setDaemon(true);
                thread.start();
            } else {
                LockSupport.unpark(thread);
            }
        }
    }

    /** Stops beating {@code block}; returns once no beat can touch it (its memory may then be released). */
    static void unregister(ControlBlockFlyweight block) {
        synchronized (LOCK) {
            for (int i = 0; i < blocks.length; i++) {
                if (blocks[i] == block) {
                    ControlBlockFlyweight[] b = new ControlBlockFlyweight[blocks.length - 1];
                    long[] t = new long[b.length];
                    System.arraycopy(blocks, 0, b, 0, i);
                    System.arraycopy(blocks, i + 1, b, i, b.length - i);
                    System.arraycopy(timeouts, 0, t, 0, i);
                    System.arraycopy(timeouts, i + 1, t, i, t.length - i);
                    blocks = b;
                    timeouts = t;
                    intervalNs = interval();
                    return;
                }
            }
        }
    }

    /** The beat interval for the registered timeouts (under LOCK). */
    private static long interval() {
        long shortest = Long.MAX_VALUE;
        for (long t : timeouts) {
            shortest = Math.min(shortest, t);
        }
        return Math.clamp(shortest / 8, MIN_INTERVAL_NS, MAX_INTERVAL_NS);
    }

    /** The thread's loop (a named class: a lambda would be spun at start-up, see ARCHITECTURE.md). */
    private static final class Beater implements Runnable {
        @Override
        public void run() {
            while (true) {
                boolean any;
                synchronized (LOCK) {
                    // under the lock: unregister (before the block's memory is released) waits for this beat
                    for (ControlBlockFlyweight b : blocks) {
                        try {
                            b.beat();
                        } catch (RuntimeException ignored) {
                            // released without unregistering (a failed setup): nothing to beat
                        }
                    }
                    any = blocks.length > 0;
                }
                if (any) {
                    LockSupport.parkNanos(intervalNs);
                } else {
                    LockSupport.park();
                }
            }
        }
    }
}
