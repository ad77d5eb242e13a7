package io.jccl.verbs.spi;

import io.jccl.common.ProcessIds;
import io.jccl.verbs.Counter;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A context's counters as a file that other processes can map and read:
 * {@code jccl-counters.PID.DEVICE.N.nsPIDNS} in {@code /dev/shm} (else the temporary directory;
 * {@code JCCL_COUNTERS_DIR} overrides, {@code JCCL_COUNTERS=0} turns publishing off). Mode 0600: only the same user (or root) can read it. Counter names are written into the header,
 * so a reader of another JCCL version matches counters by name, not by position.
 *
 * <pre>
 *   0  magic "JCCLCNT1" (u64)      8  version (u32)        12 counters (u32)       16 pid (u64)
 *  24  block bytes (u32)          28  capacity (u32)      32 blocks in use (u32, volatile)
 *  40  start time ms (u64)        64  device name (64 B, UTF-8, NUL padded)
 * 128  counter names (comma separated, UTF-8, NUL padded, up to 896 B)
 * 1024 blocks: block 0 (atomic adds from any thread), then one block per {@link CounterSet.Local}
 * </pre>
 *
 * The file is deleted when its context closes, or at JVM exit; files of processes that died (kill -9) are removed by
 * the next process that publishes counters and by every reader.
 */
public final class CounterFile {
    private static final long MAGIC = 0x31544e434c43434aL; // "JCCLCNT1" little-endian
    private static final int VERSION = 1;
    private static final long HEADER_BYTES = 1024;
    private static final int CAPACITY = 1024;
    private static final String PREFIX = "jccl-counters.";
    private static final AtomicInteger SEQUENCE = new AtomicInteger();
    private static final java.util.concurrent.atomic.AtomicBoolean HOUSEKEEPING =
        new java.util.concurrent.atomic.AtomicBoolean();

    private final Path path;
    private final MemorySegment header;

    private CounterFile(Path path, MemorySegment header) {
        this.path = path;
        this.header = header;
    }

    /** The file's path. */
    public Path path() {
        return path;
    }

    /** The directory counter files go to. */
    public static Path directory() {
        String configured = System.getenv("JCCL_COUNTERS_DIR");
        if (configured != null && !configured.isBlank()) {
            return Path.of(configured);
        }
        Path shm = Path.of("/dev/shm");
        return Files.isDirectory(shm) && Files.isWritable(shm) ? shm : Path.of(System.getProperty("java.io.tmpdir"));
    }

