package io.jccl.transport.roce;

import java.lang.management.ManagementFactory;
import java.net.InetAddress;

/**
 * A fresh JVM for {@link RoceAllocationTest#shouldNotCustomizeAMethodHandleOnTheThreadOfARarePath}: opens an FFM
 * socket, then waits in {@code ppoll} (zero timeout) twice as often as the JDK's customization threshold, as a
 * polling thread's occasional waits do, and prints "allocated N" for the bytes this thread allocated meanwhile.
 */
public final class RareDowncallMain {
    private RareDowncallMain() {
    }

    /** Runs the measurement; exit status 2 where FFM sockets are unavailable. */
    public static void main(String[] args) throws Exception {
        if (!FfmUdpSocket.available()) {
            System.out.println("unavailable " + FfmUdpSocket.unavailableReason());
            System.exit(2);
        }
        com.sun.management.ThreadMXBean threads = (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
        long self = Thread.currentThread().threadId();
        try (FfmUdpSocket socket = new FfmUdpSocket(InetAddress.getLoopbackAddress(), 0)) {
            long before = threads.getThreadAllocatedBytes(self);
            for (int wait = 0; wait < 2 * io.jccl.common.NativeAccess.CUSTOMIZE_AFTER_CALLS; wait++) {
                socket.awaitFromPoller(0);
            }
            System.out.println("allocated " + (threads.getThreadAllocatedBytes(self) - before));
        }
    }
}
