package io.jccl.transport.roce;

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
 */
final class TxBatch {
    /** Packets per batch at most: one {@code sendmmsg} per this many (half rxe's window, its ACK cadence). */
    static final int DEFAULT_CAPACITY = 64;
    /** Room per slot beyond the MTU: the largest RoCE headers, pad and ICRC. */
    static final int SLOT_OVERHEAD = 64;
    static final int MMSGHDR_BYTES = 64;
    static final int IOVEC_BYTES = 16;
    static final int SOCKADDR_IN_BYTES = 16;
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
        iovecs = arena.allocate((long) capacity * IOVEC_BYTES, 8);
        destination = arena.allocate(SOCKADDR_IN_BYTES, 8);
        callState = arena.allocate(FfmUdpSocket.CALL_STATE_BYTES, 8);
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

    /** The packet in {@link #buffer()} is complete ({@code length} bytes, ICRC in place): it joins the batch. */
    void commit(int length) {
        lengths[count] = length;
        iovecs.set(LONG_NATIVE, (long) count * IOVEC_BYTES + 8, length);
        count++;
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
