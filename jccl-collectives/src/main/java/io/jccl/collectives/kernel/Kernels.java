package io.jccl.collectives.kernel;

import io.jccl.collectives.internal.Log;
import io.jccl.verbs.spi.Config;

/**
 * Picks the reduction kernels once per JVM: the Vector API kernels when the {@code jdk.incubator.vector} module is
 * in the boot layer (start the JVM with {@code --add-modules jdk.incubator.vector}) and {@code JCCL_VECTOR} is not
 * 0; otherwise the scalar kernels, with one warning saying how to turn the fast kernels on.
 */
public final class Kernels {
    private static final ReduceKernels SCALAR = new ScalarKernels();
    private static final ReduceKernels VECTOR = loadVector();
    private static final ReduceKernels SELECTED = select();

    private Kernels() {
    }

    /** The kernels in use. */
    public static ReduceKernels get() {
        return SELECTED;
    }

    /** The scalar kernels (the reference). */
    public static ReduceKernels scalar() {
        return SCALAR;
    }

    /** The vector kernels, or null when the Vector API module is absent. */
    public static ReduceKernels vector() {
        return VECTOR;
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
        if (VECTOR == null) {
            Log.get().warn(-1, Log.Subsys.INIT, "fast (Vector API) reduction kernels are off: module "
                + "jdk.incubator.vector is not loaded; start the JVM with --add-modules jdk.incubator.vector "
                + "(reductions run 2-5x slower with the scalar kernels)");
            return SCALAR;
        }
        if (Config.value("JCCL_VECTOR", "1").equals("0")) {
            Log.get().info(-1, Log.Subsys.INIT, "JCCL_VECTOR=0: using scalar reduction kernels");
            return SCALAR;
        }
        Log.get().info(-1, Log.Subsys.INIT, "reduction kernels: " + VECTOR.name());
        return VECTOR;
    }
}
