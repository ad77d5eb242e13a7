package io.jccl.transport.shm;

import io.jccl.common.SecureIds;
import io.jccl.verbs.VerbsException;

import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.channels.OverlappingFileLockException;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.FileAttribute;
import java.nio.file.attribute.PosixFilePermission;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CopyOnWriteArrayList;

/**
 * The liveness of a process as the kernel keeps it: every process that creates provider files first creates
 * {@code jccl-<pid>-<owner id>-lock} and holds a write lock on it for its whole life (a POSIX record lock,
 * {@code FileChannel.lock}). The kernel releases that lock when the process ends, however it ends (SIGKILL
 * included), and it does so in every PID namespace alike: a lock is a property of the file, which containers that
 * share {@code /dev/shm} share, whereas pids and {@code /proc} are per namespace. So "nobody holds the lock" is a
 * proof that the owner is dead, and "somebody holds it" that it lives; see docs/transport-shm.md, "Cleanup and
 * reaping".
 *
 * <p>Creation closes the window between creating the file and locking it: a reaper deletes a lock file only while
 * it holds a (shared) lock on it itself, and the creator, once it holds its exclusive lock, checks that the name
 * still exists. Either the creator locks first (the reaper's attempt fails and it leaves the file) or the reaper
 * does (the creator's attempt fails, or succeeds on an already unlinked file and sees the name gone); in both
 * cases the creator starts again with a new owner id. The owner's data files are created only after its lock is
 * held, and its lock file is removed only after them (shutdown hook) or by a reaper that holds the lock, so a data
 * file whose lock file is missing is an orphan.
 *
 * <p>POSIX locks belong to the process, and closing any descriptor of the file in the process drops them. Nothing
 * in this process therefore ever opens its own lock file (checks of this process's own owner id answer "alive"
 * without touching it), and a check that meets a lock held inside this JVM (another copy of the provider in
 * another class loader: {@link OverlappingFileLockException}) keeps its channel open instead of closing it.
 */
final class OwnerLock {
    /** Kind suffix of lock files. */
    static final String KIND = "lock";
    /** How often creation starts again after a reaper took its fresh file (each take needs a reaper in the window). */
    private static final int MAX_ATTEMPTS = 32;
    private static final FileAttribute<Set<PosixFilePermission>> OWNER_ONLY =
        PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------"));
    /**
     * Channels that found a lock held inside this JVM: closing them would drop that lock (POSIX semantics), so they
     * stay open. Only another copy of the provider in this JVM, or two reapers of this JVM meeting on one dead
     * owner, put anything here.
     */
    private static final List<FileChannel> KEPT_OPEN = new CopyOnWriteArrayList<>();

    /** Test seam: milliseconds to pause between creating a lock file and locking it, on the first attempt only. */
    static volatile long pauseBeforeLockMsForTests;

    private static volatile OwnerLock self;

    /** The owner id: 16 hex digits in names, the first of them a letter (see {@link #newOwnerId}). */
    final long ownerId;
    /** The owner's pid (informational: it is the pid in the owner's own PID namespace). */
    final long pid;
    /** The lock file. */
    final Path path;
    /** How many attempts creation took (tests). */
    final int attempts;
    /** Held for the life of the JVM: never closed, so the lock goes only with the process. */
    @SuppressWarnings({"unused", "FieldCanBeLocal"})
    private final FileChannel channel;
    @SuppressWarnings({"unused", "FieldCanBeLocal"})
    private final FileLock lock;

    private OwnerLock(long ownerId, long pid, Path path, FileChannel channel, FileLock lock, int attempts) {
        this.ownerId = ownerId;
        this.pid = pid;
        this.path = path;
        this.channel = channel;
        this.lock = lock;
        this.attempts = attempts;
    }

    /** This process's lock, created (and locked) on first use. */
    static OwnerLock self() {
        OwnerLock s = self;
        if (s != null) {
            return s;
        }
        synchronized (OwnerLock.class) {
            if (self == null) {
                self = create(ShmFiles.DIRECTORY, ShmFiles.selfPid());
                ShmFiles.installHook(); // removes the lock file (after the data files) at JVM exit
            }
            return self;
        }
    }

    /** This process's owner id, or 0 while it has created no lock (and so no file). */
    static long selfIdIfCreated() {
        OwnerLock s = self;
        return s != null ? s.ownerId : 0;
    }

    /**
     * A fresh owner id: 60 random bits under a top hex digit of {@code a}, so that a name's owner field never reads
     * as the decimal start time of the earlier name format ({@code jccl-<pid>-<start time>-…}): reapers of older
     * JCCL versions skip these files instead of judging them by pid, and this version tells the two formats apart.
     */
    static long newOwnerId() {
        return (SecureIds.nonce() & 0x0FFF_FFFF_FFFF_FFFFL) | 0xA000_0000_0000_0000L;
    }

