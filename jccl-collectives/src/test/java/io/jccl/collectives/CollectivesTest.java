package io.jccl.collectives;

import io.jccl.collectives.direct.DirectAllReduce;
import io.jccl.collectives.kernel.KernelsTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.Random;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * Every collective × type × operator × algorithm × in/out-of-place × size × world size, in-process (each rank a
 * thread with its own contexts) over the loop provider. Inputs are seeded random small integers, so every rank can
 * compute the exact expected result of every element (sums, products, averages of them are exactly representable
 * in every type, including float16 and bfloat16).
 */
class CollectivesTest {
    static final String RING = "allreduce:ring;broadcast:ring;reduce:tree;allgather:ring;reducescatter:ring;"
        + "alltoall:pairwise;barrier:dissemination";
    static final String TREE = "allreduce:tree;broadcast:tree;reduce:tree;allgather:ring;reducescatter:ring;"
        + "alltoall:pairwise;barrier:dissemination";
    static final String RHD = "allreduce:rhd;broadcast:tree";
    static final String RD = "allreduce:rd;broadcast:tree";
    static final String DIRECT = "allreduce:direct;broadcast:direct;reduce:direct;allgather:direct;"
        + "reducescatter:direct;alltoall:direct;barrier:direct";
    static final long[] SIZES = {0, 1, 17, 1031, 70001};

    /** Value of element i on rank r for op (exactly representable reductions). */
    static double value(long seed, int r, long i, ReduceOp op, DataType type) {
        Random random = new Random(seed * 1_000_003L + r * 7919L + i);
        if (op == ReduceOp.PROD) {
            int[] choices = {1, -1, 2, 1, 1};
            return type == DataType.UINT8 ? 1 + random.nextInt(2) : choices[random.nextInt(choices.length)];
        }
        if (type == DataType.UINT8) {
            return random.nextInt(30);
        }
        return random.nextInt(31) - 15;
    }

    static double expected(long seed, int n, long i, ReduceOp op, DataType type) {
        double acc = value(seed, 0, i, op, type);
        for (int r = 1; r < n; r++) {
            double v = value(seed, r, i, op, type);
            acc = switch (op) {
                case SUM, AVG -> acc + v;
                case PROD -> acc * v;
                case MIN -> Math.min(acc, v);
                case MAX -> Math.max(acc, v);
            };
        }
        if (type == DataType.INT8) {
            acc = (byte) (long) acc;
        } else if (type == DataType.UINT8) {
            acc = ((long) acc) & 0xFF;
        }
        if (op == ReduceOp.AVG) {
            if (type.isFloatingPoint()) {
                double q = type == DataType.FLOAT64 ? acc / n : (float) acc / (float) n;
                acc = switch (type) {
                    case FLOAT16 -> Float.float16ToFloat(Float.floatToFloat16((float) q));
                    case BFLOAT16 -> io.jccl.collectives.kernel.ScalarKernels.fromBf16(
                        io.jccl.collectives.kernel.ScalarKernels.toBf16((float) q));
                    case FLOAT32 -> (float) q;
                    default -> q;
                };
            } else {
                acc = (long) acc / n;
                if (type == DataType.INT8) {
                    acc = (byte) (long) acc;
                }
            }
        }
        return acc;
    }

    static void fill(MemorySegment s, long offsetElems, long count, long seed, int r, ReduceOp op, DataType type) {
        for (long i = 0; i < count; i++) {
            KernelsTest.set(type, s, offsetElems + i, value(seed, r, i, op, type));
        }
    }

    static void check(String what, MemorySegment s, long offsetElems, long count, DataType type,
                      java.util.function.LongToDoubleFunction expect) {
        for (long i = 0; i < count; i++) {
            double e = expect.applyAsDouble(i);
            double a = KernelsTest.get(type, s, offsetElems + i);
            if (Double.compare(e, a) != 0 && !(e == 0 && a == 0)) {
                fail(what + ": element " + i + " expected " + e + " got " + a);
            }
        }
    }

    static MemorySegment alloc(Arena arena, long bytes, boolean heap) {
        if (heap) {
            return MemorySegment.ofArray(new byte[(int) Math.max(bytes, 1)]).asSlice(0, bytes);
        }
        return arena.allocate(Math.max(bytes, 1), 64).asSlice(0, bytes);
    }

    // ------------------------------------------------------------------------------------------------ reductions

