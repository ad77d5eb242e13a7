package io.jccl.transport.roce;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * The receive side's preallocated ring: {@code capacity} datagram slots in one native block and the
 * {@code mmsghdr} array (each with its {@code iovec}, {@code sockaddr_in} for the sender and a control buffer for the
 * {@code IP_TOS} message) that {@code recvmmsg} fills with one system call; after a receive, {@link #length},
 * {@link #sourceIpv4}, {@link #sourcePort} and {@link #tos} describe each datagram. Used by one thread at a time
 * (the context's receive lock); nothing is allocated after construction. Layouts as {@link TxBatch}; a control
 * message is {@code struct cmsghdr {size_t len; int level; int type;}} (16 bytes) followed by its data.
 */
final class RxRing {
    /** Datagrams per {@code recvmmsg} at most. */
    static final int DEFAULT_CAPACITY = 64;
    /** Largest datagram: a 4 KiB payload, the largest headers, pad and ICRC, and room to spot anything larger. */
    static final int SLOT_BYTES = 4096 + 256;
    /** Control buffer per datagram: CMSG_SPACE(1) is 24; room for one more small message. */
    static final int CONTROL_BYTES = 64;
    private static final ValueLayout.OfInt INT_BE = ValueLayout.JAVA_INT_UNALIGNED.withOrder(ByteOrder.BIG_ENDIAN);
    private static final ValueLayout.OfShort SHORT_BE =
        ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.BIG_ENDIAN);

    final int capacity;
    private final ByteBuffer[] buffers;
    private final MemorySegment[] segments;
    final MemorySegment headers;
    private final MemorySegment names;
    private final MemorySegment controls;
    /** errno of a failed call ({@code Linker.Option.captureCallState}). */
    final MemorySegment callState;
    final int[] lengths;
    final int[] sourceIpv4s;
    final int[] sourcePorts;
    final int[] tosBytes;
    /** Datagrams longer than a slot (MSG_TRUNC): their lengths are set to -1. */
    final boolean[] truncated;

    RxRing(int capacity) {
        this.capacity = capacity;
        Arena arena = Arena.ofAuto(); // the context owns the ring for its lifetime; the GC frees it after
        MemorySegment data = arena.allocate((long) capacity * SLOT_BYTES, 64);
        headers = arena.allocate((long) capacity * TxBatch.MMSGHDR_BYTES, 8);
        MemorySegment iovecs = arena.allocate((long) capacity * TxBatch.IOVEC_BYTES, 8);
        names = arena.allocate((long) capacity * TxBatch.SOCKADDR_IN_BYTES, 8);
        controls = arena.allocate((long) capacity * CONTROL_BYTES, 8);
        callState = arena.allocate(FfmUdpSocket.CALL_STATE_BYTES, 8);
        buffers = new ByteBuffer[capacity];
        segments = new MemorySegment[capacity];
        lengths = new int[capacity];
        sourceIpv4s = new int[capacity];
        sourcePorts = new int[capacity];
        tosBytes = new int[capacity];
        truncated = new boolean[capacity];
        for (int i = 0; i < capacity; i++) {
            segments[i] = data.asSlice((long) i * SLOT_BYTES, SLOT_BYTES);
            buffers[i] = segments[i].asByteBuffer();
            long iov = iovecs.address() + (long) i * TxBatch.IOVEC_BYTES;
            iovecs.set(ValueLayout.JAVA_LONG, (long) i * TxBatch.IOVEC_BYTES, segments[i].address());
            iovecs.set(ValueLayout.JAVA_LONG, (long) i * TxBatch.IOVEC_BYTES + 8, SLOT_BYTES);
            long h = (long) i * TxBatch.MMSGHDR_BYTES;
            headers.set(ValueLayout.JAVA_LONG, h, names.address() + (long) i * TxBatch.SOCKADDR_IN_BYTES);
            headers.set(ValueLayout.JAVA_LONG, h + 16, iov);
            headers.set(ValueLayout.JAVA_LONG, h + 24, 1);
            headers.set(ValueLayout.JAVA_LONG, h + 32, controls.address() + (long) i * CONTROL_BYTES);
        }
        rearm(capacity);
    }

    /** The slot of datagram {@code index} (absolute indexes from 0). */
    ByteBuffer buffer(int index) {
        return buffers[index];
    }

    MemorySegment segment(int index) {
        return segments[index];
    }

    /**
     * Before each {@code recvmmsg}: the kernel overwrites the name and control lengths of the entries it filled, so
     * they are set back for the first {@code used} entries.
     */
    void rearm(int used) {
        for (int i = 0; i < used; i++) {
            long h = (long) i * TxBatch.MMSGHDR_BYTES;
            headers.set(ValueLayout.JAVA_INT, h + 8, TxBatch.SOCKADDR_IN_BYTES);
            headers.set(ValueLayout.JAVA_LONG, h + 40, CONTROL_BYTES);
            headers.set(ValueLayout.JAVA_INT, h + 48, 0);
        }
    }

    /** After {@code recvmmsg} returned {@code received}: reads each entry's length, sender and TOS byte. */
    void decode(int received) {
        for (int i = 0; i < received; i++) {
            long h = (long) i * TxBatch.MMSGHDR_BYTES;
            int flags = headers.get(ValueLayout.JAVA_INT, h + 48);
            lengths[i] = headers.get(ValueLayout.JAVA_INT, h + 56);
            truncated[i] = (flags & FfmUdpSocket.MSG_TRUNC) != 0;
            long name = (long) i * TxBatch.SOCKADDR_IN_BYTES;
            sourcePorts[i] = names.get(SHORT_BE, name + 2) & 0xFFFF;
            sourceIpv4s[i] = names.get(INT_BE, name + 4);
            tosBytes[i] = tos(i, headers.get(ValueLayout.JAVA_LONG, h + 40));
        }
        rearm(received);
    }

    /** The IP_TOS control message's byte among entry {@code index}'s control messages, -1 when there is none. */
    private int tos(int index, long controlLength) {
        long base = (long) index * CONTROL_BYTES;
        long at = 0;
        while (at + 16 <= controlLength && at + 16 <= CONTROL_BYTES) {
            long length = controls.get(ValueLayout.JAVA_LONG, base + at);
            int level = controls.get(ValueLayout.JAVA_INT, base + at + 8);
            int type = controls.get(ValueLayout.JAVA_INT, base + at + 12);
            if (length < 16) {
                return -1;
            }
            if (level == FfmUdpSocket.IPPROTO_IP && type == FfmUdpSocket.IP_TOS && length >= 17) {
                return controls.get(ValueLayout.JAVA_BYTE, base + at + 16) & 0xFF;
            }
            at += (length + 7) & ~7L; // CMSG_ALIGN
        }
        return -1;
    }
}
