package io.jccl.transport.roce;

import io.jccl.transport.roce.wire.Icrc;
import io.jccl.transport.roce.wire.RoceOpcode;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;

/**
 * Packets a queue pair built and has not sent yet, all to its peer: a ring of packet slots in one native block,
 * plus the {@code mmsghdr}/{@code iovec}/{@code sockaddr_in} array that hands them to {@code sendmmsg} with one
 * system call (set up once; only the lengths and the destination change). A queue pair builds each packet in place
 * in {@link #buffer()} (no copy) and {@link #commit}s it; the batch is sent when full and whenever the queue pair
 * is about to release its lock. Guarded by the queue pair's lock; nothing is allocated after construction.
 *
 * <p>Layouts (Linux LP64, identical on x86-64 and aarch64): {@code struct iovec {void *base; size_t len;}} 16
 * bytes; {@code struct msghdr {void *name; socklen_t namelen; struct iovec *iov; size_t iovlen; void *control;
 * size_t controllen; int flags;}} 56 bytes with padding; {@code struct mmsghdr {struct msghdr hdr; unsigned int
 * len;}} 64 bytes; {@code struct sockaddr_in {sa_family_t family; in_port_t port; struct in_addr addr; char
 * zero[8];}} 16 bytes, port and address in network order.
 *
 * <p><b>UDP GSO.</b> Where the socket takes it ({@link UdpIo#gso()}), consecutive packets of one length (the last
 * may be shorter) form one message: its {@code iovec}s are the packets' slots and a {@code UDP_SEGMENT} control
 * message gives the kernel the segment size, so one {@code sendmmsg} entry carries up to {@link #MAX_SEGMENTS}
 * packets (at most {@link #MAX_GSO_BYTES} bytes, what one UDP datagram can hold) and the stack handles them as one
 * buffer. Linux numbers the IPv4 identification of the segments 0, 1, 2, ... (an unconnected socket with Don't
 * Fragment), so {@link #commit} gives segment k the ICRC for identification k ({@link Icrc#identificationDelta});
 * {@link #ungroup} puts the identification-0 ICRCs back where the kernel refuses GSO. A lone ACK followed by a
 * longer packet moves behind it, so that both form one message (the longer packet segment 0, the ACK segment 1).
 */
final class TxBatch {
    /** Packets per batch at most: one {@code sendmmsg} per this many (half rxe's window, its ACK cadence). */
    static final int DEFAULT_CAPACITY = 64;
    /** Room per slot beyond the MTU: the largest RoCE headers, pad and ICRC. */
    static final int SLOT_OVERHEAD = 64;
    static final int MMSGHDR_BYTES = 64;
    static final int IOVEC_BYTES = 16;
    /** iovecs a packet takes at most: header, payload (in a registered region), pad and ICRC. */
    static final int IOVECS_PER_PACKET = 3;
    static final int SOCKADDR_IN_BYTES = 16;
    /** Segments per GSO message at most (the kernel's UDP_MAX_SEGMENTS is 64 before Linux 6.9, 128 since). */
    static final int MAX_SEGMENTS = 64;
    /** Bytes per GSO message at most: a UDP datagram's payload (65535 - IPv4 20 - UDP 8). */
    static final int MAX_GSO_BYTES = 65535 - 20 - 8;
    /** The {@code UDP_SEGMENT} control message: CMSG_SPACE(sizeof(uint16_t)) = 24 bytes. */
    static final int GSO_CONTROL_BYTES = 24;
    private static final ValueLayout.OfInt INT_NATIVE = ValueLayout.JAVA_INT;
    private static final ValueLayout.OfLong LONG_NATIVE = ValueLayout.JAVA_LONG;