    private static void reductions(Communicator c, long[] sizes, DataType[] types, ReduceOp[] ops, String tag) {
        int n = c.size();
        int r = c.rank();
        long seed = 11;
        try (Arena arena = Arena.ofConfined()) {
            for (DataType type : types) {
                for (ReduceOp op : ops) {
                    for (long count : sizes) {
                        seed++;
                        int es = type.sizeBytes();
                        String what = tag + " n=" + n + " rank " + r + " " + type + " " + op + " count=" + count;
                        boolean heap = (seed % 3) == 0;
                        // all-reduce, out of place
                        MemorySegment send = alloc(arena, count * es, heap);
                        MemorySegment recv = alloc(arena, count * es, !heap);
                        fill(send, 0, count, seed, r, op, type);
                        c.allReduce(send, recv, count, type, op);
                        final long s1 = seed;
                        check("allReduce " + what, recv, 0, count, type, i -> expected(s1, n, i, op, type));
                        check("allReduce input untouched " + what, send, 0, count, type, i -> value(s1, r, i, op, type));
                        // in place
                        c.allReduce(send, count, type, op);
                        check("allReduce in-place " + what, send, 0, count, type, i -> expected(s1, n, i, op, type));
                        // reduce to a root
                        int root = (int) (seed % n);
                        fill(send, 0, count, seed, r, op, type);
                        MemorySegment out = alloc(arena, count * es, heap);
                        c.reduce(send, out, count, type, op, root);
                        if (r == root) {
                            check("reduce root " + root + " " + what, out, 0, count, type,
                                i -> expected(s1, n, i, op, type));
                        }
                        // reduce-scatter: block b of rank r's input is value(seed, r, b*count + i)
                        MemorySegment big = alloc(arena, count * es * n, heap);
                        for (int b = 0; b < n; b++) {
                            for (long i = 0; i < count; i++) {
                                KernelsTest.set(type, big, b * count + i, value(s1, r, b * count + i, op, type));
                            }
                        }
                        MemorySegment mine = alloc(arena, count * es, !heap);
                        c.reduceScatter(big, mine, count, type, op);
                        check("reduceScatter " + what, mine, 0, count, type,
                            i -> expected(s1, n, r * count + i, op, type));
                    }
                }
            }
        }
    }

    private static void dataMovement(Communicator c, long[] sizes, String tag) {
        int n = c.size();
        int r = c.rank();
        DataType type = DataType.INT32;
        ReduceOp op = ReduceOp.SUM;
        long seed = 1000;
        try (Arena arena = Arena.ofConfined()) {
            for (long count : sizes) {
                for (boolean heap : new boolean[] {false, true}) {
                    seed++;
                    final long s = seed;
                    String what = tag + " n=" + n + " rank " + r + " count=" + count + (heap ? " heap" : " native");
                    long bytes = count * 4;
                    int root = (int) (seed % n);
                    // broadcast, out of place and in place
                    MemorySegment src = alloc(arena, bytes, heap);
                    MemorySegment dst = alloc(arena, bytes, !heap);
                    fill(src, 0, count, seed, r, op, type);
                    c.broadcast(src, dst, count, type, root);
                    check("broadcast " + what, dst, 0, count, type, i -> value(s, root, i, op, type));
                    c.broadcast(src, count, type, root);
                    check("broadcast in-place " + what, src, 0, count, type, i -> value(s, root, i, op, type));
                    // all-gather out of place and in place (send = my block of recv)
                    MemorySegment all = alloc(arena, bytes * n, heap);
                    fill(src, 0, count, seed, r, op, type);
                    c.allGather(src, all, count, type);
                    for (int b = 0; b < n; b++) {
                        int bb = b;
                        check("allGather block " + b + " " + what, all, b * count, count, type,
                            i -> value(s, bb, i, op, type));
                    }
                    MemorySegment inPlace = alloc(arena, bytes * n, false);
                    fill(inPlace, r * count, count, seed, r, op, type);
                    c.allGather(inPlace.asSlice(r * bytes, bytes), inPlace, count, type);
                    for (int b = 0; b < n; b++) {
                        int bb = b;
                        check("allGather in-place block " + b + " " + what, inPlace, b * count, count, type,
                            i -> value(s, bb, i, op, type));
                    }
                    // all-to-all: block j of rank r = value(seed, r, j*count+i)
                    MemorySegment a2aIn = alloc(arena, bytes * n, heap);
                    MemorySegment a2aOut = alloc(arena, bytes * n, !heap);
                    for (int j = 0; j < n; j++) {
                        for (long i = 0; i < count; i++) {
                            KernelsTest.set(type, a2aIn, j * count + i, value(s, r, j * count + i, op, type));
                        }
                    }
                    c.allToAll(a2aIn, a2aOut, count, type);
                    for (int j = 0; j < n; j++) {
                        int jj = j;
                        check("allToAll block " + j + " " + what, a2aOut, j * count, count, type,
                            i -> value(s, jj, r * count + i, op, type));
                    }
                    c.allToAll(a2aIn, a2aIn, count, type);
                    for (int j = 0; j < n; j++) {
                        int jj = j;
                        check("allToAll in-place block " + j + " " + what, a2aIn, j * count, count, type,
                            i -> value(s, jj, r * count + i, op, type));
                    }
                    // gather / scatter
                    fill(src, 0, count, seed, r, op, type);
                    MemorySegment gathered = alloc(arena, bytes * n, heap);
                    c.gather(src, gathered, count, type, root);
                    if (r == root) {
                        for (int b = 0; b < n; b++) {
                            int bb = b;
                            check("gather block " + b + " " + what, gathered, b * count, count, type,
                                i -> value(s, bb, i, op, type));
                        }
                    }
                    MemorySegment scatterIn = alloc(arena, bytes * n, heap);
                    for (int j = 0; j < n; j++) {
                        for (long i = 0; i < count; i++) {
                            KernelsTest.set(type, scatterIn, j * count + i, value(s, root, j * count + i, op, type));
                        }
                    }
                    c.scatter(scatterIn, dst, count, type, root);
                    check("scatter " + what, dst, 0, count, type, i -> value(s, root, r * count + i, op, type));
                    c.barrier();
                }
            }
        }
    }