    /**
     * Creates and locks a lock file for an owner of pid {@code pid} in {@code dir} (the process's own lock; tests
     * call it directly to stand in for other owners only from other processes, see the class comment).
     *
     * @throws VerbsException NO_RESOURCES when the file cannot be created or kept (directory not writable, or
     *     reapers took every attempt)
     */
    static OwnerLock create(Path dir, long pid) {
        IOException last = null;
        for (int attempt = 1; attempt <= MAX_ATTEMPTS; attempt++) {
            long ownerId = newOwnerId();
            Path path = dir.resolve(ShmFiles.lockName(pid, ownerId));
            FileChannel channel;
            try {
                channel = FileChannel.open(path, Set.of(StandardOpenOption.CREATE_NEW, StandardOpenOption.READ,
                    StandardOpenOption.WRITE), OWNER_ONLY);
            } catch (FileAlreadyExistsException e) {
                last = e; // the name of a random id taken: draw again
                continue;
            } catch (IOException e) {
                last = e; // directory missing, not writable or full: no point in drawing again
                break;
            }
            FileLock lock = null;
            try {
                long pause = pauseBeforeLockMsForTests;
                if (pause > 0 && attempt == 1) {
                    Thread.sleep(pause);
                }
                try {
                    lock = channel.tryLock();
                } catch (OverlappingFileLockException reaperOfThisJvm) {
                    lock = null;
                }
                // Locked and still named: no reaper can take it from now on. Not named any more: a reaper held it
                // in between and removed it.
                if (lock != null && Files.exists(path, LinkOption.NOFOLLOW_LINKS)) {
                    return new OwnerLock(ownerId, pid, path, channel, lock, attempt);
                }
            } catch (IOException e) {
                last = e;
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                last = new IOException("interrupted while creating " + path, e);
            }
            closeQuietly(channel);
            if (lock == null) {
                deleteQuietly(path); // a reaper holds it and removes it as well; whoever comes first
            }
        }
        throw new VerbsException(VerbsException.Reason.NO_RESOURCES, "cannot create the process's lock file in "
            + dir + ": " + (last != null ? last : "reapers took all " + MAX_ATTEMPTS + " attempts") + " (is " + dir
            + " full or not writable? set JCCL_SHM_DIR to another tmpfs)", last);
    }

    /** Verdict of {@link #check}. */
    enum Owner {
        /** Someone holds the owner's lock: the owner lives. */
        ALIVE,
        /** The lock file is gone, or nobody holds its lock: the owner is dead. */
        DEAD,
        /** Cannot tell (no permission, I/O error). */
        UNKNOWN
    }

    /**
     * Whether owner {@code ownerId} of pid {@code pid} lives (allocates: one open, one lock test and one close;
     * callers rate-limit it). This process's own id is alive without any file access.
     */
    static Owner check(Path dir, long pid, long ownerId) {
        if (ownerId == selfIdIfCreated()) {
            return Owner.ALIVE;
        }
        Path path = dir.resolve(ShmFiles.lockName(pid, ownerId));
        FileChannel channel;
        try {
            channel = FileChannel.open(path, StandardOpenOption.READ);
        } catch (NoSuchFileException e) {
            return Owner.DEAD;
        } catch (IOException | RuntimeException e) {
            return Owner.UNKNOWN;
        }
        boolean keep = false;
        try {
            FileLock test = channel.tryLock(0, Long.MAX_VALUE, true);
            if (test == null) {
                return Owner.ALIVE;
            }
            test.release();
            return Owner.DEAD;
        } catch (OverlappingFileLockException heldInThisJvm) {
            keep = true;
            return Owner.ALIVE;
        } catch (IOException | RuntimeException e) {
            return Owner.UNKNOWN;
        } finally {
            if (keep) {
                KEPT_OPEN.add(channel);
            } else {
                closeQuietly(channel);
            }
        }
    }

    /**
     * Deletes {@code files} of owner {@code ownerId} (pid {@code pid}) and then its lock file, if and only if the
     * owner is provably dead: its lock file is gone, or this call holds the lock on it while deleting.
     *
     * @return how many files were removed (the lock file included), 0 when the owner lives or cannot be judged
     */
    static int removeIfDead(Path dir, long pid, long ownerId, List<Path> files) {
        if (ownerId == selfIdIfCreated()) {
            return 0;
        }
        Path path = dir.resolve(ShmFiles.lockName(pid, ownerId));
        FileChannel channel;
        try {
            channel = FileChannel.open(path, StandardOpenOption.READ);
        } catch (NoSuchFileException e) {
            // No lock file: the owner created it before any of these files, and only its exit or a reaper that
            // held the lock removed it.
            return deleteAll(files);
        } catch (IOException | RuntimeException e) {
            return 0; // another user's owner (EACCES), or an I/O error: not ours to judge
        }
        boolean keep = false;
        try {
            FileLock held = channel.tryLock(0, Long.MAX_VALUE, true);
            if (held == null) {
                return 0;
            }
            try {
                int removed = deleteAll(files);
                return Files.deleteIfExists(path) ? removed + 1 : removed;
            } finally {
                held.release();
            }
        } catch (OverlappingFileLockException heldInThisJvm) {
            keep = true;
            return 0;
        } catch (IOException | RuntimeException e) {
            return 0;
        } finally {
            if (keep) {
                KEPT_OPEN.add(channel);
            } else {
                closeQuietly(channel);
            }
        }
    }

    private static int deleteAll(List<Path> files) {
        int removed = 0;
        for (Path file : files) {
            try {
                if (Files.deleteIfExists(file)) {
                    removed++;
                }
            } catch (IOException | RuntimeException ignored) {
                // another user's file (EPERM in a sticky directory) or a race with another reaper
            }
        }
        return removed;
    }

    private static void closeQuietly(FileChannel channel) {
        try {
            channel.close();
        } catch (IOException ignored) {
            // nothing held on it
        }
    }

    private static void deleteQuietly(Path path) {
        try {
            Files.deleteIfExists(path);
        } catch (IOException ignored) {
            // the reaper that took it removes it
        }
    }
}
