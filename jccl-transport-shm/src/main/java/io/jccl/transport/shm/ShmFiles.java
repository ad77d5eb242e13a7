package io.jccl.transport.shm;

import io.jccl.common.Config;
import io.jccl.common.SecureIds;
import io.jccl.verbs.VerbsException;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.channels.FileChannel;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.FileAttribute;
import java.nio.file.attribute.PosixFilePermission;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.HexFormat;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The provider's files under {@code /dev/shm} (or {@code JCCL_SHM_DIR}): naming, creation with mode 0600, mapping,
 * removal on close and at JVM exit, reaping of files whose owner process died, host identity and process liveness.
 *
 * <p>Every name is {@code jccl-<owner pid>-<owner start time>-<16 random hex digits>-<kind>}: pid and start time
 * (clock ticks since boot, from /proc) let a later process see that the owner is gone and reap the file, even when
 * the pid was reused since; the random part (64 bits from a CSPRNG) makes names unguessable, so a process that
 * was not given an endpoint or key cannot find a region by listing names it could predict.
 */
public final class ShmFiles {
    /** Directory of the provider's files. */
    public static final Path DIRECTORY = Path.of(Config.value("JCCL_SHM_DIR", "/dev/shm"));
    /** Suffix of context control files (key table). */
    public static final String CONTEXT = "ctx";
    /** Suffix of memory-region files. */
    public static final String REGION = "mr";
    /** Suffix of queue-pair files (state word, receive ring). */
    public static final String QUEUE_PAIR = "qp";

    private static final FileAttribute<Set<PosixFilePermission>> OWNER_ONLY =
        PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------"));
    private static final Set<Path> OWNED = ConcurrentHashMap.newKeySet();
    private static final long SELF_PID = io.jccl.common.ProcessIds.self();
    private static final long SELF_START_TIME = startTime(SELF_PID);
    private static volatile String bootId;
    private static volatile boolean hookInstalled;

    private ShmFiles() {
    }

    /** This process's pid. */
    public static long selfPid() {
        return SELF_PID;
    }

    /** A fresh unguessable file id. */
    public static long newFileId() {
        return SecureIds.nonce();
    }

    /** This process's start time (clock ticks since boot; 0 when /proc is unavailable). */
    public static long selfStartTime() {
        return SELF_START_TIME;
    }

    /** The name of a file of this process with {@code file id} and kind suffix. */
    public static String name(long fileId, String kind) {
        return name(SELF_PID, SELF_START_TIME, fileId, kind);
    }

    /** The file name for owner {@code pid} started at {@code startTime}, {@code file id} and kind suffix. */
    public static String name(long pid, long startTime, long fileId, String kind) {
        return "jccl-" + pid + "-" + startTime + "-" + HexFormat.of().toHexDigits(fileId) + "-" + kind;
    }

    /** Whether {@code name} is a well-formed provider file name of kind {@code kind} (no path separators). */
    public static boolean isValidName(String name, String kind) {
        ParsedName n = parseName(name);
        return n != null && n.kind().equals(kind);
    }

    /** The owner start time embedded in a well-formed name, or -1. */
    public static long ownerStartTime(String name) {
        ParsedName n = parseName(name);
        return n != null ? n.startTime() : -1;
    }

    /** The owner pid embedded in a well-formed name, or -1. */
    public static long ownerPid(String name) {
        ParsedName n = parseName(name);
        return n != null ? n.pid() : -1;
    }

    /** The fields of a well-formed provider file name. */
    record ParsedName(long pid, long startTime, String kind) {
    }