    static void everything(Communicator c, String tag, boolean allTypes) {
        DataType[] types = allTypes ? DataType.values() : new DataType[] {DataType.FLOAT32, DataType.BFLOAT16};
        reductions(c, SIZES, types, ReduceOp.values(), tag);
        dataMovement(c, SIZES, tag);
    }

    @ParameterizedTest(name = "{0} ranks, {1}")
    @CsvSource({"1,auto", "2,ring", "2,tree", "2,rhd", "2,rd", "2,direct", "3,ring", "3,tree", "3,rhd", "3,rd",
        "3,direct", "4,rhd", "4,rd", "5,ring", "5,rhd", "5,direct", "6,tree", "7,rd"})
    void allCollectivesAllTypes(int n, String profile) {
        String spec = switch (profile) {
            case "ring" -> RING;
            case "tree" -> TREE;
            case "rhd" -> RHD;
            case "rd" -> RD;
            case "direct" -> DIRECT;
            default -> "";
        };
        Ranks.run(n, Ranks.loop().withAlgorithms(spec).withChunking(4096, 3).withDirectBytes(8192),
            c -> everything(c, profile, n <= 3 || profile.equals("direct")));
    }

    /** 8 ranks (on 2 cores): every collective, two types, with default chunking and auto selection too. */
    @Test
    void eightRanks() {
        for (String spec : new String[] {RING, DIRECT, ""}) {
            Ranks.run(8, Ranks.loop().withAlgorithms(spec), c -> {
                reductions(c, new long[] {0, 1, 13, 4099}, new DataType[] {DataType.FLOAT32, DataType.INT8},
                    new ReduceOp[] {ReduceOp.SUM, ReduceOp.MAX, ReduceOp.AVG}, "8 ranks " + spec);
                dataMovement(c, new long[] {1, 1031}, "8 ranks " + spec);
            });
        }
    }

    /** Ranks on three fake hosts (3 + 2 + 1): the hierarchical all-reduce, and every other collective with it. */
    @Test
    void hierarchicalAcrossFakeHosts() {
        String[] hostOf = {"hostA", "hostA", "hostB", "hostA", "hostB", "hostC"};
        for (String spec : new String[] {"allreduce:hier", ""}) {
            Ranks.runWith(6, (store, rank, size) -> Communicator.create(store, rank, size,
                Ranks.loop().withHostId(hostOf[rank]).withAlgorithms(spec).withChunking(4096, 3)), c -> {
                    assertEquals(false, c.directAvailable());
                    if (spec.isEmpty()) {
                        // same link inside and across fake hosts: hier wins on latency only (log steps)
                        assertEquals(io.jccl.collectives.tuning.Algorithm.HIER,
                            c.algorithmFor(Collective.ALL_REDUCE, 8), c.tuningTable());
                    }
                    reductions(c, SIZES, new DataType[] {DataType.FLOAT32, DataType.BFLOAT16, DataType.INT32},
                        ReduceOp.values(), "hier " + spec);
                });
        }
    }

