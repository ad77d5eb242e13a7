package io.jccl.transport.roce;

import java.nio.ByteBuffer;

/**
 * Where a context's receive thread learns the IP TOS byte (DSCP and ECN) of the datagram it has just received.
 *
 * <p>A {@code DatagramChannel} does not show it: the kernel hands it over only with {@code recvmsg} and the
 * {@code IP_RECVTOS} option, which the FFM receive path delivers. Until a socket path delivers it, a context uses
 * {@link #NONE} (no ECN seen, so no CNP is ever sent); tests install a source that marks chosen datagrams
 * Congestion Experienced to drive the notification point ({@link NotificationPoint}) without root or a network.
 */
@FunctionalInterface
interface EcnSource {
    /** What {@link #tos} answers when the socket did not say. */
    int UNKNOWN = -1;
    /** ECN field value Congestion Experienced (RFC 3168): both low bits of the TOS byte set. */
    int CE = 0x03;
    /** ECN field value ECN-Capable Transport 0, which roce0 sends. */
    int ECT_0 = 0x02;
    /** The source of a socket that does not report TOS. */
    EcnSource NONE = (datagram, length) -> UNKNOWN;

    /**
     * The TOS byte of the datagram in {@code datagram} (bytes 0..length, the BTH at 0), or {@link #UNKNOWN}.
     * Called on the receive thread once per datagram that reached a queue pair; must not allocate.
     */
    int tos(ByteBuffer datagram, int length);

    /** Whether {@code tos} (a TOS byte, or {@link #UNKNOWN}) carries the Congestion Experienced mark. */
    static boolean congestionExperienced(int tos) {
        return tos >= 0 && (tos & 0x03) == CE;
    }
}
