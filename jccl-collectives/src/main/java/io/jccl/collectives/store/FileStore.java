package io.jccl.collectives.store;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.charset.StandardCharsets;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;

/**
 * A store in a directory every rank can reach (a shared filesystem, or /tmp for ranks of one host), like Gloo's
 * FileStore. Each key is one file (the key in URL-safe base64); values are written to a temporary file and renamed
 * into place atomically, so readers never see half a value. {@link #add} and {@link #compareAndSet} hold an
 * exclusive lock on the file {@code .lock} in the directory (POSIX record locks; NFS needs lockd). Waiting polls the
 * directory every 1–50 ms until the deadline.
 */
public final class FileStore implements Store {
    private final Path directory;
    private final Path lockFile;

    /** A store in {@code directory} (created when missing). */
    public FileStore(Path directory) {
        this.directory = directory;
        this.lockFile = directory.resolve(".lock");
        try {
            Files.createDirectories(directory);
        } catch (IOException e) {
            throw new StoreException("FileStore cannot create directory " + directory + ": " + e, e);
        }
    }

    private Path file(String key) {
        return directory.resolve("k_" + Base64.getUrlEncoder().withoutPadding()
            .encodeToString(key.getBytes(StandardCharsets.UTF_8)));
    }

    private void write(Path target, byte[] value) throws IOException {
        Path tmp = Files.createTempFile(directory, ".tmp", "");
        try {
            Files.write(tmp, value);
            try {
                Files.move(tmp, target, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
            } catch (AtomicMoveNotSupportedException e) {
                Files.move(tmp, target, StandardCopyOption.REPLACE_EXISTING);
            }
        } finally {
            Files.deleteIfExists(tmp);
        }
    }

    private byte[] read(Path path) throws IOException {
        try {
            return Files.readAllBytes(path);
        } catch (NoSuchFileException e) {
            return null;
        }
    }

    @Override
    public void set(String key, byte[] value, long timeoutNs) {
        try {
            write(file(key), value);
        } catch (IOException e) {
            throw new StoreException(describe() + ": cannot set '" + key + "': " + e, e);
        }
    }

    @Override
    public byte[] get(String key, long timeoutNs) {
        waitFor(List.of(key), timeoutNs);
        try {
            byte[] v = read(file(key));
            if (v == null) {
                throw new StoreException(describe() + ": key '" + key + "' was deleted while being read");
            }
            return v;
        } catch (IOException e) {
            throw new StoreException(describe() + ": cannot read '" + key + "': " + e, e);
        }
    }

    private interface Locked<T> {
        T run() throws IOException;
    }

    private static final java.util.concurrent.ConcurrentHashMap<Path, java.util.concurrent.locks.ReentrantLock>
        JVM_LOCKS = new java.util.concurrent.ConcurrentHashMap<>();

    private <T> T locked(String what, Locked<T> body) {
        // File locks are per JVM: threads of one JVM serialize on a JVM lock first (else OverlappingFileLockException).
        java.util.concurrent.locks.ReentrantLock jvmLock = JVM_LOCKS.computeIfAbsent(lockFile.toAbsolutePath(),
            p -> new java.util.concurrent.locks.ReentrantLock());
        jvmLock.lock();
        try {
            return lockedFile(what, body);
        } finally {
            jvmLock.unlock();
        }
    }

    private <T> T lockedFile(String what, Locked<T> body) {
        try (FileChannel channel = FileChannel.open(lockFile, StandardOpenOption.CREATE, StandardOpenOption.WRITE);
             FileLock ignored = channel.lock()) {
            return body.run();
        } catch (IOException e) {
            throw new StoreException(describe() + ": " + what + " failed: " + e, e);
        }
    }

    @Override
    public long add(String key, long delta, long timeoutNs) {
        Path path = file(key);
        return locked("add(" + key + ")", () -> {
            byte[] old = read(path);
            long value;
            try {
                value = (old == null ? 0 : Long.parseLong(new String(old, StandardCharsets.UTF_8))) + delta;
            } catch (NumberFormatException e) {
                throw new StoreException("add on key '" + key + "' whose value is not a counter", e);
            }
            write(path, Long.toString(value).getBytes(StandardCharsets.UTF_8));
            return value;
        });
    }

    @Override
    public void waitFor(List<String> keys, long timeoutNs) {
        long start = System.nanoTime();
        long pauseNs = TimeUnit.MILLISECONDS.toNanos(1);
        while (true) {
            List<String> missing = new ArrayList<>();
            for (String key : keys) {
                if (!Files.exists(file(key))) {
                    missing.add(key);
                }
            }
            if (missing.isEmpty()) {
                return;
            }
            if (System.nanoTime() - start >= timeoutNs) {
                throw new StoreTimeoutException("timed out after " + StoreTimeoutException.millis(System.nanoTime()
                    - start) + " waiting for key(s) " + missing + " in " + describe());
            }
            LockSupport.parkNanos(pauseNs);
            if (Thread.interrupted()) {
                Thread.currentThread().interrupt();
                throw new StoreException("interrupted while waiting for " + missing + " in " + describe());
            }
            pauseNs = Math.min(pauseNs * 2, TimeUnit.MILLISECONDS.toNanos(50));
        }
    }

    @Override
    public boolean compareAndSet(String key, byte[] expected, byte[] desired, long timeoutNs) {
        Path path = file(key);
        return locked("compareAndSet(" + key + ")", () -> {
            byte[] current = read(path);
            boolean match = expected == null ? current == null : current != null && Arrays.equals(current, expected);
            if (match) {
                write(path, desired);
            }
            return match;
        });
    }

    @Override
    public boolean delete(String key, long timeoutNs) {
        try {
            return Files.deleteIfExists(file(key));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    @Override
    public boolean check(String key, long timeoutNs) {
        return Files.exists(file(key));
    }

    @Override
    public String describe() {
        return "FileStore " + directory;
    }

    @Override
    public void close() {
    }
}