    /** Direct all-reduce reading Communicator.allocate() inputs in place (zero copy), over several staging rounds. */
    @Test
    void directZeroCopyFromAllocatedMemory() {
        Ranks.run(3, Ranks.loop().withAlgorithms("allreduce:direct").withDirectBytes(8192), c -> {
            try (Arena arena = Arena.ofConfined()) {
                for (long count : new long[] {9000, 70001}) {
                    for (DataType type : new DataType[] {DataType.FLOAT32, DataType.BFLOAT16, DataType.INT64}) {
                        for (ReduceOp op : new ReduceOp[] {ReduceOp.SUM, ReduceOp.AVG, ReduceOp.MAX}) {
                            int es = type.sizeBytes();
                            MemorySegment in = c.allocate(count * es + 64).asSlice(64); // offset in the allocation
                            MemorySegment out = c.allocate(count * es);
                            fill(in, 0, count, 21, c.rank(), op, type);
                            long split = c.directAllReduce().splitAllReduces();
                            c.allReduce(in, out, count, type, op);
                            check("zero-copy out-of-place " + type + " " + op, out, 0, count, type,
                                i -> expected(21, 3, i, op, type));
                            // all six buffers shared: every rank reduces its slice into all outputs
                            assertEquals(split + 1, c.directAllReduce().splitAllReduces(), "split path out of place");
                            out.fill((byte) 0x71);
                            c.allReduce(in, in, count, type, op);
                            check("zero-copy in-place " + type + " " + op, in, 0, count, type,
                                i -> expected(21, 3, i, op, type));
                            assertEquals(split + 2, c.directAllReduce().splitAllReduces(), "split path in place");
                            // rank 2's output is not shared: the staged path
                            MemorySegment other = c.rank() == 2 ? arena.allocate(count * es, 64) : out;
                            fill(in, 0, count, 22, c.rank(), op, type);
                            c.allReduce(in, other, count, type, op);
                            check("zero-copy in, one output private " + type + " " + op, other, 0, count, type,
                                i -> expected(22, 3, i, op, type));
                            assertEquals(split + 2, c.directAllReduce().splitAllReduces(), "staged path");
                        }
                    }
                }
            }
        });
    }

    /**
     * Direct all-reduce of at most 32 KiB (every rank reduces the whole vector): inputs in {@code allocate()} memory
     * are read where they are, others through staging, in any mix. Every rank overwrites its input right after the
     * call, so a rank that returned while a peer still read its input would corrupt that peer's result; many
     * repetitions give a late reader the chance.
     */
    @Test
    void directSmallAllReduceReadsAllocatedInputsInPlace() {
        Ranks.run(3, Ranks.loop().withAlgorithms("allreduce:direct"), c -> {
            int r = c.rank();
            try (Arena arena = Arena.ofConfined()) {
                for (long count : new long[] {300, 2100, 4000, 8191}) {
                    for (DataType type : new DataType[] {DataType.FLOAT32, DataType.BFLOAT16, DataType.INT64}) {
                        int es = type.sizeBytes();
                        if (count * es > DirectAllReduce.SMALL_BYTES || count * es <= DirectAllReduce.INLINE_BYTES) {
                            continue; // the split/staged and the inline paths are tested elsewhere
                        }
                        MemorySegment shared = c.allocate(count * es + 64).asSlice(64);
                        MemorySegment sharedOut = c.allocate(count * es);
                        MemorySegment privateIn = arena.allocate(count * es, 64);
                        for (int mix = 0; mix < 4; mix++) {
                            // 0: all inputs shared; 1: rank 1's private; 2: all in place; 3: all private
                            MemorySegment in = mix == 3 || (mix == 1 && r == 1) ? privateIn : shared;
                            MemorySegment out = mix == 2 ? in : sharedOut;
                            boolean zeroCopy = mix < 2 && count * es >= DirectAllReduce.SMALL_ZERO_COPY_BYTES;
                            for (int rep = 0; rep < 40; rep++) {
                                ReduceOp op = rep % 2 == 0 ? ReduceOp.SUM : ReduceOp.MAX;
                                long seed = 300 + count + 7L * mix + rep;
                                fill(in, 0, count, seed, r, op, type);
                                long before = c.directAllReduce().zeroCopySmallAllReduces();
                                c.allReduce(in, out, count, type, op);
                                if (mix != 2) {
                                    fill(in, 0, count, seed + 1000, r, op, type); // reuse at once
                                }
                                check("small all-reduce mix " + mix + " " + type + " " + op, out, 0, count, type,
                                    i -> expected(seed, 3, i, op, type));
                                assertEquals(before + (zeroCopy ? 1 : 0), c.directAllReduce().zeroCopySmallAllReduces(),
                                    "inputs read in place, mix " + mix);
                            }
                        }
                    }
                }
            }
        });
    }

