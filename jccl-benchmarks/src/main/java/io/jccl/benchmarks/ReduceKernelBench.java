package io.jccl.benchmarks;

import io.jccl.collectives.DataType;
import io.jccl.collectives.ReduceOp;
import io.jccl.collectives.kernel.Kernels;
import io.jccl.collectives.kernel.ReduceKernels;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.concurrent.TimeUnit;

/**
 * In-place sum reduction {@code a[i] += b[i]} with the collectives kernels, the operation the C ceiling
 * {@code reduce_bw} measures ({@code ../shared/peers/src/reduce_bw.c}). {@code bytes} is the size of ONE array;
 * one operation reads a and b and writes a, so GB/s (read+written) = 3 × bytes × ops/s / 1e9. {@code bench/kernels}
 * does that conversion and prints the table next to the C numbers measured in the same run.
 *
 * <p>{@code impl}: {@code vector} = {@link Kernels#vector()} (what {@link Kernels#get()} selects when
 * {@code jdk.incubator.vector} is loaded), {@code scalar} = {@link Kernels#scalar()} (the reference loops).
 */
@State(Scope.Thread)
@BenchmarkMode(Mode.Throughput)
@OutputTimeUnit(TimeUnit.SECONDS)
@Fork(value = 1, jvmArgsAppend = {"--add-modules", "jdk.incubator.vector", "--enable-native-access=ALL-UNNAMED"})
@Warmup(iterations = 2, time = 1)
@Measurement(iterations = 3, time = 1)
public class ReduceKernelBench {
    /** Element type: fp32, bf16 or fp16. */
    @Param({"fp32", "bf16", "fp16"})
    public String type;

    /** Bytes of one array (1 MiB, 16 MiB, 64 MiB). */
    @Param({"1048576", "16777216", "67108864"})
    public long bytes;

    /** Kernel set: vector or scalar. */
    @Param({"vector"})
    public String impl;

    private Arena arena;
    private MemorySegment a;
    private MemorySegment b;
    private DataType dataType;
    private ReduceKernels kernels;
    private long count;

    /** Allocates page-aligned arrays and fills them with small values (no overflow, no denormals). */
    @Setup(Level.Trial)
    public void setUp() {
        dataType = DataType.parse(type);
        kernels = switch (impl) {
            case "vector" -> {
                ReduceKernels v = Kernels.vector();
                if (v == null) {
                    throw new IllegalStateException("Vector API kernels unavailable: start the JVM with "
                        + "--add-modules jdk.incubator.vector");
                }
                yield v;
            }
            case "scalar" -> Kernels.scalar();
            default -> throw new IllegalArgumentException("impl must be vector or scalar: " + impl);
        };
        arena = Arena.ofShared();
        a = arena.allocate(bytes, 4096);
        b = arena.allocate(bytes, 4096);
        count = bytes / dataType.sizeBytes();
        fill(a, 0.0f);
        fill(b, 1.0e-3f);
    }

    private void fill(MemorySegment s, float v) {
        switch (dataType) {
            case FLOAT32 -> {
                for (long i = 0; i < count; i++) {
                    s.setAtIndex(ValueLayout.JAVA_FLOAT, i, v);
                }
            }
            case BFLOAT16 -> {
                short bits = (short) (Float.floatToRawIntBits(v) >>> 16);
                for (long i = 0; i < count; i++) {
                    s.setAtIndex(ValueLayout.JAVA_SHORT, i, bits);
                }
            }
            case FLOAT16 -> {
                short bits = Float.floatToFloat16(v);
                for (long i = 0; i < count; i++) {
                    s.setAtIndex(ValueLayout.JAVA_SHORT, i, bits);
                }
            }
            default -> throw new IllegalArgumentException("type must be fp32, bf16 or fp16: " + type);
        }
    }

    /** Frees the arrays. */
    @TearDown(Level.Trial)
    public void tearDown() {
        arena.close();
    }

    /** One pass a += b over the whole array. */
    @Benchmark
    public void sumInPlace() {
        kernels.reduce(dataType, ReduceOp.SUM, a, 0, b, 0, a, 0, count, 1);
    }
}
