package io.jccl.transport.roce;

import io.jccl.common.Config;
import io.jccl.common.Log;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;

/**
 * A roce context's UDP socket: bound to one IPv4 address and port, non-blocking, Don't Fragment set (so that Linux
 * writes IPv4 identification 0, which the receiver assumes for the ICRC), 4 MiB buffers. Two implementations:
 * {@link FfmUdpSocket} (Linux x86-64 and aarch64, through {@code java.lang.foreign}: {@code sendmmsg} sends a
 * batch of packets with one system call, {@code recvmmsg} receives up to a ring's worth with one, and each packet's
 * TOS byte comes with it through {@code IP_RECVTOS}) and {@link NioUdpSocket} (a {@code DatagramChannel}: one
 * system call per packet, no TOS), the fallback where native access is not granted or the platform is another.
 * {@code JCCL_ROCE_IO} picks one ({@code auto}, the default: FFM where it works; {@code ffm}: FFM or an error;
 * {@code nio}).
 *
 * <p>Sending is thread-safe (the kernel serialises datagrams); receiving is for one thread at a time (the context's
 * receive lock), since the ring is shared.
 */
abstract class UdpIo implements AutoCloseable {
    /** Variable that turns UDP GSO on send and GRO on receive on (1, the default) or off (0); FFM sockets only. */
    static final String GSO_ENV = "JCCL_ROCE_GSO";
    /** Variable that picks the socket implementation: auto (default), ffm or nio. */
    static final String IO_ENV = "JCCL_ROCE_IO";
    /** Receive and send socket buffers: a 128-packet window of 4 KiB packets for many QPs. */
    static final int SOCKET_BUFFER_BYTES = 4 << 20;
    /**
     * Receive buffer asked with {@code SO_RCVBUFFORCE} (which needs CAP_NET_ADMIN and passes over
     * {@code net.core.rmem_max}): room for a window of megabytes ({@code JCCL_ROCE_WINDOW_PSNS}), as TCP's autotuned
     * receive buffer has. Unprivileged, {@code SO_RCVBUF} gets {@link #SOCKET_BUFFER_BYTES} capped by rmem_max.
     */
    static final int FORCED_RECEIVE_BUFFER_BYTES = 16 << 20;

    /** Opens the socket {@code JCCL_ROCE_IO} names, bound to {@code address:port}. */
    static UdpIo open(InetAddress address, int port) throws IOException {
        String which = Config.value(IO_ENV, "auto").trim().toLowerCase(java.util.Locale.ROOT);
        String gsoValue = Config.value(GSO_ENV, "1").trim();
        if (!gsoValue.equals("0") && !gsoValue.equals("1")) {
            throw new IllegalArgumentException(GSO_ENV + "=" + gsoValue + ": use 1 (UDP GSO and GRO where the "
                + "kernel has them) or 0 (one datagram per packet)");
        }
        boolean segmentation = gsoValue.equals("1");
        switch (which) {
            case "nio":
                return new NioUdpSocket(address, port);
            case "ffm":
                if (!FfmUdpSocket.available()) {
                    throw new IOException(IO_ENV + "=ffm but FFM sockets are not available here ("
                        + FfmUdpSocket.unavailableReason() + ")");
                }
                return new FfmUdpSocket(address, port, segmentation, false);
            case "auto":
                if (FfmUdpSocket.available()) {
                    return new FfmUdpSocket(address, port, segmentation, false);
                }
                Log.get().info(-1, Log.Subsys.NET, () -> "roce0: FFM sockets unavailable ("
                    + FfmUdpSocket.unavailableReason() + "); one system call per packet through a DatagramChannel");
                return new NioUdpSocket(address, port);
            default:
                throw new IllegalArgumentException(IO_ENV + "=" + which + ": use auto, ffm or nio");
        }
    }

