package io.jccl.transport.roce;

import java.nio.ByteBuffer;

/**
 * A test's answer for the IP TOS byte (DSCP and ECN) of the datagram a context has just received, in place of the
 * socket's.
 *
 * <p>The FFM socket reports each packet's TOS byte itself ({@code recvmmsg} with {@code IP_RECVTOS}) and the
 * notification point ({@link NotificationPoint}) reads it directly; the NIO fallback cannot ({@code DatagramChannel}
 * does not show it) and reports {@link #UNKNOWN}, so there only a BTH FECN mark gets a CNP. Tests install a source
 * ({@link RoceContext#ecnSource}) that marks chosen datagrams Congestion Experienced, to drive the notification
 * point without a network that marks, on either socket.
 */
@FunctionalInterface
interface EcnSource {
    /** What {@link #tos} answers when the socket did not say. */
    int UNKNOWN = -1;
    /** ECN field value Congestion Experienced (RFC 3168): both low bits of the TOS byte set. */
    int CE = 0x03;
    /** ECN field value ECN-Capable Transport 0, which roce0 sends. */
    int ECT_0 = 0x02;
    /** A source that reports no TOS byte (the NIO fallback's answer). */
    EcnSource NONE = (datagram, length) -> UNKNOWN;

    /**
     * The TOS byte of the datagram in {@code datagram} (bytes 0..length, the BTH at 0), or {@link #UNKNOWN}.
     * Called by whoever holds the receive lock, once per datagram that reached a queue pair; must not allocate.
     */
    int tos(ByteBuffer datagram, int length);

    /** Whether {@code tos} (a TOS byte, or {@link #UNKNOWN}) carries the Congestion Experienced mark. */
    static boolean congestionExperienced(int tos) {
        return tos >= 0 && (tos & 0x03) == CE;
    }
}