    private final int capacity;
    private final int slotBytes;
    private final ByteBuffer[] buffers;
    private final MemorySegment[] segments;
    private final int[] lengths;
    /** mmsghdr[capacity]; {@link #headersFrom} holds the slices from each index (a partial send resumes there). */
    private final MemorySegment headers;
    private final MemorySegment[] headersFrom;
    private final MemorySegment iovecs;
    private final MemorySegment destination;
    /** errno of a failed call ({@code Linker.Option.captureCallState}), one per batch: no allocation per call. */
    final MemorySegment callState;
    /**
     * Datagrams of this batch the kernel refused (EPERM: a netfilter rule dropped it on the way out) and the send
     * skipped; the context counts them as {@code send_err} and resets it.
     */
    int refused;
    private int destinationIpv4;
    private int destinationPort = -1;
    private int count;
    /** GSO messages: the first packet of each, how many packets it holds, its segment size and bytes. */
    private final int[] messageStart;
    private final int[] messagePackets;
    private final int[] messageSegment;
    private final int[] messageBytes;
    /** The open message no longer takes packets (its last segment was shorter). */
    private boolean messageClosed;
    private int messages;
    /** The IPv4 identification each packet's ICRC was computed for (its segment index in its message). */
    private final int[] identification;
    /** Each packet's first iovec and how many it has (1, or 3 with its payload in a registered region). */
    private final int[] iovFirst;
    private final int[] iovCount;
    private final int[] messageIovecs;
    private int iovNext;
    /** The next packet's payload lies outside its slot ({@link #external}): header bytes, address, length. */
    private int externalHeader;
    private long externalAddress;
    private int externalLength;
    /** Identification deltas for the ICRCs of GSO segments (cached per packet length). */
    private final Icrc deltas = new Icrc();
    /** One UDP_SEGMENT control message per message. */
    private final MemorySegment controls;

    /** A batch of {@code capacity} slots for packets of up to {@code mtu} payload bytes. */
    TxBatch(int capacity, int mtu) {
        this.capacity = capacity;
        this.slotBytes = mtu + SLOT_OVERHEAD;
        // Arena.ofAuto: the QP has no close hook for this memory; the GC frees it with the batch
        Arena arena = Arena.ofAuto();
        MemorySegment data = arena.allocate((long) capacity * slotBytes, 64);
        buffers = new ByteBuffer[capacity];
        segments = new MemorySegment[capacity];
        lengths = new int[capacity];
        headers = arena.allocate((long) capacity * MMSGHDR_BYTES, 8);
        headersFrom = new MemorySegment[capacity];
        iovecs = arena.allocate((long) capacity * IOVECS_PER_PACKET * IOVEC_BYTES, 8);
        iovFirst = new int[capacity];
        iovCount = new int[capacity];
        messageIovecs = new int[capacity];
        destination = arena.allocate(SOCKADDR_IN_BYTES, 8);
        callState = arena.allocate(FfmUdpSocket.CALL_STATE_BYTES, 8);
        messageStart = new int[capacity];
        messagePackets = new int[capacity];
        messageSegment = new int[capacity];
        messageBytes = new int[capacity];
        identification = new int[capacity];
        controls = arena.allocate((long) capacity * GSO_CONTROL_BYTES, 8);
        for (int i = 0; i < capacity; i++) {
            segments[i] = data.asSlice((long) i * slotBytes, slotBytes);
            buffers[i] = segments[i].asByteBuffer(); // big-endian, as the flyweights expect
            headersFrom[i] = headers.asSlice((long) i * MMSGHDR_BYTES);
            MemorySegment iov = iovecs.asSlice((long) i * IOVEC_BYTES, IOVEC_BYTES);
            iov.set(LONG_NATIVE, 0, segments[i].address());
            MemorySegment h = headers.asSlice((long) i * MMSGHDR_BYTES, MMSGHDR_BYTES);
            h.set(LONG_NATIVE, 0, destination.address()); // msg_name
            h.set(INT_NATIVE, 8, SOCKADDR_IN_BYTES); // msg_namelen
            h.set(LONG_NATIVE, 16, iov.address()); // msg_iov
            h.set(LONG_NATIVE, 24, 1); // msg_iovlen
            // msg_control, msg_controllen, msg_flags, msg_len stay 0
            MemorySegment c = controls.asSlice((long) i * GSO_CONTROL_BYTES, GSO_CONTROL_BYTES);
            c.set(LONG_NATIVE, 0, 16 + 2); // cmsg_len = CMSG_LEN(sizeof(uint16_t))
            c.set(INT_NATIVE, 8, FfmUdpSocket.SOL_UDP);
            c.set(INT_NATIVE, 12, FfmUdpSocket.UDP_SEGMENT);
        }
    }

    /** The slot the next packet is built in (absolute indexes from 0; never read past the limit). */
    ByteBuffer buffer() {
        return buffers[count];
    }

    /** The same slot as a segment (payload copies). */
    MemorySegment segment() {
        return segments[count];
    }

    /** Largest packet a slot holds. */
    int slotBytes() {
        return slotBytes;
    }

