package io.jccl.transport.shm;

import io.jccl.common.BackgroundLinking;
import io.jccl.common.Config;
import io.jccl.common.NativeAccess;
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
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The provider's files under {@code /dev/shm} (or {@code JCCL_SHM_DIR}): naming, creation with mode 0600, mapping,
 * removal on close and at JVM exit, reaping of files whose owner process died, host identity.
 *
 * <p>Every file is {@code jccl-<owner pid>-<owner id>-<file id>-<kind>}, and each process that creates files holds
 * {@code jccl-<pid>-<owner id>-lock} locked for its life ({@link OwnerLock}). The owner id (16 hex digits, the
 * first a letter, random per process) ties a file to its owner's lock: a reaper removes a file only when nobody
 * holds that lock, which the kernel guarantees only once the owner is dead, whatever PID namespace it ran in. The
 * pid is only for people reading a listing: it is the pid in the owner's own PID namespace. The file id (64 bits
 * from a CSPRNG) makes names unguessable, so a process that was not given an endpoint or key cannot find a region
 * by listing names it could predict.
 *
 * <p>Names of the earlier format, {@code jccl-<pid>-<decimal start time>-<file id>-<kind>}, parse as nothing:
 * their owner can be judged only by pid, which is meaningless across PID namespaces, so they are never reaped
 * (docs/transport-shm.md, "Cleanup and reaping").
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

    private static final String PREFIX = "jccl-";
    private static final FileAttribute<Set<PosixFilePermission>> OWNER_ONLY =
        PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------"));
    private static final Set<Path> OWNED = ConcurrentHashMap.newKeySet();
    /** Owners whose files a survivor already reaped after finding them dead (one scan per dead owner). */
    private static final Set<Long> REAPED_OWNERS = ConcurrentHashMap.newKeySet();
    private static final long SELF_PID = io.jccl.common.ProcessIds.self();
    private static volatile String bootId;
    private static volatile long pidNamespace = -1;
    private static volatile boolean hookInstalled;
    private static volatile boolean reapedOnce;
    private static boolean backgroundReapStarted;

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

    /** This process's owner id (creates and locks its lock file on first use; see {@link OwnerLock}). */
    public static long selfOwnerId() {
        return OwnerLock.self().ownerId;
    }

    /** This process's lock file, or null while it has created none (for tests and diagnostics). */
    public static Path lockFile() {
        return OwnerLock.selfIdIfCreated() != 0 ? OwnerLock.self().path : null;
    }

    /** The name of a file of this process with {@code file id} and kind suffix (creates the lock first). */
    public static String name(long fileId, String kind) {
        return name(SELF_PID, selfOwnerId(), fileId, kind);
    }

    /** The file name for owner {@code pid} with owner id {@code ownerId}, {@code file id} and kind suffix. */
    public static String name(long pid, long ownerId, long fileId, String kind) {
        return PREFIX + pid + "-" + HexFormat.of().toHexDigits(ownerId) + "-" + HexFormat.of().toHexDigits(fileId)
            + "-" + kind;
    }

    /** The lock file name of owner {@code ownerId} of pid {@code pid}. */
    static String lockName(long pid, long ownerId) {
        return PREFIX + pid + "-" + HexFormat.of().toHexDigits(ownerId) + "-" + OwnerLock.KIND;
    }

    /** Whether {@code name} is a well-formed provider file name of kind {@code kind} (no path separators). */
    public static boolean isValidName(String name, String kind) {
        ParsedName n = parseName(name);
        return n != null && n.kind().equals(kind);
    }

    /** The owner id embedded in a well-formed name, or 0. */
    public static long ownerId(String name) {
        ParsedName n = parseName(name);
        return n != null ? n.ownerId() : 0;
    }

    /** The owner pid embedded in a well-formed name, or -1. */
    public static long ownerPid(String name) {
        ParsedName n = parseName(name);
        return n != null ? n.pid() : -1;
    }

    /** The fields of a well-formed provider file name ({@code fileId} 0 for a lock file). */
    record ParsedName(long pid, long ownerId, long fileId, String kind) {
    }

    /**
     * Parses {@code jccl-PID-OWNER-FILEID-KIND} and {@code jccl-PID-OWNER-lock}: PID 1-10 decimal digits, OWNER 16
     * lowercase hex digits of which the first is a letter, FILEID 16 lowercase hex digits, KIND {@code ctx},
     * {@code mr} or {@code qp}; anything else (names come from peers and from the directory, including the earlier
     * format with a decimal start time) gives null. By hand rather than with a regular expression: the regex
     * engine's first use cost every rank milliseconds of start-up.
     */
    static ParsedName parseName(String name) {
        if (name == null || !name.startsWith(PREFIX)) {
            return null;
        }
        int pidEnd = digitsEnd(name, 5);
        if (pidEnd - 5 < 1 || pidEnd - 5 > 10 || !dashAt(name, pidEnd)) {
            return null;
        }
        int ownerStart = pidEnd + 1;
        int ownerEnd = ownerStart + 16;
        if (ownerEnd > name.length() || !isHex(name, ownerStart, ownerEnd) || name.charAt(ownerStart) < 'a'
            || !dashAt(name, ownerEnd)) {
            return null;
        }
        long pid;
        try {
            pid = Long.parseLong(name, 5, pidEnd, 10);
        } catch (NumberFormatException tooLarge) {
            return null;
        }
        long ownerId = Long.parseUnsignedLong(name, ownerStart, ownerEnd, 16);
        String rest = name.substring(ownerEnd + 1);
        if (rest.equals(OwnerLock.KIND)) {
            return new ParsedName(pid, ownerId, 0, OwnerLock.KIND);
        }
        int idEnd = ownerEnd + 1 + 16;
        if (idEnd > name.length() || !isHex(name, ownerEnd + 1, idEnd) || !dashAt(name, idEnd)) {
            return null;
        }
        String kind = name.substring(idEnd + 1);
        if (!kind.equals(CONTEXT) && !kind.equals(REGION) && !kind.equals(QUEUE_PAIR)) {
            return null;
        }
        return new ParsedName(pid, ownerId, Long.parseUnsignedLong(name, ownerEnd + 1, idEnd, 16), kind);
    }

    private static boolean isHex(String s, int from, int to) {
        for (int i = from; i < to; i++) {
            char c = s.charAt(i);
            if (!(c >= '0' && c <= '9') && !(c >= 'a' && c <= 'f')) {
                return false;
            }
        }
        return true;
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

    /**
     * The inode of this process's PID namespace ({@code /proc/self/ns/pid}), or 0 when unknown. Two processes with
     * the same value see the same pids; pids of a process with another value (or 0) mean nothing here.
     */
    public static long pidNamespace() {
        long ns = pidNamespace;
        if (ns < 0) {
            ns = 0;
            try {
                String link = Files.readSymbolicLink(Path.of("/proc/self/ns/pid")).toString(); // "pid:[4026531836]"
                int open = link.indexOf('[');
                int close = link.indexOf(']', open + 1);
                if (link.startsWith("pid:") && open > 0 && close > open + 1) {
                    ns = Long.parseLong(link, open + 1, close, 10);
                }
            } catch (IOException | RuntimeException e) {
                ns = 0;
            }
            pidNamespace = ns;
        }
        return ns;
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
        OwnerLock.self(); // before any file of ours exists (names made with name() have created it already)
        try (FileChannel channel = FileChannel.open(path, Set.of(StandardOpenOption.CREATE_NEW,
            StandardOpenOption.READ, StandardOpenOption.WRITE), OWNER_ONLY)) {
            OWNED.add(path);
            // Mapping READ_WRITE beyond the end grows the file; tmpfs allocates pages lazily, zero-filled.
            return plainNative(channel.map(FileChannel.MapMode.READ_WRITE, 0, size, arena));
        } catch (IOException | RuntimeException e) {
            delete(path);
            if (NativeAccess.isDenial(e)) {
                // Not a /dev/shm problem: the JVM refused the mapping (--illegal-native-access=deny).
                throw new VerbsException(VerbsException.Reason.NO_RESOURCES, "cannot map shared-memory file " + path
                    + ": " + NativeAccess.explain(ShmFiles.class.getModule()), e);
            }
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

    /** Installs the JVM-exit removal of this process's files, and then of its lock file (once). */
    static void installHook() {
        if (hookInstalled) {
            return;
        }
        synchronized (ShmFiles.class) {
            if (hookInstalled) {
                return;
            }
            Runtime.getRuntime().addShutdownHook(new Thread(new Cleanup(), "jccl-shm-cleanup"));
            hookInstalled = true;
        }
    }

    /** The shutdown hook: this process's files, then its lock file (last: a file without its lock is an orphan). */
    private static final class Cleanup implements Runnable {
        @Override
        public void run() {
            for (Path path : OWNED.toArray(new Path[0])) {
                delete(path);
            }
            long self = OwnerLock.selfIdIfCreated();
            if (self != 0) {
                try {
                    Files.deleteIfExists(OwnerLock.self().path);
                } catch (IOException ignored) {
                    // the lock goes with the process anyway; a later reaper removes the file
                }
            }
        }
    }

    /**
     * Removes the provider files of every owner that is provably dead: its lock file is gone, or this call holds
     * its lock while removing ({@link OwnerLock}). Files of live owners, in any PID namespace, stay; so do names
     * of the earlier format (see the class comment). Cost: one directory listing, then one open, one lock test
     * and one close per other owner with files here.
     *
     * @return how many files were removed (lock files included)
     */
    public static int reap() {
        return reap(DIRECTORY);
    }

    /**
     * Removes the files of owner {@code ownerId} (pid {@code pid}) if it is provably dead: what a survivor does
     * when it finds a peer dead, once per owner and process.
     *
     * @return how many files were removed
     */
    static int reapOwner(long pid, long ownerId) {
        if (ownerId == 0 || !REAPED_OWNERS.add(ownerId)) {
            return 0;
        }
        Path dir = DIRECTORY;
        List<Path> files = new ArrayList<>();
        String prefix = PREFIX + pid + "-" + HexFormat.of().toHexDigits(ownerId) + "-";
        try (DirectoryStream<Path> entries = Files.newDirectoryStream(dir)) {
            for (Path entry : entries) {
                String name = entry.getFileName().toString();
                if (name.startsWith(prefix)) {
                    ParsedName n = parseName(name);
                    if (n != null && !n.kind().equals(OwnerLock.KIND)) {
                        files.add(entry);
                    }
                }
            }
        } catch (IOException | RuntimeException e) {
            REAPED_OWNERS.remove(ownerId);
            return 0;
        }
        int removed = OwnerLock.removeIfDead(dir, pid, ownerId, files);
        if (removed == 0 && OwnerLock.check(dir, pid, ownerId) != OwnerLock.Owner.DEAD) {
            REAPED_OWNERS.remove(ownerId); // not dead after all (or not judged): a later finding may try again
        }
        return removed;
    }

    /** {@link #reap()} over {@code dir}. */
    static int reap(Path dir) {
        reapedOnce = true;
        long self = OwnerLock.selfIdIfCreated();
        Map<Long, OwnerFiles> owners = new HashMap<>();
        try (DirectoryStream<Path> entries = Files.newDirectoryStream(dir)) {
            for (Path entry : entries) {
                String name = entry.getFileName().toString();
                if (!name.startsWith(PREFIX)) {
                    continue;
                }
                ParsedName n = parseName(name);
                if (n == null || n.ownerId() == self) {
                    continue;
                }
                // By owner id alone: a file that names a live owner's id with another pid is forged, and goes with
                // that owner's files once it dies.
                OwnerFiles o = owners.get(n.ownerId());
                if (o == null) {
                    o = new OwnerFiles(n.pid(), n.ownerId());
                    owners.put(n.ownerId(), o);
                }
                if (!n.kind().equals(OwnerLock.KIND)) {
                    o.files.add(entry);
                }
            }
        } catch (IOException | RuntimeException ignored) {
            // directory missing or unreadable: nothing (more) to reap
        }
        int removed = 0;
        for (OwnerFiles o : owners.values()) {
            removed += OwnerLock.removeIfDead(dir, o.pid, o.ownerId, o.files);
        }
        return removed;
    }

    /** The files of one owner found in a listing. */
    private static final class OwnerFiles {
        final long pid;
        final long ownerId;
        final List<Path> files = new ArrayList<>(4);

        OwnerFiles(long pid, long ownerId) {
            this.pid = pid;
            this.ownerId = ownerId;
        }
    }

    /**
     * Reaps once, on a daemon thread after {@link BackgroundLinking#DELAY_MS}, unless this JVM reaped by then (a
     * context opened): for processes that load the provider without opening {@code shm0}, so that leftovers of
     * killed processes do not wait for the next job that opens it. Once per JVM.
     */
    static void reapInBackground() {
        synchronized (ShmFiles.class) {
            if (backgroundReapStarted) {
                return;
            }
            backgroundReapStarted = true;
        }
        BackgroundLinking.start("jccl-shm-reaper", new BackgroundReap());
    }

    /** {@link #reapInBackground}'s task (a named class: a lambda would be spun into a class at start-up). */
    private static final class BackgroundReap implements Runnable {
        @Override
        public void run() {
            if (!reapedOnce) {
                reap();
            }
        }
    }

    /**
     * Whether process {@code pid} of this PID namespace is running (zombies count as dead: their memory is gone,
     * only the pid remains). Reads {@code /proc/<pid>/stat}; allocates, so callers rate-limit it. Only for pids of
     * processes known to share this process's PID namespace (see {@link #pidNamespace}).
     */
    public static boolean isAlive(long pid) {
        if (pid == SELF_PID) {
            return true;
        }
        Path stat = Path.of("/proc", Long.toString(pid), "stat");
        try {
            String text = Files.readString(stat);
            int close = text.lastIndexOf(')');
            char state = close >= 0 && close + 2 < text.length() ? text.charAt(close + 2) : '?';
            return state != 'Z' && state != 'X';
        } catch (NoSuchFileException e) {
            return false;
        } catch (IOException | RuntimeException e) {
            return ProcessHandle.of(pid).map(ProcessHandle::isAlive).orElse(false);
        }
    }
}
