package io.jccl.common;

/**
 * Whether the JVM lets JCCL use restricted methods of the foreign-function API (mapping memory, calling libc), and
 * what to say when it does not. JDK 25 denies them with {@code --illegal-native-access=deny}, and future JDKs will by
 * default, unless {@code --enable-native-access} names the code: {@code ALL-UNNAMED} for JCCL on the class path, the
 * module names on the module path. Without this, a denial surfaced as whatever failed first (a shared-memory file
 * "full or not writable?").
 */
public final class NativeAccess {
    /**
     * Invocations of a method handle (a downcall among them) from code not yet compiled after which the JDK
     * "customizes" it: generates and loads bytecode for that handle, ~64 KiB of allocation and a class load, on the
     * thread that makes the next call ({@code java.lang.invoke.MethodHandleStatics.CUSTOMIZE_THRESHOLD}, 127). A
     * downcall that a data path makes only on rare occasions (a poller's wait) reaches it at any moment, minutes into
     * a stream, on an application thread that allocates nothing otherwise; such handles are called this many times
     * plus one, harmlessly, where they are linked.
     */
    public static final int CUSTOMIZE_AFTER_CALLS = 127;

    private NativeAccess() {
    }

    /** Whether {@code t} or one of its causes is the JVM refusing native access. */
    public static boolean isDenial(Throwable t) {
        for (Throwable c = t; c != null; c = c.getCause() == c ? null : c.getCause()) {
            if (c instanceof IllegalCallerException && c.getMessage() != null
                && c.getMessage().toLowerCase(java.util.Locale.ROOT).contains("native access")) {
                return true;
            }
        }
        return false;
    }

    /** The flag that grants {@code module} native access: {@code --enable-native-access=ALL-UNNAMED} or its name. */
    public static String flagFor(Module module) {
        return "--enable-native-access=" + (module.isNamed() ? module.getName() : "ALL-UNNAMED");
    }

    /** One sentence naming the missing flag for {@code module}. */
    public static String explain(Module module) {
        return "the JVM denies native access to " + (module.isNamed() ? "module " + module.getName()
            : "the class path (the unnamed module)") + ", which JCCL needs for shared memory and system calls: start "
            + "java with " + flagFor(module) + (module.isNamed() ? " (and the other jccl modules)" : "")
            + " (this JVM runs with --illegal-native-access=deny, the default of future JDKs)";
    }
}