    /**
     * The packet in {@link #buffer()} is complete ({@code length} bytes, ICRC for IPv4 identification 0 in place):
     * it joins the batch. With {@code gso}, it joins the open message when it has the message's segment size (or is
     * shorter, which closes the message) and the message has room, and its ICRC is changed to the one for its
     * segment index, the identification Linux will give it; otherwise it starts a message of its own.
     *
     * @return the packet's segment index in its message (its IPv4 identification on the wire)
     */
    int commit(int length, boolean gso) {
        lengths[count] = length;
        int first = iovNext;
        long slot = segments[count].address();
        if (externalLength > 0) { // header | payload in the region | pad and ICRC, at their places in the slot
            iovec(first, slot, externalHeader);
            iovec(first + 1, externalAddress, externalLength);
            iovec(first + 2, slot + externalHeader + externalLength, length - externalHeader - externalLength);
            iovCount[count] = 3;
            externalLength = 0;
        } else {
            iovec(first, slot, length);
            iovCount[count] = 1;
        }
        iovFirst[count] = first;
        iovNext = first + iovCount[count];
        int k = 0;
        int m = messages - 1;
        if (gso && m >= 0 && !messageClosed && length <= messageSegment[m] && messagePackets[m] < MAX_SEGMENTS
            && messageBytes[m] + length <= MAX_GSO_BYTES) {
            k = messagePackets[m];
            if (k == 1) { // the message becomes a GSO send: the segment size goes with it
                gsoControl(m, messageSegment[m]);
            }
            messagePackets[m] = k + 1;
            messageBytes[m] += length;
            messageIovecs[m] += iovCount[count];
            headers.set(LONG_NATIVE, (long) m * MMSGHDR_BYTES + 24, messageIovecs[m]); // msg_iovlen
            messageClosed = length < messageSegment[m];
            ByteBuffer b = buffers[count];
            Icrc.put(b, 0, length, Icrc.get(b, 0, length) ^ deltas.delta(k, length));
        } else if (gso && m >= 0 && messagePackets[m] == 1 && length > messageSegment[m]
            && messageBytes[m] + length <= MAX_GSO_BYTES
            && (buffers[messageStart[m]].get(0) & 0xFF) == RoceOpcode.ACKNOWLEDGE) {
            // A lone ACK (held for this post, or queued by a received packet) and a longer packet: the longer one
            // goes first, the ACK becomes the shorter last segment, and both cross as one datagram (a ping-pong's
            // answer and the ACK of the request it answers). Only an ACK may move behind: it is no request, so the
            // peer's PSN order is untouched. The ACK's one iovec moves behind the packet's.
            int ack = messageStart[m];
            int at = iovFirst[ack];
            int c = iovCount[count];
            long ackBase = iovecs.get(LONG_NATIVE, (long) at * IOVEC_BYTES);
            long ackLength = iovecs.get(LONG_NATIVE, (long) at * IOVEC_BYTES + 8);
            MemorySegment.copy(iovecs, (long) (at + 1) * IOVEC_BYTES, iovecs, (long) at * IOVEC_BYTES,
                (long) c * IOVEC_BYTES);
            iovec(at + c, ackBase, ackLength);
            iovFirst[count] = at;
            iovFirst[ack] = at + c;
            ByteBuffer b = buffers[ack];
            Icrc.put(b, 0, lengths[ack], Icrc.get(b, 0, lengths[ack]) ^ deltas.delta(1, lengths[ack]));
            identification[ack] = 1;
            messagePackets[m] = 2;
            messageSegment[m] = length;
            messageBytes[m] += length;
            messageIovecs[m] = c + 1;
            messageClosed = true;
            gsoControl(m, length);
            headers.set(LONG_NATIVE, (long) m * MMSGHDR_BYTES + 24, c + 1); // msg_iovlen
        } else {
            startMessage(count, length);
        }
        identification[count] = k;
        count++;
        return k;
    }

    /**
     * The next packet {@link #commit}ted carries {@code payloadLength} bytes at native {@code address} (a registered
     * region) in place of its slot's bytes {@code headerLength..headerLength + payloadLength}: the kernel gathers
     * them from there, so the payload is not copied into the batch. The slot holds the headers before and the pad
     * and ICRC after, at their places. The region must stay valid until the batch is sent (the queue pair's lock).
     */
    void external(int headerLength, long address, int payloadLength) {
        externalHeader = headerLength;
        externalAddress = address;
        externalLength = payloadLength;
    }

    /** Forgets an {@link #external} payload whose packet was not committed (dropped by a test's filter). */
    void clearExternal() {
        externalLength = 0;
    }

