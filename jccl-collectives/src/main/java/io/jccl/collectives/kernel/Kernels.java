package io.jccl.collectives.kernel;

import io.jccl.collectives.DataType;
import io.jccl.collectives.ReduceOp;
import io.jccl.common.Config;
import io.jccl.common.Log;

import java.lang.foreign.MemorySegment;

/**
 * Picks the reduction kernels once per JVM: the Vector API kernels when the {@code jdk.incubator.vector} module is
 * in the boot layer (start the JVM with {@code --add-modules jdk.incubator.vector}) and {@code JCCL_VECTOR} is not
 * 0; otherwise the scalar kernels, with one warning saying how to turn the fast kernels on.
 *
 * <p>The choice is made at the first reduction, not when {@link #get()} is called: loading the Vector API (about
 * a hundred classes and their species tables) costs 30-50 ms of start-up, which a communicator that only
 * synchronises or moves data never needs. {@link #get()} returns a forwarder whose calls go to the selected
 * kernels through a constant the JIT folds, so the hot path sees the real implementation.
 */
public final class Kernels {
    private static final ReduceKernels SCALAR = new ScalarKernels();
    private static final ReduceKernels LAZY = new Deferred();
    private static volatile boolean selected;

    private Kernels() {
    }

    /** The kernels in use (selected at the first call that reduces). */
    public static ReduceKernels get() {
        return LAZY;
    }

    /** The kernels in use, selecting them now. */
    public static ReduceKernels selected() {
        return Selection.SELECTED;
    }

    /** The scalar kernels (the reference). */
    public static ReduceKernels scalar() {
        return SCALAR;
    }

    /** The vector kernels, or null when the Vector API module is absent. */
    public static ReduceKernels vector() {
        return Selection.VECTOR;
    }

    /** Whether the choice has been made (the Vector API loaded, when it is used). For tests. */
    static boolean isSelected() {
        return selected;
    }

    /** Whether the Vector API kernels would be chosen (without loading them). */
    private static boolean vectorWanted() {
        return ModuleLayer.boot().findModule("jdk.incubator.vector").isPresent()
            && !Config.value("JCCL_VECTOR", "1").equals("0");
    }

    /** Holder: initialised by the first reduction (or {@link #selected()}/{@link #vector()}). */
    private static final class Selection {
        static final ReduceKernels VECTOR = loadVector();
        static final ReduceKernels SELECTED = select();

        static {
            selected = true;
        }

        private Selection() {
        }
    }

    /** Forwards to {@link Selection#SELECTED}. */
    private static final class Deferred implements ReduceKernels {
        @Override
        public String name() {
            // Without forcing the Vector API in: the scalar choice is free to make (and warns at once, as before).
            return selected || !vectorWanted() ? Selection.SELECTED.name() : "vector (loaded at the first reduction)";
        }

        @Override
        public void reduce(DataType type, ReduceOp op, MemorySegment[] sources, long[] sourceOffsets, int sourceCount,
                           MemorySegment dst, long dstOffset, long count, int divisor) {
            Selection.SELECTED.reduce(type, op, sources, sourceOffsets, sourceCount, dst, dstOffset, count, divisor);
        }

        @Override
        public void reduce(DataType type, ReduceOp op, MemorySegment a, long aOffset, MemorySegment b, long bOffset,
                           MemorySegment dst, long dstOffset, long count, int divisor) {
            Selection.SELECTED.reduce(type, op, a, aOffset, b, bOffset, dst, dstOffset, count, divisor);
        }

        @Override
        public void divide(DataType type, MemorySegment segment, long offset, long count, int divisor) {
            Selection.SELECTED.divide(type, segment, offset, count, divisor);
        }

        @Override
        public String toString() {
            return name();
        }
    }

    private static ReduceKernels loadVector() {
        if (ModuleLayer.boot().findModule("jdk.incubator.vector").isEmpty()) {
            return null;
        }
        try {
            // Reflective, so VectorKernels (which links against jdk.incubator.vector) is never loaded without it.
            return (ReduceKernels) Class.forName("io.jccl.collectives.kernel.VectorKernels")
                .getDeclaredConstructor().newInstance();
        } catch (ReflectiveOperationException | LinkageError e) {
            Log.get().warn(-1, Log.Subsys.INIT, "vector reduction kernels failed to load (" + e + ")");
            return null;
        }
    }

    private static ReduceKernels select() {
        ReduceKernels vector = Selection.VECTOR;
        if (vector == null) {
            Log.get().warn(-1, Log.Subsys.INIT, "fast (Vector API) reduction kernels are off: module "
                + "jdk.incubator.vector is not loaded; start the JVM with --add-modules jdk.incubator.vector "
                + "(reductions run 2-5x slower with the scalar kernels)");
            return SCALAR;
        }
        if (Config.value("JCCL_VECTOR", "1").equals("0")) {
            Log.get().info(-1, Log.Subsys.INIT, "JCCL_VECTOR=0: using scalar reduction kernels");
            return SCALAR;
        }
        Log.get().info(-1, Log.Subsys.INIT, () -> "reduction kernels: " + vector.name());
        return vector;
    }
}
