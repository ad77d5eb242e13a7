package io.jccl.transport.shm;

import io.jccl.verbs.Context;
import io.jccl.verbs.Verbs;

import java.nio.file.Files;
import java.util.ArrayList;
import java.util.List;

/**
 * Start-up cost of reaping (docs/transport-shm.md, "Cleanup and reaping"), in a fresh JVM per measurement.
 *
 * <p>{@code hold <owners> <files per owner>}: stands in for live processes: creates and locks that many lock files
 * (the locks are this process's) with their files, prints {@code READY}, and keeps them until stdin closes.
 * {@code reap}: times the first (cold) and a second {@link ShmFiles#reap}. {@code open}: times the first
 * {@code shm0} open (which reaps and creates this process's lock and context files) and its close.
 */
public final class ShmReapProbe {
    private ShmReapProbe() {
    }

    /** Entry point. */
    public static void main(String[] args) throws Exception {
        switch (args[0]) {
            case "hold" -> hold(Integer.parseInt(args[1]), Integer.parseInt(args[2]));
            case "reap" -> {
                long t0 = System.nanoTime();
                int removed = ShmFiles.reap();
                long t1 = System.nanoTime();
                ShmFiles.reap();
                long t2 = System.nanoTime();
                System.out.printf("reap cold %.3f ms warm %.3f ms removed %d%n", (t1 - t0) / 1e6, (t2 - t1) / 1e6,
                    removed);
            }
            case "open" -> {
                long t0 = System.nanoTime();
                Context context = Verbs.device("shm0").open();
                long t1 = System.nanoTime();
                context.close();
                long t2 = System.nanoTime();
                System.out.printf("open %.3f ms close %.3f ms%n", (t1 - t0) / 1e6, (t2 - t1) / 1e6);
            }
            default -> throw new IllegalArgumentException(args[0]);
        }
    }

    private static void hold(int owners, int filesPerOwner) throws Exception {
        List<OwnerLock> locks = new ArrayList<>();
        for (int i = 0; i < owners; i++) {
            OwnerLock lock = OwnerLock.create(ShmFiles.DIRECTORY, ShmFiles.selfPid());
            locks.add(lock);
            for (int f = 0; f < filesPerOwner; f++) {
                String kind = f == 0 ? ShmFiles.CONTEXT : f % 2 == 0 ? ShmFiles.REGION : ShmFiles.QUEUE_PAIR;
                Files.createFile(ShmFiles.DIRECTORY.resolve(ShmFiles.name(lock.pid, lock.ownerId,
                    ShmFiles.newFileId(), kind)));
            }
        }
        System.out.println("READY " + locks.size());
        System.out.flush();
        while (System.in.read() >= 0) {
            Thread.onSpinWait();
        }
        for (OwnerLock lock : locks) {
            String prefix = ShmFiles.lockName(lock.pid, lock.ownerId).replace(OwnerLock.KIND, "");
            try (var entries = Files.newDirectoryStream(ShmFiles.DIRECTORY, prefix + "*")) {
                for (var entry : entries) {
                    Files.deleteIfExists(entry);
                }
            }
        }
    }
}
