package io.jccl.transport.shm;

import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.Context;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.ProtectionDomain;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.Verbs;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * The child of {@link ShmReapRaceTest}: creates its files while the test reaps in a loop, and says whether any went.
 *
 * <p>Arguments: the pause between creating the lock file and locking it (first attempt only, {@link
 * OwnerLock#pauseBeforeLockMsForTests}: it opens the window the creation protocol must close), and how long to keep
 * creating and freeing regions. Prints {@code ATTEMPTS <n>} once the context is open, then {@code OK <regions>} or
 * {@code MISSING <paths>}.
 */
public final class ShmReapRaceMain {
    private ShmReapRaceMain() {
    }

    /** Entry point. */
    public static void main(String[] args) throws Exception {
        OwnerLock.pauseBeforeLockMsForTests = Long.parseLong(args[0]);
        long churnNs = Long.parseLong(args[1]) * 1_000_000L;
        Context context = Verbs.device("shm0").open();
        ProtectionDomain pd = context.allocateProtectionDomain();
        CompletionQueue cq = context.createCompletionQueue(16);
        pd.createQueuePair(QueuePairInitAttributes.of(cq));
        System.out.println("ATTEMPTS " + OwnerLock.self().attempts);
        System.out.flush();
        List<Path> missing = new ArrayList<>();
        List<Path> kept = new ArrayList<>(ShmFiles.owned());
        kept.add(ShmFiles.lockFile());
        int regions = 0;
        long end = System.nanoTime() + churnNs;
        while (System.nanoTime() - end < 0 && missing.isEmpty()) {
            // Brand-new files, created while the test's reaper lists the directory.
            MemoryRegion region = pd.allocateMemory(4096, AccessFlag.LOCAL_WRITE);
            Path file = ((ShmMemoryRegion) region).path();
            Thread.onSpinWait();
            if (!Files.exists(file)) {
                missing.add(file);
            }
            region.close();
            regions++;
            for (Path path : kept) {
                if (!Files.exists(path)) {
                    missing.add(path);
                }
            }
        }
        System.out.println(missing.isEmpty() ? "OK " + regions : "MISSING " + missing);
        System.out.flush();
        context.close();
    }
}
