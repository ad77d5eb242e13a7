package io.jccl.benchmarks;

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
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.util.concurrent.TimeUnit;

/**
 * Bulk copy of {@code bytes} between two page-aligned off-heap segments: {@link MemorySegment#copy} against a
 * downcall to libc {@code memcpy} (a critical downcall: no thread-state transition). The C ceiling is
 * {@code memcpy_bw} ({@code ../shared/peers/src/memcpy_bw.c}, same sizes, 1 thread). One operation reads and writes
 * {@code bytes}: GB/s (read+written) = 2 × bytes × ops/s / 1e9; {@code memcpy_bw} prints bytes copied (half of that)
 * and {@code bench/kernels} converts.
 */
@State(Scope.Thread)
@BenchmarkMode(Mode.Throughput)
@OutputTimeUnit(TimeUnit.SECONDS)
@Fork(value = 1, jvmArgsAppend = {"--add-modules", "jdk.incubator.vector", "--enable-native-access=ALL-UNNAMED"})
@Warmup(iterations = 2, time = 1)
@Measurement(iterations = 3, time = 1)
public class CopyBench {
    private static final MethodHandle MEMCPY = Linker.nativeLinker().downcallHandle(
        Linker.nativeLinker().defaultLookup().find("memcpy").orElseThrow(),
        FunctionDescriptor.of(ValueLayout.ADDRESS, ValueLayout.ADDRESS, ValueLayout.ADDRESS, ValueLayout.JAVA_LONG),
        Linker.Option.critical(false));

    /** Bytes copied per operation (1 MiB, 16 MiB, 256 MiB, as memcpy_bw). */
    @Param({"1048576", "16777216", "268435456"})
    public long bytes;

    private Arena arena;
    private MemorySegment src;
    private MemorySegment dst;

    /** Allocates (and so touches: Arena zeroes) both buffers. */
    @Setup(Level.Trial)
    public void setUp() {
        arena = Arena.ofShared();
        src = arena.allocate(bytes, 4096);
        dst = arena.allocate(bytes, 4096);
        src.fill((byte) 1);
    }

    /** Frees the buffers. */
    @TearDown(Level.Trial)
    public void tearDown() {
        arena.close();
    }

    /** MemorySegment.copy (JDK intrinsic bulk copy). */
    @Benchmark
    public void segmentCopy() {
        MemorySegment.copy(src, 0, dst, 0, bytes);
    }

    /** FFM downcall to glibc memcpy. */
    @Benchmark
    public MemorySegment memcpyDowncall() throws Throwable {
        return (MemorySegment) MEMCPY.invokeExact(dst, src, bytes);
    }
}