    private void iovec(int index, long base, long length) {
        iovecs.set(LONG_NATIVE, (long) index * IOVEC_BYTES, base);
        iovecs.set(LONG_NATIVE, (long) index * IOVEC_BYTES + 8, length);
    }

    /** Message {@code m} carries a UDP_SEGMENT control message with segment size {@code size}. */
    private void gsoControl(int m, int size) {
        long h = (long) m * MMSGHDR_BYTES;
        MemorySegment c = controls.asSlice((long) m * GSO_CONTROL_BYTES, GSO_CONTROL_BYTES);
        c.set(ValueLayout.JAVA_SHORT, 16, (short) size);
        headers.set(LONG_NATIVE, h + 32, c.address());
        headers.set(LONG_NATIVE, h + 40, GSO_CONTROL_BYTES);
    }

    /** Packet {@code index} starts a message of its own (its iovecs, no control message). */
    private void startMessage(int index, int length) {
        int m = messages++;
        messageStart[m] = index;
        messagePackets[m] = 1;
        messageSegment[m] = length;
        messageBytes[m] = length;
        messageIovecs[m] = iovCount[index];
        messageClosed = false;
        long h = (long) m * MMSGHDR_BYTES;
        headers.set(LONG_NATIVE, h + 16, iovecs.address() + (long) iovFirst[index] * IOVEC_BYTES); // msg_iov
        headers.set(LONG_NATIVE, h + 24, iovCount[index]); // msg_iovlen
        headers.set(LONG_NATIVE, h + 32, 0); // msg_control
        headers.set(LONG_NATIVE, h + 40, 0); // msg_controllen
    }

    /** {@code sendmmsg} entries the batch holds (as many as packets without GSO). */
    int messageCount() {
        return messages;
    }

    /** Packets in message {@code index}. */
    int messagePackets(int index) {
        return messagePackets[index];
    }

    /** Whether some message carries more than one packet. */
    boolean grouped() {
        return messages < count;
    }

    /**
     * Splits the messages from {@code fromMessage} on into one message per packet and puts back each packet's
     * identification-0 ICRC: where the kernel refused GSO, they go out one datagram each, identification 0.
     */
    void ungroup(int fromMessage) {
        if (fromMessage >= messages) {
            return;
        }
        int first = messageStart[fromMessage];
        messages = fromMessage;
        for (int i = first; i < count; i++) {
            int k = identification[i];
            if (k != 0) {
                ByteBuffer b = buffers[i];
                Icrc.put(b, 0, lengths[i], Icrc.get(b, 0, lengths[i]) ^ deltas.delta(k, lengths[i]));
                identification[i] = 0;
            }
            startMessage(i, lengths[i]);
        }
        messageClosed = true;
    }

    /** Where iovec {@code index} points (tests). */
    long iovecAddress(int index) {
        return iovecs.get(LONG_NATIVE, (long) index * IOVEC_BYTES);
    }

    /** The address of slot {@code index} (tests). */
    long slotAddress(int index) {
        return segments[index].address();
    }

    /** The IPv4 identification packet {@code index}'s ICRC was computed for (tests). */
    int identification(int index) {
        return identification[index];
    }

    /** Packets waiting. */
    int count() {
        return count;
    }

    boolean isFull() {
        return count == capacity;
    }

    /** After a send: the batch is empty again. */
    void clear() {
        count = 0;
        iovNext = 0;
        externalLength = 0;
        messages = 0;
        messageClosed = false;
    }

    int length(int index) {
        return lengths[index];
    }

    ByteBuffer buffer(int index) {
        return buffers[index];
    }

    /** The mmsghdr array from entry {@code index} on (for {@code sendmmsg}). */
    MemorySegment headersFrom(int index) {
        return headersFrom[index];
    }

    /** Points every entry at {@code ipv4:port} (written only when the destination changes). */
    void destination(int ipv4, int port) {
        if (ipv4 == destinationIpv4 && port == destinationPort) {
            return;
        }
        destination.set(ValueLayout.JAVA_SHORT, 0, (short) FfmUdpSocket.AF_INET);
        destination.set(ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(java.nio.ByteOrder.BIG_ENDIAN), 2, (short) port);
        destination.set(ValueLayout.JAVA_INT_UNALIGNED.withOrder(java.nio.ByteOrder.BIG_ENDIAN), 4, ipv4);
        destinationIpv4 = ipv4;
        destinationPort = port;
    }
}