    /**
     * Two-rank direct all-reduce: zero copy and staged inputs meet (repetitions 0 and 1: one rank's input is
     * allocate() memory, the other's arena memory; each rank reduces the whole vector from both inputs), both inputs
     * and outputs are allocate() memory (repetition 2: the split path, each rank reduces its half into both outputs,
     * odd counts and several blocks), or both inputs are but one output is not (repetition 3: whole-vector path
     * again). Out of place and in place, over several staging rounds; each rank overwrites its input right after the
     * call and its output after checking it, so a rank that returned while its peer still read its input or wrote
     * its output would corrupt a result.
     */
    @Test
    void directTwoRankAllReduceZeroCopyAndStaged() {
        Ranks.run(2, Ranks.loop().withAlgorithms("allreduce:direct").withDirectBytes(8192), c -> {
            int r = c.rank();
            try (Arena arena = Arena.ofConfined()) {
                for (long count : new long[] {9000, 70001}) {
                    for (DataType type : new DataType[] {DataType.FLOAT32, DataType.BFLOAT16, DataType.INT64}) {
                        for (ReduceOp op : new ReduceOp[] {ReduceOp.SUM, ReduceOp.AVG, ReduceOp.MAX, ReduceOp.PROD}) {
                            for (int rep = 0; rep < 4; rep++) {
                                int es = type.sizeBytes();
                                long seed = 40 + count + rep;
                                boolean zeroCopy = rep >= 2 || (r + rep) % 2 == 1;
                                MemorySegment in = zeroCopy ? c.allocate(count * es + 64).asSlice(64)
                                    : arena.allocate(count * es, 64);
                                MemorySegment out = rep == 3 && r == 1 ? arena.allocate(count * es, 64)
                                    : c.allocate(count * es + 128).asSlice(128);
                                fill(in, 0, count, seed, r, op, type);
                                long splitBefore = c.directAllReduce().splitAllReduces();
                                c.allReduce(in, out, count, type, op);
                                in.fill((byte) 0x5a);
                                check("pair out-of-place " + type + " " + op + " rep " + rep, out, 0, count, type,
                                    i -> expected(seed, 2, i, op, type));
                                assertEquals(rep == 2 ? 1 : 0, c.directAllReduce().splitAllReduces() - splitBefore,
                                    "split path taken in rep " + rep);
                                out.fill((byte) 0x5c);
                                fill(in, 0, count, seed + 1, r, op, type);
                                c.allReduce(in, in, count, type, op);
                                check("pair in-place " + type + " " + op + " rep " + rep, in, 0, count, type,
                                    i -> expected(seed + 1, 2, i, op, type));
                                in.fill((byte) 0x5b);
                            }
                        }
                    }
                }
            }
        });
    }

    /**
     * Two-rank direct all-reduce where one rank passes the same buffer as input and output (in place) and the other
     * two buffers, in both orders, with every mix of allocate() and arena memory: each rank's choice is its own (as
     * in NCCL), so the two ranks must still agree on one algorithm. Each rank overwrites its input (and, out of place,
     * its output) right after checking, so a peer still reading or writing them would corrupt the next result.
     */
    @Test
    void directTwoRankAllReduceInPlaceOnOneRankOnly() {
        Ranks.run(2, Ranks.loop().withAlgorithms("allreduce:direct").withDirectBytes(8192), c -> {
            int r = c.rank();
            try (Arena arena = Arena.ofConfined()) {
                for (long count : new long[] {9000, 70001}) {
                    for (int mix = 0; mix < 16; mix++) {
                        boolean inPlace = ((mix >> 3) & 1) == r; // mix bit 3 picks which rank works in place
                        boolean sharedIn = ((mix >> r) & 1) == 1;
                        boolean sharedOut = ((mix >> 2) & 1) == 1;
                        long bytes = count * 4;
                        long seed = 900 + count + mix;
                        MemorySegment in = sharedIn ? c.allocate(bytes + 64).asSlice(64) : arena.allocate(bytes, 64);
                        MemorySegment out = inPlace ? in
                            : sharedOut ? c.allocate(bytes + 128).asSlice(128) : arena.allocate(bytes, 64);
                        fill(in, 0, count, seed, r, ReduceOp.SUM, DataType.FLOAT32);
                        long splitBefore = c.directAllReduce().splitAllReduces();
                        c.allReduce(in, out, count, DataType.FLOAT32, ReduceOp.SUM);
                        check("mix " + mix + (inPlace ? " in place" : " out of place") + " count " + count, out, 0,
                            count, DataType.FLOAT32, i -> expected(seed, 2, i, ReduceOp.SUM, DataType.FLOAT32));
                        // all four buffers shared (the in-place rank's output is its shared input): the split path
                        assertEquals((mix & 7) == 7 ? 1 : 0, c.directAllReduce().splitAllReduces() - splitBefore,
                            "split path in mix " + mix);
                        in.fill((byte) 0x5d);
                        out.fill((byte) 0x5e);
                    }
                }
            }
        });
    }