    /** A counter set published in a new file for {@code deviceName}, or null when publishing is off or fails. */
    static CounterSet create(String deviceName) {
        if ("0".equals(System.getenv("JCCL_COUNTERS"))) {
            return null;
        }
        long pid = ProcessIds.self();
        if (HOUSEKEEPING.compareAndSet(false, true)) {
            startHousekeeping(pid);
        }
        String safeName = safeFileName(deviceName);
        Path path = directory().resolve(PREFIX + pid + "." + safeName + "." + SEQUENCE.incrementAndGet()
            + NAMESPACE_TAG);
        try {
            Files.deleteIfExists(path);
            Files.createFile(path, PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------")));
            long size = HEADER_BYTES + CounterSet.BLOCK_BYTES * CAPACITY;
            MemorySegment mapping;
            try (FileChannel channel = FileChannel.open(path, StandardOpenOption.READ, StandardOpenOption.WRITE)) {
                channel.truncate(size);
                // An automatic arena: a late counter update from a closing provider thread must never fault.
                mapping = channel.map(FileChannel.MapMode.READ_WRITE, 0, size, Arena.ofAuto());
            }
            MemorySegment header = mapping.asSlice(0, HEADER_BYTES);
            header.set(ValueLayout.JAVA_INT_UNALIGNED, 8, VERSION);
            header.set(ValueLayout.JAVA_INT_UNALIGNED, 12, CounterSet.COUNTERS);
            header.set(ValueLayout.JAVA_LONG_UNALIGNED, 16, pid);
            header.set(ValueLayout.JAVA_INT_UNALIGNED, 24, (int) CounterSet.BLOCK_BYTES);
            header.set(ValueLayout.JAVA_INT_UNALIGNED, 28, CAPACITY);
            header.set(ValueLayout.JAVA_INT_UNALIGNED, 32, 1);
            header.set(ValueLayout.JAVA_LONG_UNALIGNED, 40, System.currentTimeMillis());
            putString(header, 64, 64, deviceName);
            StringBuilder names = new StringBuilder();
            for (Counter c : Counter.values()) {
                names.append(names.isEmpty() ? "" : ",").append(c.linuxName());
            }
            putString(header, 128, (int) (HEADER_BYTES - 128), names.toString());
            // The magic last, with release semantics: a reader that sees it (acquire) sees a complete header.
            ValueLayout.JAVA_LONG.varHandle().setRelease(header, 0L, MAGIC);
            CounterFile file = new CounterFile(path, header);
            return new CounterSet(mapping.asSlice(HEADER_BYTES), file);
        } catch (IOException | RuntimeException e) {
            try {
                Files.deleteIfExists(path);
            } catch (IOException ignored) {
                // nothing more to do: the counters stay in this process
            }
            return null;
        }
    }

    /**
     * Once per process: this process's files go at JVM exit even when contexts are never closed, and files of
     * processes that died without exiting (kill -9) are removed, off the creating thread (a directory scan).
     */
    private static void startHousekeeping(long pid) {
        Path dir = directory();
        try {
            Runtime.getRuntime().addShutdownHook(new Thread(new Removal(dir, pid), "jccl-counters-exit"));
        } catch (IllegalStateException shuttingDown) {
            return;
        }
        Thread reaper = new Thread(new Removal(dir, -1), "jccl-counters-reaper");
        reaper.setDaemon(true);
        reaper.start();
    }

    /**
     * {@link #removeFiles} as a task. A named class rather than lambdas: a lambda is spun into a class at its first
     * use (no AOT cache holds it while the incubator module is resolved), which this runs on every rank's start-up.
     */
    private record Removal(Path dir, long pid) implements Runnable {
        @Override
        public void run() {
            removeFiles(dir, pid);
        }
    }

    /**
     * The last part of this process's file names: its PID namespace ({@code .ns4026531836}). A pid names a process
     * only within its namespace: containers sharing /dev/shm but not pids (one pod, {@code docker --ipc}) would
     * otherwise delete each other's live files (a pid invisible here looks dead) and collide on names (pid 1 in
     * every container). Files of another namespace, and untagged files of earlier versions, are never judged here.
     */
    static final String NAMESPACE_TAG = namespaceTag(ProcessIds.pidNamespace());

    static String namespaceTag(String pidNamespace) {
        StringBuilder digits = new StringBuilder();
        for (int i = 0; i < pidNamespace.length(); i++) {
            char c = pidNamespace.charAt(i);
            if (c >= '0' && c <= '9') {
                digits.append(c);
            }
        }
        return ".ns" + (digits.isEmpty() ? "0" : digits);
    }

    /**
     * Removes the counter files of {@code pid}, or with -1 those of every process that no longer runs; only files
     * of this process's PID namespace ({@link #NAMESPACE_TAG}).
     */
    static void removeFiles(Path dir, long pid) {
        // Names are matched by hand and liveness read from /proc: a glob and ProcessHandle would each load and run
        // their machinery for the first time on every rank's start-up (this runs beside it, on the same cores).
        String prefix = PREFIX + (pid >= 0 ? pid + "." : "");
        boolean proc = Files.isDirectory(Path.of("/proc/self"));
        try (DirectoryStream<Path> files = Files.newDirectoryStream(dir)) {
            for (Path path : files) {
                String name = path.getFileName().toString();
                if (!name.startsWith(prefix) || !name.endsWith(NAMESPACE_TAG)) {
                    continue;
                }
                int dot = name.indexOf('.', PREFIX.length());
                long owner;
                try {
                    owner = Long.parseLong(name, PREFIX.length(), dot < 0 ? name.length() : dot, 10);
                } catch (RuntimeException e) {
                    continue;
                }
                if (pid >= 0 || !isAlive(owner, proc)) {
                    Files.deleteIfExists(path);
                }
            }
        } catch (IOException | RuntimeException ignored) {
            // housekeeping only: a file left behind is removed by the next reader
        }
    }

    private static boolean isAlive(long pid, boolean proc) {
        return proc ? Files.exists(Path.of("/proc", Long.toString(pid)))
            : ProcessHandle.of(pid).map(ProcessHandle::isAlive).orElse(false);
    }

    void publishBlockCount(int blocks) {
        ValueLayout.JAVA_INT.varHandle().setRelease(header, 32L, blocks);
    }

    void delete() {
        try {
            Files.deleteIfExists(path);
        } catch (IOException ignored) {
            // a leftover file of a live process is harmless; readers remove it once the process is gone
        }
    }

    /** One published context, as read from its file. */
    public record Published(long pid, String device, long startMillis, Path path, Map<String, Long> counters) {
    }

    /**
     * The contexts that process {@code pid} publishes (every process when {@code pid} is negative). Files of
     * processes that no longer run are deleted on the way.
     */
    public static List<Published> read(long pid) throws IOException {
        List<Published> found = new ArrayList<>();
        Path dir = directory();
        if (!Files.isDirectory(dir)) {
            return found;
        }
        removeFiles(dir, -1); // processes that are gone
        try (DirectoryStream<Path> files = Files.newDirectoryStream(dir, PREFIX + (pid >= 0 ? pid + "." : "") + "*")) {
            for (Path path : files) {
                Published p = readOne(path);
                if (p != null) {
                    found.add(p);
                }
            }
        }
        found.sort((a, b) -> a.pid() != b.pid() ? Long.compare(a.pid(), b.pid()) : a.path().compareTo(b.path()));
        return found;
    }

    private static Published readOne(Path path) {
        try (FileChannel channel = FileChannel.open(path, StandardOpenOption.READ); Arena arena = Arena.ofConfined()) {
            long size = channel.size();
            if (size < HEADER_BYTES) {
                return null;
            }
            MemorySegment file = channel.map(FileChannel.MapMode.READ_ONLY, 0, size, arena);
            if ((long) ValueLayout.JAVA_LONG.varHandle().getAcquire(file, 0L) != MAGIC) {
                return null;
            }
            int counters = file.get(ValueLayout.JAVA_INT_UNALIGNED, 12);
            long pid = file.get(ValueLayout.JAVA_LONG_UNALIGNED, 16);
            long blockBytes = file.get(ValueLayout.JAVA_INT_UNALIGNED, 24);
            int capacity = file.get(ValueLayout.JAVA_INT_UNALIGNED, 28);
            int inUse = Math.min(capacity, (int) ValueLayout.JAVA_INT.varHandle().getAcquire(file, 32L));
            long start = file.get(ValueLayout.JAVA_LONG_UNALIGNED, 40);
            if (counters <= 0 || blockBytes < counters * 8L || HEADER_BYTES + blockBytes * capacity > size) {
                return null;
            }
            String device = getString(file, 64, 64);
            String[] names = getString(file, 128, (int) (HEADER_BYTES - 128)).split(",");
            Map<String, Long> values = new LinkedHashMap<>();
            for (int c = 0; c < Math.min(counters, names.length); c++) {
                long sum = 0;
                for (int b = 0; b < inUse; b++) {
                    sum += (long) ValueLayout.JAVA_LONG.varHandle().getOpaque(file, HEADER_BYTES + b * blockBytes
                        + c * 8L);
                }
                values.put(names[c], sum);
            }
            return new Published(pid, device, start, path, values);
        } catch (IOException | RuntimeException e) {
            return null; // deleted or truncated while we looked: the context closed
        }
    }

    private static void putString(MemorySegment segment, long offset, int max, String text) {
        byte[] bytes = text.getBytes(StandardCharsets.UTF_8);
        int n = Math.min(bytes.length, max - 1);
        // through a buffer view: the first MemorySegment.copy from a heap array initialises heap-segment machinery
        // that cost each rank milliseconds of start-up, while ByteBuffer's code is warm from the JDK's own start
        segment.asSlice(offset, n).asByteBuffer().put(0, bytes, 0, n);
    }

    /** {@code name} with every character outside {@code [A-Za-z0-9_-]} replaced by {@code _}. */
    static String safeFileName(String name) {
        StringBuilder b = new StringBuilder(name.length());
        for (int i = 0; i < name.length(); i++) {
            char c = name.charAt(i);
            boolean ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'
                || c == '-';
            b.append(ok ? c : '_');
        }
        return b.toString();
    }

    private static String getString(MemorySegment segment, long offset, int max) {
        int n = 0;
        while (n < max && segment.get(ValueLayout.JAVA_BYTE, offset + n) != 0) {
            n++;
        }
        byte[] bytes = new byte[n];
        MemorySegment.copy(segment, ValueLayout.JAVA_BYTE, offset, bytes, 0, n);
        return new String(bytes, StandardCharsets.UTF_8);
    }

}
