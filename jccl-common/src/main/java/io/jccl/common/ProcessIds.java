package io.jccl.common;

import java.nio.file.Files;
import java.nio.file.Path;

/**
 * This process's id, read once. On Linux from the {@code /proc/self} link: {@code ProcessHandle.current()} first
 * initialises the JDK's process machinery, which cost 8-9 ms of a fresh JVM's start-up on the reference machine
 * (0.07-0.19 ms for the link), on every rank's path to its first collective. Elsewhere, and if {@code /proc} is
 * missing, from {@code ProcessHandle}.
 */
public final class ProcessIds {
    private static final long SELF = readSelf();
    private static final String PID_NAMESPACE = readPidNamespace();

    private ProcessIds() {
    }

    /** This process's id. */
    public static long self() {
        return SELF;
    }

    /**
     * This process's PID namespace ({@code /proc/self/ns/pid}, like {@code pid:[4026531836]}), or "" where there is
     * none to read. Process ids name the same process only within one namespace: containers that share a host (and
     * its boot id) but not a PID namespace must not judge each other's liveness by pid.
     */
    public static String pidNamespace() {
        return PID_NAMESPACE;
    }

    private static String readPidNamespace() {
        try {
            return Files.readSymbolicLink(Path.of("/proc/self/ns/pid")).toString();
        } catch (Exception | LinkageError e) {
            return "";
        }
    }

    private static long readSelf() {
        try {
            return Long.parseLong(Files.readSymbolicLink(Path.of("/proc/self")).toString());
        } catch (Exception | LinkageError e) {
            return ProcessHandle.current().pid();
        }
    }
}