    /**
     * Parses {@code jccl-PID-STARTTIME-FILEID-KIND}: PID 1-10 decimal digits, STARTTIME 1-20 (and within a long),
     * FILEID 16 lowercase hex digits, KIND {@code ctx}, {@code mr} or {@code qp}; anything else (names come from
     * peers and from the directory) gives null. By hand rather than with a regular expression: the regex engine's
     * first use cost every rank milliseconds of start-up.
     */
    static ParsedName parseName(String name) {
        if (name == null || !name.startsWith("jccl-")) {
            return null;
        }
        int pidEnd = digitsEnd(name, 5);
        if (pidEnd - 5 < 1 || pidEnd - 5 > 10 || !dashAt(name, pidEnd)) {
            return null;
        }
        int startEnd = digitsEnd(name, pidEnd + 1);
        if (startEnd - pidEnd - 1 < 1 || startEnd - pidEnd - 1 > 20 || !dashAt(name, startEnd)) {
            return null;
        }
        int idEnd = startEnd + 1 + 16;
        if (idEnd > name.length() || !dashAt(name, idEnd)) {
            return null;
        }
        for (int i = startEnd + 1; i < idEnd; i++) {
            char c = name.charAt(i);
            if (!(c >= '0' && c <= '9') && !(c >= 'a' && c <= 'f')) {
                return null;
            }
        }
        String kind = name.substring(idEnd + 1);
        if (!kind.equals(CONTEXT) && !kind.equals(REGION) && !kind.equals(QUEUE_PAIR)) {
            return null;
        }
        try {
            return new ParsedName(Long.parseLong(name, 5, pidEnd, 10), Long.parseLong(name, pidEnd + 1, startEnd, 10),
                kind);
        } catch (NumberFormatException tooLarge) {
            return null;
        }
    }

    private static int digitsEnd(String s, int from) {
        int i = from;
        while (i < s.length() && s.charAt(i) >= '0' && s.charAt(i) <= '9') {
            i++;
        }
        return i;
    }

    private static boolean dashAt(String s, int i) {
        return i < s.length() && s.charAt(i) == '-';
    }

    /** The host identity: the kernel's boot id, which differs between hosts (and between boots). */
    public static String bootId() {
        String id = bootId;
        if (id == null) {
            try {
                id = Files.readString(Path.of("/proc/sys/kernel/random/boot_id")).trim();
            } catch (IOException | RuntimeException e) {
                // Without /proc we cannot prove host identity; a per-process value makes cross-process use fail
                // loudly instead of silently connecting to the wrong host.
                id = "no-boot-id-" + SELF_PID;
            }
            bootId = id;
        }
        return id;
    }

    /**
     * Creates a new file of {@code size} bytes (mode 0600, never an existing file), maps it shared into
     * {@code arena}, and registers it for removal at JVM exit.
     */
    public static MemorySegment createAndMap(Path path, long size, Arena arena) {
        installHook();
        try (FileChannel channel = FileChannel.open(path, Set.of(StandardOpenOption.CREATE_NEW,
            StandardOpenOption.READ, StandardOpenOption.WRITE), OWNER_ONLY)) {
            OWNED.add(path);
            // Mapping READ_WRITE beyond the end grows the file; tmpfs allocates pages lazily, zero-filled.
            return plainNative(channel.map(FileChannel.MapMode.READ_WRITE, 0, size, arena));
        } catch (IOException | RuntimeException e) {
            delete(path);
            throw new VerbsException(VerbsException.Reason.NO_RESOURCES,
                "cannot create shared-memory file " + path + " of " + size + " bytes: " + e
                    + " (is " + DIRECTORY + " full or not writable? set JCCL_SHM_DIR to another tmpfs)", e);
        }
    }

    /**
     * Maps an existing file of a peer read-write into {@code arena}; {@code minSize} guards against truncated
     * or foreign files.
     *
     * @throws NoSuchFileException when the file is gone (owner revoked or exited)
     * @throws IOException on other failures
     */
    public static MemorySegment mapExisting(Path path, long minSize, Arena arena) throws IOException {
        try (FileChannel channel = FileChannel.open(path, StandardOpenOption.READ, StandardOpenOption.WRITE)) {
            long size = channel.size();
            if (size < minSize) {
                throw new IOException(path + " has " + size + " bytes, expected at least " + minSize);
            }
            return plainNative(channel.map(FileChannel.MapMode.READ_WRITE, 0, size, arena));
        }
    }