    /**
     * Direct broadcast from a root whose buffer is allocate() memory (peers copy straight from it) or arena memory
     * (staged in rounds), out of place and in place, 2 and 3 ranks; the root overwrites its buffer right after the
     * call, so a root that returned while a peer still read its buffer would corrupt the peer's copy.
     */
    @Test
    void directBroadcastZeroCopyAndStaged() {
        for (int n : new int[] {2, 3}) {
            Ranks.run(n, Ranks.loop().withAlgorithms("broadcast:direct").withDirectBytes(16384), c -> {
                int r = c.rank();
                try (Arena arena = Arena.ofConfined()) {
                    for (long count : new long[] {100, 8192, 70001}) {
                        for (int root = 0; root < c.size(); root++) {
                            for (boolean zeroCopy : new boolean[] {true, false}) {
                                long bytes = count * 4;
                                long seed = 500 + count + root + (zeroCopy ? 1 : 0);
                                int rt = root;
                                MemorySegment send = zeroCopy ? c.allocate(bytes + 128).asSlice(128)
                                    : arena.allocate(bytes, 64);
                                MemorySegment recv = c.allocate(bytes);
                                recv.fill((byte) 0x11);
                                if (r == root) {
                                    fill(send, 0, count, seed, root, ReduceOp.SUM, DataType.INT32);
                                }
                                c.broadcast(send, recv, count, DataType.INT32, root);
                                if (r == root) {
                                    send.fill((byte) 0x77);
                                }
                                check("broadcast " + (zeroCopy ? "zero-copy" : "staged") + " root " + root
                                    + " count " + count, recv, 0, count, DataType.INT32,
                                    i -> value(seed, rt, i, ReduceOp.SUM, DataType.INT32));
                                MemorySegment buf = zeroCopy ? c.allocate(bytes) : arena.allocate(bytes, 64);
                                if (r == root) {
                                    fill(buf, 0, count, seed + 7, root, ReduceOp.SUM, DataType.INT32);
                                }
                                c.broadcast(buf, count, DataType.INT32, root);
                                if (r == root) {
                                    buf.fill((byte) 0x78);
                                } else {
                                    check("in-place broadcast " + (zeroCopy ? "zero-copy" : "staged") + " root "
                                        + root + " count " + count, buf, 0, count, DataType.INT32,
                                        i -> value(seed + 7, rt, i, ReduceOp.SUM, DataType.INT32));
                                }
                            }
                        }
                    }
                }
            });
        }
    }

