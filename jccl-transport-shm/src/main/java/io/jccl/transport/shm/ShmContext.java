package io.jccl.transport.shm;

import io.jccl.verbs.AtomicCapability;
import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.Counter;
import io.jccl.verbs.DeviceAttributes;
import io.jccl.verbs.LinkLayer;
import io.jccl.verbs.PathMtu;
import io.jccl.verbs.PortAttributes;
import io.jccl.verbs.PortState;
import io.jccl.verbs.VerbsException;
import io.jccl.verbs.spi.AbstractContext;
import io.jccl.verbs.spi.AbstractProtectionDomain;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * An open shm device. Owns the context control file {@code jccl-<pid>-<owner id>-<random>-ctx}, which holds the
 * shared rkey table ({@link ShmKeyTable}) that peers consult for every one-sided request. Opening and closing reap
 * the files of dead processes ({@link ShmFiles#reap}).
 */
public final class ShmContext extends AbstractContext {
    /** Largest message (completions report byte counts as int). */
    public static final long MAX_MESSAGE_SIZE = 1L << 30;
    /** Largest region. */
    public static final long MAX_REGION_SIZE = 1L << 40;
    /**
     * What the device promises for every region: atomics are atomic among verbs atomics (IBV_ATOMIC_HCA). Regions
     * from allocateMemory do better (VarHandle atomics on the shared mapping are atomic against CPU atomics too,
     * GLOB); registered caller memory gets a locked cross-memory-attach read-modify-write.
     */
    public static final AtomicCapability ATOMIC_CAPABILITY = AtomicCapability.ATOMIC_HCA;

    private final Arena arena = Arena.ofShared();
    private final long fileId = ShmFiles.newFileId();
    private final String fileName = ShmFiles.name(fileId, ShmFiles.CONTEXT);
    private final Path path = ShmFiles.DIRECTORY.resolve(fileName);
    private final ShmKeyTable keyTable;
    private final Doorbell doorbell;
    private final DeviceAttributes attributes;
    private final List<ShmCompletionQueue> completionQueues = new ArrayList<>();

    ShmContext(ShmDevice device) {
        super(device);
        // Why here: a process killed -9 never ran its shutdown hook; the next process to open the device cleans up.
        // Only owners whose lock is free go (OwnerLock): live processes of other PID namespaces keep their files.
        ShmFiles.reap();
        MemorySegment file;
        try {
            file = ShmFiles.createAndMap(path, ShmKeyTable.FILE_SIZE, arena);
        } catch (RuntimeException e) {
            arena.close();
            throw e;
        }
        keyTable = new ShmKeyTable(file);
        keyTable.format(ShmFiles.selfPid(), ShmFiles.selfOwnerId(), ShmFiles.pidNamespace());
        doorbell = new Doorbell(file);
        NativeWarmup.start();
        attributes = new DeviceAttributes(device.name(), ShmProvider.NAME, "shared memory (JCCL shm)", "1.0",
            device.guid(), 0x4A43, 1, 1, MAX_REGION_SIZE, 4096, 4096, 16384, 16, 4096, 1 << 20,
            ShmKeyTable.CAPACITY / 2, 4096, 16, 16, 1024, ATOMIC_CAPABILITY,
            List.of(new PortAttributes(1, PortState.ACTIVE, PathMtu.MTU_4096, PathMtu.MTU_4096,
                LinkLayer.MEMORY.displayName(),
                MAX_MESSAGE_SIZE, "boot_id:" + ShmFiles.bootId())));
    }

    @Override
    public DeviceAttributes query() {
        return attributes;
    }

    /**
     * Creates a completion queue whose blocking poll sleeps on this context's doorbell (see
     * {@link ShmCompletionQueue}).
     */
    @Override
    public synchronized CompletionQueue createCompletionQueue(int capacity) {
        ensureOpen();
        int max = attributes.maxCompletionQueueEntries();
        if (capacity < 1 || capacity > max) {
            throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT,
                "completion queue capacity " + capacity + " outside 1.." + max);
        }
        ShmCompletionQueue queue = new ShmCompletionQueue(this, capacity, doorbell);
        completionQueues.add(queue);
        return queue;
    }

    /**
     * The counters, including those that peers add to this context's file for events this context saw as a
     * responder without its CPU taking part (remote access errors, RNR NAKs).
     */
    @Override
    public Map<Counter, Long> counters() {
        Map<Counter, Long> snapshot = super.counters();
        snapshot.merge(Counter.REMOTE_ACCESS_ERRORS,
            keyTable.ownerCounter(ShmKeyTable.COUNTER_REMOTE_ACCESS_ERRORS), Long::sum);
        snapshot.merge(Counter.SEND_RNR_ERR, keyTable.ownerCounter(ShmKeyTable.COUNTER_SEND_RNR), Long::sum);
        return snapshot;
    }

    @Override
    protected AbstractProtectionDomain newProtectionDomain() {
        return new ShmProtectionDomain(this);
    }

    /** The shared rkey table. */
    ShmKeyTable keyTable() {
        return keyTable;
    }

    /** The context's doorbell (for tests). */
    Doorbell doorbell() {
        return doorbell;
    }

    /** Name of the control file (part of every endpoint address). */
    String fileName() {
        return fileName;
    }

    /** Path of the control file. */
    public Path path() {
        return path;
    }

    @Override
    protected void closeProvider() {
        synchronized (this) {
            for (ShmCompletionQueue queue : completionQueues) {
                try {
                    queue.close();
                } catch (VerbsException ignored) {
                    // queue pairs are gone by now; nothing else can hold the queue
                }
            }
            completionQueues.clear();
        }
        ShmFiles.delete(path);
        arena.close();
        // Leftovers of processes killed while this context ran go now, not at some later job's open.
        ShmFiles.reap();
    }
}
