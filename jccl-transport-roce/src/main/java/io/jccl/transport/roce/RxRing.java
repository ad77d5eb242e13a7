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
 *
 * <p><b>UDP GRO.</b> On a socket with {@code UDP_GRO} ({@link UdpIo#gro()}) the kernel hands over the segments of
 * one GSO send (on loopback: the sender's whole message, never split) as one datagram of up to 64 KiB, with the
 * segment size in a control message ({@link #segmentSize}): segment k starts at k times that size. Slots then hold
 * 64 KiB, and {@link #packetBuffer}/{@link #packetSegment} give views of each segment at offset 0, made once per
 * slot and segment size (two sizes per slot kept), so that the receive path sees one packet per view and nothing is
 * allocated per packet once the sizes in use have been seen.
 */
final class RxRing {
    /** Datagrams per {@code recvmmsg} at most. */
    static final int DEFAULT_CAPACITY = 64;
    /** Largest datagram: a 4 KiB payload, the largest headers, pad and ICRC, and room to spot anything larger. */
    static final int SLOT_BYTES = 4096 + 256;
    /** Slots of a GRO socket: the largest UDP datagram. */
    static final int GRO_SLOT_BYTES = 65536;
    /** Datagrams per {@code recvmmsg} on a GRO socket (2 MiB of slots). */
    static final int GRO_CAPACITY = 32;
    /** Most packets one GRO datagram holds that get views (the kernel's UDP_GRO_CNT_MAX is 64). */
    static final int MAX_VIEWS = 64;
    /** Control buffer per datagram: IP_TOS, CMSG_SPACE(1) = 24, and UDP_GRO, CMSG_SPACE(4) = 24. */
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
    /** The UDP_GRO segment size of each datagram, 0 when it holds one packet. */
    final int[] segmentSizes;
    final int slotBytes;
    /** Per slot, two segment sizes with their views ({@link #packetBuffer}); round-robin replacement. */
    private final int[][] viewSize;
    private final ByteBuffer[][][] viewBuffers;
    private final MemorySegment[][][] viewSegments;
    private final int[] viewNext;
    /** Where a segment goes when its datagram holds more than {@link #MAX_VIEWS} (copied; never in practice). */
    private final MemorySegment scratch;
    private final ByteBuffer scratchBuffer;

    RxRing(int capacity) {
        this(capacity, SLOT_BYTES);
    }

    /** A ring for a socket that does ({@code gro}) or does not coalesce GSO segments. */
    static RxRing forSocket(boolean gro) {
        return gro ? new RxRing(GRO_CAPACITY, GRO_SLOT_BYTES) : new RxRing(DEFAULT_CAPACITY, SLOT_BYTES);
    }

    RxRing(int capacity, int slotBytes) {
        this.capacity = capacity;
        this.slotBytes = slotBytes;
        Arena arena = Arena.ofAuto(); // the context owns the ring for its lifetime; the GC frees it after
        MemorySegment data = arena.allocate((long) capacity * slotBytes, 64);
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
        segmentSizes = new int[capacity];
        viewSize = new int[capacity][2];
        viewBuffers = new ByteBuffer[capacity][2][];
        viewSegments = new MemorySegment[capacity][2][];
        viewNext = new int[capacity];
        scratch = arena.allocate(SLOT_BYTES, 64);
        scratchBuffer = scratch.asByteBuffer();
        for (int i = 0; i < capacity; i++) {
            segments[i] = data.asSlice((long) i * slotBytes, slotBytes);
            buffers[i] = segments[i].asByteBuffer();
            long iov = iovecs.address() + (long) i * TxBatch.IOVEC_BYTES;
            iovecs.set(ValueLayout.JAVA_LONG, (long) i * TxBatch.IOVEC_BYTES, segments[i].address());
            iovecs.set(ValueLayout.JAVA_LONG, (long) i * TxBatch.IOVEC_BYTES + 8, slotBytes);
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
            long controlLength = headers.get(ValueLayout.JAVA_LONG, h + 40);
            tosBytes[i] = control(i, controlLength, FfmUdpSocket.IPPROTO_IP, FfmUdpSocket.IP_TOS, 1);
            int segment = control(i, controlLength, FfmUdpSocket.SOL_UDP, FfmUdpSocket.UDP_GRO, 4);
            segmentSizes[i] = Math.max(segment, 0);
        }
        rearm(received);
    }

    /** The segment size of datagram {@code index} when it holds several packets, else 0 (one packet). */
    int segmentSize(int index) {
        int size = segmentSizes[index];
        return size > 0 && size < lengths[index] ? size : 0;
    }

    /**
     * Which view set of slot {@code index} has packets of {@code size} bytes (made on first sight of the size in
     * this slot), or -1 when the datagram holds more packets than views are made for ({@link #copyPacket}).
     */
    int views(int index, int size, int length) {
        int packets = (length + size - 1) / size;
        if (size < 16 || packets > MAX_VIEWS) {
            return -1;
        }
        int[] sizes = viewSize[index];
        for (int e = 0; e < sizes.length; e++) {
            if (sizes[e] == size) {
                return e;
            }
        }
        int e = viewNext[index];
        viewNext[index] = (e + 1) % sizes.length;
        int count = Math.min(MAX_VIEWS, slotBytes / size);
        ByteBuffer[] buffers = new ByteBuffer[count];
        MemorySegment[] views = new MemorySegment[count];
        for (int k = 0; k < count; k++) {
            views[k] = segments[index].asSlice((long) k * size, size);
            buffers[k] = views[k].asByteBuffer();
        }
        viewBuffers[index][e] = buffers;
        viewSegments[index][e] = views;
        sizes[e] = size;
        return e;
    }

    /** Packet {@code k} of datagram {@code index} through view set {@code views}, at offset 0. */
    ByteBuffer packetBuffer(int index, int views, int k) {
        return viewBuffers[index][views][k];
    }

    MemorySegment packetSegment(int index, int views, int k) {
        return viewSegments[index][views][k];
    }

    /** Copies {@code length} bytes at {@code offset} of slot {@code index} to the scratch slot (returned). */
    ByteBuffer copyPacket(int index, int offset, int length) {
        MemorySegment.copy(segments[index], offset, scratch, 0, Math.min(length, SLOT_BYTES));
        return scratchBuffer;
    }

    MemorySegment scratchSegment() {
        return scratch;
    }

    /**
     * The value of the control message {@code level}/{@code type} among entry {@code index}'s ({@code bytes} 1: a
     * byte, 4: an int), -1 when there is none.
     */
    private int control(int index, long controlLength, int wantedLevel, int wantedType, int bytes) {
        long base = (long) index * CONTROL_BYTES;
        long at = 0;
        while (at + 16 <= controlLength && at + 16 <= CONTROL_BYTES) {
            long length = controls.get(ValueLayout.JAVA_LONG, base + at);
            int level = controls.get(ValueLayout.JAVA_INT, base + at + 8);
            int type = controls.get(ValueLayout.JAVA_INT, base + at + 12);
            if (length < 16) {
                return -1;
            }
            if (level == wantedLevel && type == wantedType && length >= 16 + bytes) {
                return bytes == 1 ? controls.get(ValueLayout.JAVA_BYTE, base + at + 16) & 0xFF
                    : controls.get(ValueLayout.JAVA_INT, base + at + 16);
            }
            at += (length + 7) & ~7L; // CMSG_ALIGN
        }
        return -1;
    }
}