    /**
     * The same memory, same arena, as a plain native segment instead of the mapped-file kind. Why: the hot paths
     * (collectives' kernels, barriers, copies) see these segments next to {@code Arena.allocate()} ones, and two
     * implementation classes at one call site or array store defeat the JIT's type speculation (measured:
     * docs/transport-shm.md, "Plain native segments"). Nothing here uses the mapped-file methods ({@code force},
     * {@code load}: tmpfs has no backing store).
     */
    static MemorySegment plainNative(MemorySegment mapped) {
        return mapped.reinterpret(mapped.byteSize());
    }

    /** Removes a file (quietly when it is already gone) and forgets it. */
    public static void delete(Path path) {
        OWNED.remove(path);
        try {
            Files.deleteIfExists(path);
        } catch (IOException ignored) {
            // nothing more to do: the reaper of a later process removes it once we are gone
        }
    }

    /** Files this process created and has not removed yet (for tests and diagnostics). */
    public static Set<Path> owned() {
        return Set.copyOf(OWNED);
    }

    private static void installHook() {
        if (hookInstalled) {
            return;
        }
        synchronized (ShmFiles.class) {
            if (hookInstalled) {
                return;
            }
            Runtime.getRuntime().addShutdownHook(new Thread(() -> {
                for (Path path : OWNED.toArray(new Path[0])) {
                    delete(path);
                }
            }, "jccl-shm-cleanup"));
            hookInstalled = true;
        }
    }

    /**
     * Removes provider files whose owner process is gone (killed before its shutdown hook could run).
     *
     * @return how many files were removed
     */
    public static int reap() {
        int removed = 0;
        try (DirectoryStream<Path> entries = Files.newDirectoryStream(DIRECTORY, "jccl-*")) {
            for (Path entry : entries) {
                ParsedName n = parseName(entry.getFileName().toString());
                if (n == null) {
                    continue;
                }
                long pid = n.pid();
                long startTime = n.startTime();
                if (pid != SELF_PID && !isAlive(pid, startTime)) {
                    try {
                        if (Files.deleteIfExists(entry)) {
                            removed++;
                        }
                    } catch (IOException ignored) {
                        // another user's file (EPERM) or a race with another reaper
                    }
                }
            }
        } catch (IOException | RuntimeException ignored) {
            // directory missing or unreadable: nothing to reap
        }
        return removed;
    }

    /**
     * Whether process {@code pid} is running (zombies count as dead: their memory is gone, only the pid remains).
     * Reads {@code /proc/<pid>/stat}; allocates, so callers rate-limit it.
     */
    public static boolean isAlive(long pid) {
        return isAlive(pid, 0);
    }

    /**
     * Like {@link #isAlive(long)}, and when {@code startTime} is not 0 also that the process is the one that
     * started at that time ({@link #startTime}): a pid reused by an unrelated process counts as dead.
     */
    public static boolean isAlive(long pid, long startTime) {
        if (pid == SELF_PID) {
            return true;
        }
        Path stat = Path.of("/proc", Long.toString(pid), "stat");
        try {
            String text = Files.readString(stat);
            int close = text.lastIndexOf(')');
            char state = close >= 0 && close + 2 < text.length() ? text.charAt(close + 2) : '?';
            if (state == 'Z' || state == 'X') {
                return false;
            }
            return startTime == 0 || parseStartTime(text) == startTime;
        } catch (NoSuchFileException e) {
            return false;
        } catch (IOException | RuntimeException e) {
            return ProcessHandle.of(pid).map(ProcessHandle::isAlive).orElse(false);
        }
    }

    /** The start time of process {@code pid} in clock ticks since boot (field 22 of /proc/pid/stat), or 0. */
    public static long startTime(long pid) {
        try {
            return parseStartTime(Files.readString(Path.of("/proc", Long.toString(pid), "stat")));
        } catch (IOException | RuntimeException e) {
            return 0;
        }
    }

    private static long parseStartTime(String stat) {
        // Fields after the command (which may contain spaces) start with field 3 (state); starttime is field 22.
        String[] fields = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
        return Long.parseLong(fields[19]);
    }
}
