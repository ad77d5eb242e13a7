package io.jccl.transport.shm;

import io.jccl.verbs.Device;
import io.jccl.verbs.spi.VerbsProvider;

import java.nio.file.Files;
import java.util.List;

/**
 * The shared-memory provider ({@code shm}): RC queue pairs between processes of one host over files in
 * {@code /dev/shm} mapped with FFM. See {@code docs/transport-shm.md}.
 */
public final class ShmProvider implements VerbsProvider {
    /** Provider name. */
    public static final String NAME = "shm";
    private static final List<Device> DEVICES = List.of(new ShmDevice());

    /**
     * Called by {@link java.util.ServiceLoader} (or by class name). Schedules one background reap for this JVM:
     * a process that lists devices but never opens {@code shm0} still removes the files of killed processes.
     */
    public ShmProvider() {
        ShmFiles.reapInBackground();
    }

    @Override
    public String name() {
        return NAME;
    }

    @Override
    public List<Device> devices() {
        // No device where the directory cannot hold our files (for example a sandbox without /dev/shm).
        return Files.isDirectory(ShmFiles.DIRECTORY) && Files.isWritable(ShmFiles.DIRECTORY) ? DEVICES : List.of();
    }

    @Override
    public int order() {
        return 10;
    }
}