    /**
     * Opens a send-only socket of the same kind as {@code like}, bound to {@code address:port} with SO_REUSEPORT
     * (contexts of this host that pick the same flow-label port share it; a socket of another program without the
     * option still refuses it): a queue pair's packets leave from it so that their UDP source port is the one
     * RoCEv2 derives from the flow label. No IP_RECVTOS and the smallest receive buffer: nothing is read from it.
     *
     * @throws IOException when the port cannot be bound (taken) or the socket not opened
     */
    static UdpIo openSendOnly(UdpIo like, InetAddress address, int port) throws IOException {
        // GSO where the context's socket has it (JCCL_ROCE_GSO, the kernel, not refused since): probed again here
        return like instanceof FfmUdpSocket ? new FfmUdpSocket(address, port, like.gso(), true)
            : new NioUdpSocket(address, port, true);
    }

    /** "ffm" or "nio" (devinfo, tests, benchmarks). */
    abstract String kind();

    /** The bound port. */
    abstract int localPort();

    /** The receive socket buffer the kernel granted (capped by net.core.rmem_max). */
    abstract int receiveBufferBytes();

    /**
     * Sends the batch's packets 0..count to {@code to} (FFM: {@code sendmmsg}, as few calls as the kernel takes;
     * NIO: one {@code send} each). A full send buffer makes it retry: a packet waits for room, never is lost here.
     *
     * @return the system calls it made (counted by the context)
     * @throws IOException when the socket fails
     */
    abstract int send(TxBatch batch, InetSocketAddress to, int toIpv4, int toPort) throws IOException;

    /** Sends one datagram, bytes 0..length of {@code packet} (a raw send: tests, never the QPs' path). */
    abstract void sendOne(ByteBuffer packet, int length, InetSocketAddress to) throws IOException;

    /**
     * Receives what is waiting, up to the ring's capacity, without blocking; fills the ring's lengths, sources and
     * TOS bytes (-1 where the implementation cannot tell).
     *
     * @return the datagrams received, 0 when none was waiting
     * @throws IOException when the socket fails or was closed
     */
    final int receive(RxRing ring) throws IOException {
        return receive(ring, ring.capacity);
    }

    /**
     * As {@link #receive(RxRing)}, at most {@code max} datagrams (1..capacity): {@code recvmmsg} tries the next slot
     * after each datagram, a second try that finds the socket empty when one small datagram was all there was.
     */
    abstract int receive(RxRing ring, int max) throws IOException;

    /** Waits until a datagram is waiting or {@code timeoutMs} passed (the receive thread's park). */
    abstract void await(int timeoutMs) throws IOException;

    /**
     * Whether an application poller may wait on this socket with {@link #awaitFromPoller} beside the receive thread
     * (FFM: a second pollfd; the NIO fallback's selector serves one thread at a time, so its pollers never wait).
     */
    boolean pollerCanAwait() {
        return false;
    }

    /**
     * Waits until a datagram is waiting or {@code timeoutNs} passed: an application poller that found the socket
     * empty many times in a row gives its core away (one such poller at a time; the context makes sure).
     */
    void awaitFromPoller(long timeoutNs) throws IOException {
        throw new UnsupportedOperationException("awaitFromPoller");
    }

    /** Sets the TOS byte (DSCP and ECN bits) of the packets this socket sends ({@code IP_TOS}). */
    abstract void trafficClass(int tos) throws IOException;

    /**
     * Whether queued packets may form UDP GSO messages ({@link TxBatch#commit}): FFM sockets where the kernel takes
     * {@code UDP_SEGMENT} and {@code JCCL_ROCE_GSO} is not 0; false for good after the kernel refused a GSO send.
     */
    boolean gso() {
        return false;
    }

    /**
     * Whether a received datagram may hold several packets of one GSO send ({@code UDP_GRO}): then {@link RxRing}
     * slots hold 64 KiB and {@link RxRing#segmentSize} tells where each packet starts.
     */
    boolean gro() {
        return false;
    }

    /** Whether {@link #receive} reports each packet's TOS byte. */
    abstract boolean reportsTos();

    /** Closes the socket (the context has stopped every receiver first). */
    @Override
    public abstract void close();
}
