package io.jccl.tools.launcher;

import java.lang.management.ManagementFactory;

/** Test program for {@link AotCacheTest}: prints the AOT options its JVM was started with. */
public final class AotProbeMain {
    private AotProbeMain() {
    }

    /** Prints "aot-args=" and the -XX:AOT options, one line. */
    public static void main(String[] args) {
        StringBuilder sb = new StringBuilder("aot-args=");
        for (String a : ManagementFactory.getRuntimeMXBean().getInputArguments()) {
            if (a.startsWith("-XX:AOT")) {
                sb.append(a).append(' ');
            }
        }
        Runnable r = () -> System.out.println(sb.toString().trim() + " rank=" + System.getenv("JCCL_RANK"));
        r.run();
    }
}
