package io.jccl.tools.perftest;

import java.util.Locale;

/** The eight perftest programs ({@code ib_write_bw} … {@code ib_atomic_lat}) with perftest's per-test defaults. */
public enum PerfTest {
    /** ib_write_bw. */
    WRITE_BW(Verb.WRITE, true),
    /** ib_write_lat. */
    WRITE_LAT(Verb.WRITE, false),
    /** ib_read_bw. */
    READ_BW(Verb.READ, true),
    /** ib_read_lat. */
    READ_LAT(Verb.READ, false),
    /** ib_send_bw. */
    SEND_BW(Verb.SEND, true),
    /** ib_send_lat. */
    SEND_LAT(Verb.SEND, false),
    /** ib_atomic_bw. */
    ATOMIC_BW(Verb.ATOMIC, true),
    /** ib_atomic_lat. */
    ATOMIC_LAT(Verb.ATOMIC, false);

    /** The operation a test measures; the text is perftest's {@code testsStr}. */
    public enum Verb {
        /** SEND/RECV. */
        SEND("Send"),
        /** RDMA WRITE. */
        WRITE("RDMA_Write"),
        /** RDMA READ. */
        READ("RDMA_Read"),
        /** Atomics. */
        ATOMIC("Atomic");

        private final String title;

        Verb(String title) {
            this.title = title;
        }

        /** perftest's name for the verb. */
        public String title() {
            return title;
        }
    }

    private final Verb verb;
    private final boolean bandwidth;

    PerfTest(Verb verb, boolean bandwidth) {
        this.verb = verb;
        this.bandwidth = bandwidth;
    }

    /** The verb. */
    public Verb verb() {
        return verb;
    }

    /** Whether this is a bandwidth test (else a latency test). */
    public boolean isBandwidth() {
        return bandwidth;
    }

    /** The command-line name, for example {@code write_bw}. */
    public String id() {
        return name().toLowerCase(Locale.ROOT);
    }

    /** The perftest program this test mirrors, for example {@code ib_write_bw}. */
    public String perftestName() {
        return "ib_" + id();
    }

    /** The test by its command-line name ({@code write_bw} or {@code ib_write_bw}). */
    public static PerfTest of(String id) {
        String name = id.toLowerCase(Locale.ROOT);
        if (name.startsWith("ib_")) {
            name = name.substring(3);
        }
        for (PerfTest test : values()) {
            if (test.id().equals(name)) {
                return test;
            }
        }
        throw new IllegalArgumentException("unknown test '" + id + "'; one of write_bw, write_lat, read_bw, "
            + "read_lat, send_bw, send_lat, atomic_bw, atomic_lat");
    }

    /** The title line, for example {@code RDMA_Write BW Test} or {@code Atomic FETCH_AND_ADD Latency Test}. */
    public String title(String atomicType) {
        return verb.title() + " " + (verb == Verb.ATOMIC ? atomicType + " " : "") + (bandwidth ? "BW " : "Latency ")
            + "Test";
    }

    /** perftest's default message size: 65536 for BW, 2 for latency, 8 for atomics. */
    public int defaultSize() {
        return verb == Verb.ATOMIC ? 8 : bandwidth ? 65536 : 2;
    }

    /** perftest's default iteration count: 5000 for write_bw, else 1000. */
    public int defaultIterations() {
        return this == WRITE_BW ? 5000 : 1000;
    }

    /** perftest's default TX depth: 128 for BW, 1 for latency. */
    public int defaultTxDepth() {
        return bandwidth ? 128 : 1;
    }

    /**
     * How many one-way trips one latency sample spans: 2 for ping-pong tests (reported latency is RTT/2), 1 for
     * READ and atomics (a round trip is one operation), as perftest's {@code rtt_factor}.
     */
    public int rttFactor() {
        return verb == Verb.READ || verb == Verb.ATOMIC ? 1 : 2;
    }

    /** Whether the server side takes part in every operation (SEND tests; write latency ping-pong). */
    public boolean serverActive() {
        return verb == Verb.SEND || this == WRITE_LAT;
    }

    /** perftest's default inline size for the test (220 for WRITE, 236 for SEND, 0 for READ/atomics). */
    public int defaultInline() {
        return switch (verb) {
            case WRITE -> 220;
            case SEND -> 236;
            default -> 0;
        };
    }
}
