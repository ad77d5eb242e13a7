package io.jccl.tools.perftest;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * What both sides of a perf run must agree on. The client sends it to the server in the out-of-band exchange
 * and the server adopts it (perftest checks that both sides were started with matching flags; here the server
 * simply follows the client, so {@code -s}, {@code -n}, {@code -a} and friends are needed on the client only).
 *
 * @param test the test
 * @param sizes message sizes, in order
 * @param iterations measured iterations per size (per QP for BW tests)
 * @param warmupIterations unmeasured iterations before each size (JIT warm-up)
 * @param durationSeconds 0 for iteration mode, else run each size this long
 * @param queuePairs QPs (BW tests)
 * @param txDepth outstanding send requests per QP
 * @param cqModeration signal every n-th request
 * @param inlineSize payloads up to this size are posted inline
 * @param atomicType FETCH_AND_ADD or CMP_AND_SWAP
 */
public record PerfPlan(PerfTest test, List<Long> sizes, int iterations, int warmupIterations, int durationSeconds,
                       int queuePairs, int txDepth, int cqModeration, int inlineSize, String atomicType) {
    private static final String MAGIC = "JCCL-PERF/1";

    /** Validates and copies. */
    public PerfPlan {
        sizes = List.copyOf(sizes);
        if (sizes.isEmpty()) {
            throw new IllegalArgumentException("no message sizes");
        }
        if (queuePairs < 1 || txDepth < 1 || cqModeration < 1 || iterations < 1 || warmupIterations < 0) {
            throw new IllegalArgumentException("queue pairs, tx depth, cq moderation and iterations must be >= 1");
        }
        if (!atomicType.equals("FETCH_AND_ADD") && !atomicType.equals("CMP_AND_SWAP")) {
            throw new IllegalArgumentException("atomic type must be FETCH_AND_ADD or CMP_AND_SWAP");
        }
    }

    /** The largest size, for buffer allocation. */
    public long maxSize() {
        long max = 0;
        for (long s : sizes) {
            max = Math.max(max, s);
        }
        return max;
    }

    /** Whether the run is an {@code -a} sweep (several sizes). */
    public boolean sweep() {
        return sizes.size() > 1;
    }

    /** Whether each size runs for a duration instead of an iteration count. */
    public boolean durationMode() {
        return durationSeconds > 0;
    }

    /** The sizes perftest's {@code -a} runs: 2, 4, … 2^23 bytes (atomics: 8 only). */
    public static List<Long> allSizes(PerfTest test) {
        List<Long> sizes = new ArrayList<>();
        if (test.verb() == PerfTest.Verb.ATOMIC) {
            sizes.add(8L);
            return sizes;
        }
        for (long s = 2; s <= (1L << 23); s <<= 1) {
            sizes.add(s);
        }
        return sizes;
    }

    /** The one-line wire form sent by the client. */
    public String encode() {
        StringBuilder sizeList = new StringBuilder();
        for (long s : sizes) {
            if (!sizeList.isEmpty()) {
                sizeList.append(',');
            }
            sizeList.append(s);
        }
        return MAGIC + " test=" + test.id() + " sizes=" + sizeList + " iters=" + iterations + " warmup="
            + warmupIterations + " duration=" + durationSeconds + " qps=" + queuePairs + " tx=" + txDepth + " cqmod="
            + cqModeration + " inline=" + inlineSize + " atomic=" + atomicType;
    }

    /** Parses {@link #encode()}'s form. */
    public static PerfPlan decode(String line) {
        String[] parts = line.trim().split(" ");
        if (parts.length == 0 || !parts[0].equals(MAGIC)) {
            throw new IllegalArgumentException("not a JCCL perf client (got '" + line + "'); is the peer perftest?");
        }
        Map<String, String> kv = new LinkedHashMap<>();
        for (int i = 1; i < parts.length; i++) {
            int eq = parts[i].indexOf('=');
            if (eq > 0) {
                kv.put(parts[i].substring(0, eq), parts[i].substring(eq + 1));
            }
        }
        List<Long> sizes = new ArrayList<>();
        for (String s : kv.getOrDefault("sizes", "").split(",")) {
            sizes.add(Long.parseLong(s));
        }
        return new PerfPlan(PerfTest.of(kv.get("test")), sizes, Integer.parseInt(kv.get("iters")),
            Integer.parseInt(kv.get("warmup")), Integer.parseInt(kv.get("duration")), Integer.parseInt(kv.get("qps")),
            Integer.parseInt(kv.get("tx")), Integer.parseInt(kv.get("cqmod")), Integer.parseInt(kv.get("inline")),
            kv.get("atomic"));
    }
}
