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

    private ProcessIds() {
    }

    /** This process's id. */
    public static long self() {
        return SELF;
    }

    private static long readSelf() {
        try {
            return Long.parseLong(Files.readSymbolicLink(Path.of("/proc/self")).toString());
        } catch (Exception | LinkageError e) {
            return ProcessHandle.current().pid();
        }
    }
}