    /**
     * Direct all-gather reading Communicator.allocate() inputs where they are (zero copy) over several staging
     * rounds, out of place and in place; odd ranks use arena memory (staged) in two repetitions of three, so both
     * kinds meet in one round; with every input zero copy (the third repetition and in place) all blocks are copied
     * in one round; the input is overwritten right after each call (a peer still reading it would see the new
     * values).
     */
    @Test
    void directAllGatherZeroCopyMixedWithStaged() {
        int n = 3;
        Ranks.run(n, Ranks.loop().withAlgorithms("allgather:direct").withDirectBytes(16384), c -> {
            int r = c.rank();
            try (Arena arena = Arena.ofConfined()) {
                for (long count : new long[] {8192, 8192 * 5 + 3, 70001}) {
                    for (int rep = 0; rep < 3; rep++) {
                        long bytes = count * 4;
                        long seed = 300 + count + rep;
                        // repetition 2: every input is allocate() memory (all blocks copied in one round)
                        MemorySegment in = r % 2 == 0 || rep == 2 ? c.allocate(bytes + 128).asSlice(128)
                            : arena.allocate(bytes, 64);
                        MemorySegment out = c.allocate(bytes * n);
                        fill(in, 0, count, seed, r, ReduceOp.SUM, DataType.INT32);
                        c.allGather(in, out, count, DataType.INT32);
                        in.fill((byte) 0x55);
                        for (int b = 0; b < n; b++) {
                            int bb = b;
                            check("zero-copy allGather block " + b + " count " + count, out, b * count, count,
                                DataType.INT32, i -> value(seed, bb, i, ReduceOp.SUM, DataType.INT32));
                        }
                        MemorySegment all = c.allocate(bytes * n);
                        fill(all, r * count, count, seed + 1, r, ReduceOp.SUM, DataType.INT32);
                        c.allGather(all.asSlice(r * bytes, bytes), all, count, DataType.INT32);
                        for (int b = 0; b < n; b++) {
                            int bb = b;
                            check("zero-copy allGather in place block " + b + " count " + count, all, b * count,
                                count, DataType.INT32, i -> value(seed + 1, bb, i, ReduceOp.SUM, DataType.INT32));
                        }
                        all.asSlice(r * bytes, bytes).fill((byte) 0x66);
                    }
                }
            }
        });
    }

    /** A few MiB through every all-reduce algorithm (multi-chunk, multi-round staging). */
    @Test
    void fewMebibytes() {
        long count = (3L << 20) / 4 + 7; // ~3 MiB of float32
        for (String algo : new String[] {"ring", "tree", "rhd", "rd", "direct"}) {
            Ranks.run(3, Ranks.loop().withAlgorithms("allreduce:" + algo), c -> {
                try (Arena arena = Arena.ofConfined()) {
                    MemorySegment buf = arena.allocate(count * 4);
                    fill(buf, 0, count, 5, c.rank(), ReduceOp.SUM, DataType.FLOAT32);
                    c.allReduce(buf, count, DataType.FLOAT32, ReduceOp.SUM);
                    check(algo + " 3 MiB", buf, 0, count, DataType.FLOAT32,
                        i -> expected(5, 3, i, ReduceOp.SUM, DataType.FLOAT32));
                }
            });
        }
    }

    @Test
    void asyncOperationsCompleteInIssueOrder() {
        Ranks.run(3, Ranks.loop(), c -> {
            try (Arena arena = Arena.ofShared()) {
                int count = 5000;
                MemorySegment buf = arena.allocate(count * 4L);
                fill(buf, 0, count, 3, c.rank(), ReduceOp.SUM, DataType.INT32);
                var f1 = c.allReduceAsync(buf, buf, count, DataType.INT32, ReduceOp.SUM);
                var f2 = c.allReduceAsync(buf, buf, count, DataType.INT32, ReduceOp.SUM);
                c.allReduce(buf, count, DataType.INT32, ReduceOp.SUM); // blocking, after both
                var f3 = c.barrierAsync();
                f1.get();
                f2.get();
                f3.get();
                // ((sum) * n) * n
                check("async order", buf, 0, count, DataType.INT32,
                    i -> expected(3, 3, i, ReduceOp.SUM, DataType.INT32) * 9);
            }
        });
    }

    @Test
    void everyAsyncVariant() {
        Ranks.run(3, Ranks.loop(), c -> {
            int n = c.size();
            int r = c.rank();
            try (Arena arena = Arena.ofShared()) {
                long count = 777;
                DataType t = DataType.INT32;
                MemorySegment in = arena.allocate(count * 4 * n);
                MemorySegment out = arena.allocate(count * 4 * n);
                MemorySegment one = arena.allocate(count * 4);
                for (long i = 0; i < count * n; i++) {
                    KernelsTest.set(t, in, i, value(9, r, i, ReduceOp.SUM, t));
                }
                c.allGatherAsync(in.asSlice(0, count * 4), out, count, t).get();
                for (int b = 0; b < n; b++) {
                    int bb = b;
                    check("allGatherAsync", out, b * count, count, t, i -> value(9, bb, i, ReduceOp.SUM, t));
                }
                c.reduceScatterAsync(in, one, count, t, ReduceOp.SUM).get();
                check("reduceScatterAsync", one, 0, count, t, i -> expected(9, n, r * count + i, ReduceOp.SUM, t));
                c.allToAllAsync(in, out, count, t).get();
                for (int j = 0; j < n; j++) {
                    int jj = j;
                    check("allToAllAsync", out, j * count, count, t, i -> value(9, jj, r * count + i, ReduceOp.SUM, t));
                }
                c.broadcastAsync(in, one, count, t, 1).get();
                check("broadcastAsync", one, 0, count, t, i -> value(9, 1, i, ReduceOp.SUM, t));
                c.reduceAsync(in, one, count, t, ReduceOp.MAX, 2).get();
                if (r == 2) {
                    check("reduceAsync", one, 0, count, t, i -> expected(9, n, i, ReduceOp.MAX, t));
                }
                c.gatherAsync(in.asSlice(0, count * 4), out, count, t, 0).get();
                if (r == 0) {
                    for (int b = 0; b < n; b++) {
                        int bb = b;
                        check("gatherAsync", out, b * count, count, t, i -> value(9, bb, i, ReduceOp.SUM, t));
                    }
                }
                c.scatterAsync(in, one, count, t, 0).get();
                check("scatterAsync", one, 0, count, t, i -> value(9, 0, r * count + i, ReduceOp.SUM, t));
            }
        });
    }

