package io.jccl.transport.roce;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.StandardProtocolFamily;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.channels.DatagramChannel;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;

/**
 * The fallback socket: a non-blocking {@link DatagramChannel} with {@code IP_DONTFRAGMENT}, one system call per
 * packet each way, no TOS on receive (reported as -1), a {@link Selector} to wait. Used where FFM sockets are not
 * available ({@link FfmUdpSocket#available()}) or {@code JCCL_ROCE_IO=nio}.
 */
final class NioUdpSocket extends UdpIo {
    private final DatagramChannel channel;
    private final Selector selector;
    private final int localPort;
    private final int receiveBufferBytes;
    private InetSocketAddress lastSender;
    private int lastSenderIpv4;

    NioUdpSocket(InetAddress address, int port) throws IOException {
        this(address, port, false);
    }

    /** As above; {@code sendOnly}: SO_REUSEPORT and the smallest receive buffer ({@link #openSendOnly}). */
    NioUdpSocket(InetAddress address, int port, boolean sendOnly) throws IOException {
        channel = DatagramChannel.open(StandardProtocolFamily.INET);
        try {
            channel.setOption(jdk.net.ExtendedSocketOptions.IP_DONTFRAGMENT, true);
            if (sendOnly) {
                channel.setOption(StandardSocketOptions.SO_REUSEPORT, true);
            }
            channel.setOption(StandardSocketOptions.SO_RCVBUF, sendOnly ? 1 : SOCKET_BUFFER_BYTES);
            channel.setOption(StandardSocketOptions.SO_SNDBUF, SOCKET_BUFFER_BYTES);
            channel.bind(new InetSocketAddress(address, port));
            // non-blocking: the receive thread polls, then parks in the selector (never sleeps inside receive)
            channel.configureBlocking(false);
            selector = Selector.open();
            channel.register(selector, SelectionKey.OP_READ);
            localPort = ((InetSocketAddress) channel.getLocalAddress()).getPort();
            receiveBufferBytes = channel.getOption(StandardSocketOptions.SO_RCVBUF); // what the kernel granted
        } catch (IOException | RuntimeException e) {
            channel.close();
            throw e;
        }
    }

    @Override
    String kind() {
        return "nio";
    }

    @Override
    int localPort() {
        return localPort;
    }

    @Override
    int receiveBufferBytes() {
        return receiveBufferBytes;
    }

    @Override
    int send(TxBatch batch, InetSocketAddress to, int toIpv4, int toPort) throws IOException {
        batch.ungroup(0); // never grouped here (gso() is false); a datagram per packet, identification 0
        for (int i = 0; i < batch.count(); i++) {
            try {
                sendOne(batch.buffer(i), batch.length(i), to);
            } catch (java.net.SocketException e) {
                if (!refusedByTheHost(e)) {
                    throw e;
                }
                // as on the FFM path: a netfilter rule dropped it in OUTPUT, a lost packet that go-back-N resends
                batch.refused++;
            }
        }
        return batch.count();
    }

    /**
     * Whether a send failed with EPERM, which Linux answers when a netfilter rule drops the datagram on the way out.
     * The JDK reports it as a plain {@link java.net.SocketException} with the C library's text for the errno (its
     * subclasses name other errors: unreachable, refused, bind).
     */
    static boolean refusedByTheHost(java.net.SocketException e) {
        return e.getClass() == java.net.SocketException.class && e.getMessage() != null
            && e.getMessage().contains("Operation not permitted");
    }

    @Override
    void sendOne(ByteBuffer packet, int length, InetSocketAddress to) throws IOException {
        packet.limit(length).position(0);
        try {
            // non-blocking: 0 when the send buffer is full; the datagram waits for room rather than being lost
            for (int tries = 0; channel.send(packet, to) == 0; tries++) {
                if (tries < 64) {
                    Thread.onSpinWait();
                } else {
                    Thread.yield();
                }
            }
        } finally {
            packet.clear(); // flyweights use absolute indexes, which must stay below the limit
        }
    }

    @Override
    int receive(RxRing ring, int max) throws IOException { // one datagram per call, whatever max allows
        ByteBuffer slot = ring.buffer(0);
        slot.clear();
        InetSocketAddress from = (InetSocketAddress) channel.receive(slot);
        if (from == null) {
            return 0;
        }
        if (from != lastSender) { // the JDK reuses the sender object while the sender stays the same
            lastSender = from;
            lastSenderIpv4 = RoceContext.ipv4(from.getAddress());
        }
        ring.lengths[0] = slot.position();
        ring.truncated[0] = false; // a datagram longer than the slot arrives cut short; its ICRC fails
        ring.sourceIpv4s[0] = lastSenderIpv4;
        ring.sourcePorts[0] = from.getPort();
        ring.tosBytes[0] = -1;
        ring.segmentSizes[0] = 0;
        slot.clear();
        return 1;
    }

    @Override
    void await(int timeoutMs) throws IOException {
        // the key stays in the selected set (never cleared), so selecting allocates no set entry
        selector.select(timeoutMs);
    }

    @Override
    void trafficClass(int tos) throws IOException {
        channel.setOption(StandardSocketOptions.IP_TOS, tos);
    }

    @Override
    boolean reportsTos() {
        return false;
    }

    @Override
    public void close() {
        try {
            selector.close();
            channel.close();
        } catch (IOException ignored) {
            // closing: nothing left to do with the socket
        }
    }
}