    @Test
    void sendRecvGroupsAndWindows() {
        Ranks.run(4, Ranks.loop(), c -> {
            int n = c.size();
            int r = c.rank();
            try (Arena arena = Arena.ofConfined()) {
                long count = 3000;
                MemorySegment out = arena.allocate(count * 4);
                MemorySegment fromLeft = arena.allocate(count * 4);
                MemorySegment fromRight = arena.allocate(count * 4);
                fill(out, 0, count, 77, r, ReduceOp.SUM, DataType.INT32);
                c.groupStart();
                c.send(out, count, DataType.INT32, (r + 1) % n);
                c.send(out, count, DataType.INT32, (r + n - 1) % n);
                c.recv(fromLeft, count, DataType.INT32, (r + n - 1) % n);
                c.recv(fromRight, count, DataType.INT32, (r + 1) % n);
                c.groupEnd();
                check("recv from left", fromLeft, 0, count, DataType.INT32,
                    i -> value(77, (r + n - 1) % n, i, ReduceOp.SUM, DataType.INT32));
                check("recv from right", fromRight, 0, count, DataType.INT32,
                    i -> value(77, (r + 1) % n, i, ReduceOp.SUM, DataType.INT32));
                // blocking pairwise send/recv between 0 and 1 only; the others go on with a collective later
                if (r == 0) {
                    c.send(MemorySegment.ofArray(new int[] {42, 43}), 2, DataType.INT32, 1);
                } else if (r == 1) {
                    int[] got = new int[2];
                    c.recv(MemorySegment.ofArray(got), 2, DataType.INT32, 0);
                    assertEquals(43, got[1]);
                }
                // windows: everyone puts its rank into slot r of rank 0's window, then rank 0 waits
                try (Window w = c.window(8L * n)) {
                    MemorySegment one = arena.allocate(8);
                    one.set(java.lang.foreign.ValueLayout.JAVA_LONG, 0, 100 + r);
                    if (r != 0) {
                        w.putSignal(0, one, 0, 8, 8L * r);
                    } else {
                        for (int j = 1; j < n; j++) {
                            w.waitSignal(j, 1);
                            assertEquals(100 + j, w.segment().get(java.lang.foreign.ValueLayout.JAVA_LONG, 8L * j));
                        }
                    }
                    c.barrier();
                }
                c.allReduce(out, count, DataType.INT32, ReduceOp.SUM);
                check("allReduce after p2p", out, 0, count, DataType.INT32,
                    i -> expected(77, n, i, ReduceOp.SUM, DataType.INT32));
            }
        });
    }

    @Test
    void splitMakesIndependentCommunicators() {
        Ranks.run(5, Ranks.loop(), c -> {
            int color = c.rank() % 2;
            try (Communicator sub = c.split(color, -c.rank())) {
                assertEquals(color == 0 ? 3 : 2, sub.size());
                int[] v = {c.rank()};
                sub.allReduce(v, ReduceOp.SUM);
                assertEquals(color == 0 ? 0 + 2 + 4 : 1 + 3, v[0]);
                int[] top = {c.rank()};
                sub.broadcast(MemorySegment.ofArray(top), 1, DataType.INT32, 0);
                assertEquals(color == 0 ? 4 : 3, top[0], "key -rank puts the highest rank first");
            }
            assertEquals(null, c.split(Communicator.UNDEFINED, 0) == null ? null : "x");
            c.barrier();
        });
    }
}
