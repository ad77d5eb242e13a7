package io.jccl.tools.launcher;

import java.io.File;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.attribute.FileTime;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HexFormat;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * JDK 25 ahead-of-time caches (JEP 483/514/515) for the Java ranks {@code jccl run} starts: classes loaded and
 * linked, and method profiles, taken from a training run instead of being redone by every JVM.
 *
 * <p>A rank command qualifies when it is {@code java [options] -cp PATH MainClass …} (or {@code -jar}). Its key
 * hashes what the JVM checks before it accepts a cache: the java binary (and its runtime image), every class path
 * entry with size and modification time, the module and native-access options and JDK_JAVA_OPTIONS, and the main
 * class (each program gets its own classes and method profiles). {@code -D} properties and program arguments are
 * not in the key.
 * <ul>
 * <li>A cache for the key exists: every rank gets {@code -XX:AOTCache=FILE} (plus {@code -Xlog:aot*=off}, so a
 * cache the JVM still refuses is skipped silently, as {@code -XX:AOTMode=auto} does).</li>
 * <li>None yet: rank 0 runs with {@code -XX:AOTMode=record}; when it exits with status 0 the launcher runs the
 * create step ({@code -XX:AOTMode=create}, same options, output discarded) and moves the result into place
 * atomically. That costs the first run of a new build one to a few seconds; a failed attempt leaves a
 * {@code .failed} marker so it is not retried for that key.</li>
 * </ul>
 * Caches live in one directory ({@code JCCL_AOT_DIR}, default {@code jccl-tools/target/aot} of the checkout, so
 * {@code mvn clean} removes them); the newest {@value #KEEP} are kept. {@code JCCL_AOT=0} turns all of this off.
 * Commands that are not {@code java} itself (a wrapper script) are left alone: such a script can pass
 * {@code -XX:AOTCache} itself.
 */
public final class AotCache {
    /** Caches kept in the directory (oldest deleted first). */
    static final int KEEP = 4;
    private static final long CREATE_TIMEOUT_S = 120;
    /** Options whose separate value is part of the option (java's own list of two-word options). */
    private static final List<String> TWO_WORD = List.of("-cp", "-classpath", "--class-path", "-p", "--module-path",
        "--upgrade-module-path", "--add-modules", "--limit-modules", "--add-exports", "--add-opens", "--add-reads",
        "--patch-module", "--enable-native-access", "--source", "--describe-module", "-d");
    /** Options (prefixes) that change what the JVM accepts in a cache, so they are part of the key. */
    private static final List<String> KEYED = List.of("--add-modules", "--limit-modules", "--add-exports",
        "--add-opens", "--add-reads", "--patch-module", "--enable-native-access", "-XX:+Use", "-XX:-Use",
        "-XX:+UseCompressed", "-XX:-UseCompressed", "--enable-preview", "-Xbootclasspath", "-javaagent", "-agent",
        "--sun-misc-unsafe-memory-access", "-XX:+Enable", "-XX:-Enable", "-XX:+UnlockExperimental");

    private final Path directory;
    private final PrintStream log;
    private final boolean jvmLogs;

    /**
     * @param directory where caches are kept (created when needed)
     * @param log where decisions are reported (JCCL_DEBUG=INFO), or null for silence
     */
    public AotCache(Path directory, PrintStream log) {
        this(directory, log, false);
    }

    /**
     * @param directory where caches are kept (created when needed)
     * @param log where decisions are reported (JCCL_DEBUG=INFO), or null for silence
     * @param jvmLogs whether the JVM's own AOT warnings go to the ranks' stderr (JCCL_DEBUG=TRACE) instead of
     *     being switched off
     */
    public AotCache(Path directory, PrintStream log, boolean jvmLogs) {
        this.directory = directory.toAbsolutePath().normalize();
        this.log = log;
        this.jvmLogs = jvmLogs;
    }

    /**
     * The cache set-up the environment asks for: null when {@code JCCL_AOT=0}, or when neither {@code JCCL_AOT_DIR}
     * nor the {@code jccl.home} property (set by {@code ./jccl}) says where caches go.
     */
    public static AotCache fromEnvironment(Map<String, String> env, PrintStream err) {
        if ("0".equals(env.get("JCCL_AOT"))) {
            if (debug(env)) {
                err.println("jccl run: AOT caches off (JCCL_AOT=0)");
            }
            return null;
        }
        String dir = env.get("JCCL_AOT_DIR");
        if (dir == null || dir.isBlank()) {
            String home = System.getProperty("jccl.home");
            if (home == null || home.isBlank()) {
                return null;
            }
            dir = Path.of(home, "jccl-tools", "target", "aot").toString();
        }
        return new AotCache(Path.of(dir), debug(env) ? err : null,
            env.getOrDefault("JCCL_DEBUG", "").equalsIgnoreCase("TRACE"));
    }

    private static boolean debug(Map<String, String> env) {
        String level = env.getOrDefault("JCCL_DEBUG", "").toUpperCase(Locale.ROOT);
        return level.equals("INFO") || level.equals("TRACE");
    }

    /** The directory caches are kept in. */
    public Path directory() {
        return directory;
    }

    /**
     * What to do for {@code command} (each rank's command line, before changes) with the ranks' environment.
     * Never throws: anything unexpected gives {@link Plan#none}.
     */
    public Plan plan(List<String> command, Map<String, String> env) {
        try {
            JavaCommand java = JavaCommand.parse(command, env);
            if (java == null) {
                return Plan.none("not a 'java -cp … Main' command");
            }
            String key = key(java, env);
            Path cache = directory.resolve("rank-" + key + ".aot");
            if (Files.isRegularFile(cache) && Files.size(cache) > 0) {
                note("using AOT cache " + cache);
                return new Plan(Mode.USE, cache, null, java, command, null, jvmLogs);
            }
            Path failed = directory.resolve("rank-" + key + ".failed");
            if (Files.exists(failed)) {
                note("no AOT cache: an earlier training for this command failed (" + failed + ")");
                return Plan.none("an earlier training for this command failed (" + failed + ")");
            }
            Files.createDirectories(directory);
            Path config = directory.resolve("rank-" + key + "." + ProcessHandle.current().pid() + ".aotconf");
            note("no AOT cache for this command yet: rank 0 records a training run (" + config + ")");
            return new Plan(Mode.TRAIN, cache, config, java, command, null, jvmLogs);
        } catch (IOException | RuntimeException e) {
            note("AOT cache not used: " + e);
            return Plan.none(e.toString());
        }
    }

    /**
     * After the job: when rank 0 trained and exited with 0, assembles the cache from its recording (the create
     * step) and moves it into place; otherwise drops the recording. Never throws.
     */
    public void finish(Plan plan, int rankZeroExit) {
        if (plan.mode != Mode.TRAIN) {
            return;
        }
        Path tmp = plan.cache.resolveSibling(plan.config.getFileName() + ".aot.tmp");
        try {
            if (rankZeroExit != 0 || !Files.isRegularFile(plan.config)) {
                note("AOT training skipped: rank 0 exited with " + rankZeroExit
                    + (Files.isRegularFile(plan.config) ? "" : " and wrote no recording"));
                if (rankZeroExit == 0) {
                    markFailed(plan, "rank 0 exited with 0 but wrote no recording");
                }
                return;
            }
            List<String> create = new ArrayList<>();
            create.add(plan.java.binary);
            create.addAll(plan.java.options);
            create.add("-XX:AOTMode=create");
            create.add("-XX:AOTConfiguration=" + plan.config);
            create.add("-XX:AOTCache=" + tmp);
            create.add("-Xlog:aot*=off");
            create.add("-Xlog:cds*=off");
            long start = System.nanoTime();
            ProcessBuilder pb = new ProcessBuilder(create).redirectErrorStream(true)
                .redirectOutput(ProcessBuilder.Redirect.DISCARD);
            Process p = pb.start();
            if (!p.waitFor(CREATE_TIMEOUT_S, TimeUnit.SECONDS)) {
                p.destroyForcibly();
                markFailed(plan, "create step ran past " + CREATE_TIMEOUT_S + " s");
                return;
            }
            if (p.exitValue() != 0 || !Files.isRegularFile(tmp) || Files.size(tmp) == 0) {
                markFailed(plan, "create step exited with " + p.exitValue() + " (" + String.join(" ", create) + ")");
                return;
            }
            try {
                Files.move(tmp, plan.cache, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
            } catch (AtomicMoveNotSupportedException e) {
                Files.move(tmp, plan.cache, StandardCopyOption.REPLACE_EXISTING);
            }
            note(String.format(Locale.ROOT, "wrote AOT cache %s (%.1f MB in %.1f s); later runs start from it",
                plan.cache, Files.size(plan.cache) / 1e6, (System.nanoTime() - start) / 1e9));
            prune();
        } catch (IOException | RuntimeException e) {
            markFailed(plan, e.toString());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } finally {
            deleteQuietly(plan.config);
            deleteQuietly(tmp);
        }
    }

    /** Deletes all but the newest {@link #KEEP} rank caches. */
    void prune() {
        List<Path> caches = new ArrayList<>();
        try (DirectoryStream<Path> ds = Files.newDirectoryStream(directory, "rank-*.aot")) {
            ds.forEach(caches::add);
        } catch (IOException e) {
            return;
        }
        caches.sort(Comparator.comparing(AotCache::modified).reversed());
        for (int i = KEEP; i < caches.size(); i++) {
            deleteQuietly(caches.get(i));
        }
    }

    private static FileTime modified(Path p) {
        try {
            return Files.getLastModifiedTime(p);
        } catch (IOException e) {
            return FileTime.fromMillis(0);
        }
    }

    private void markFailed(Plan plan, String why) {
        note("AOT cache not created: " + why + "; not retried for this command (same class path and main)");
        String name = plan.cache.getFileName().toString().replaceFirst("\\.aot$", ".failed");
        try {
            Files.writeString(plan.cache.resolveSibling(name), why + System.lineSeparator());
        } catch (IOException ignored) {
            // retried next time then
        }
    }

    private void note(String message) {
        if (log != null) {
            log.println("jccl run: " + message);
        }
    }

    private static void deleteQuietly(Path p) {
        try {
            Files.deleteIfExists(p);
        } catch (IOException ignored) {
            // best effort
        }
    }

    /** The cache key: a hash of everything that decides whether the JVM accepts a cache. */
    static String key(JavaCommand java, Map<String, String> env) throws IOException {
        MessageDigest md;
        try {
            md = MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
        StringBuilder sb = new StringBuilder("v1\n");
        Path binary = Path.of(java.binary).toRealPath();
        sb.append(binary).append('\n');
        Path modules = binary.getParent().resolveSibling("lib").resolve("modules");
        appendFile(sb, modules);
        for (String o : java.options) {
            for (String k : KEYED) {
                if (o.startsWith(k)) {
                    sb.append("opt ").append(o).append('\n');
                    break;
                }
            }
        }
        sb.append("main ").append(java.main).append('\n');
        sb.append("JDK_JAVA_OPTIONS ").append(env.getOrDefault("JDK_JAVA_OPTIONS", "")).append('\n');
        for (Path entry : java.classPath) {
            appendFile(sb, entry);
        }
        byte[] digest = md.digest(sb.toString().getBytes(StandardCharsets.UTF_8));
        return HexFormat.of().formatHex(digest, 0, 12);
    }

    private static void appendFile(StringBuilder sb, Path p) throws IOException {
        Path abs = p.toAbsolutePath().normalize();
        if (Files.isRegularFile(abs)) {
            sb.append(abs).append(' ').append(Files.size(abs)).append(' ')
                .append(Files.getLastModifiedTime(abs).toMillis()).append('\n');
        } else {
            sb.append(abs).append(" missing-or-directory\n");
        }
    }

    /** How a job uses the cache. */
    enum Mode { NONE, USE, TRAIN }

    /**
     * The decision for one job.
     *
     * @param mode none, use an existing cache, or train one with rank 0
     * @param cache the cache file for this command's key
     * @param config rank 0's recording (TRAIN only)
     * @param java the parsed command (null for NONE)
     * @param command the original command
     * @param why for NONE: why not
     * @param jvmLogs whether the JVM's AOT warnings are shown (on the ranks' stderr) rather than switched off
     */
    record Plan(Mode mode, Path cache, Path config, JavaCommand java, List<String> command, String why,
                boolean jvmLogs) {
        static Plan none(String why) {
            return new Plan(Mode.NONE, null, null, null, null, why, false);
        }

        /** Rank {@code rank}'s command with the AOT options added after the java binary. */
        List<String> commandFor(int rank, List<String> original) {
            if (mode == Mode.NONE || (mode == Mode.TRAIN && rank != 0)) {
                return original;
            }
            List<String> out = new ArrayList<>(original.size() + 4);
            out.add(original.getFirst());
            if (mode == Mode.USE) {
                out.add("-XX:AOTCache=" + cache);
            } else {
                out.add("-XX:AOTMode=record");
                out.add("-XX:AOTConfiguration=" + config);
            }
            if (jvmLogs) {
                // JCCL_DEBUG=TRACE: why the JVM refuses a cache, on stderr (not stdout, the program's output).
                out.add("-Xlog:aot=warning:stderr");
                out.add("-Xlog:cds=warning:stderr");
            } else {
                // A cache the JVM refuses (or a recording problem) must not print anything: the run goes on.
                out.add("-Xlog:aot*=off");
                out.add("-Xlog:cds*=off");
            }
            out.addAll(original.subList(1, original.size()));
            return out;
        }

        /** Whether {@code line} of rank 0's stdout is the JVM's own note about the recording (dropped). */
        boolean isJvmNote(int rank, String line) {
            return mode == Mode.TRAIN && rank == 0 && line.strip().startsWith("AOTConfiguration recorded:");
        }
    }

    /**
     * A {@code java} command line split into the binary, the JVM options before the main class, and the class
     * path entries (wildcards expanded as the java launcher does).
     *
     * @param binary the java binary (resolved on PATH when bare)
     * @param options everything between the binary and the main class or {@code -jar FILE}
     * @param classPath class path entries
     * @param main the main class, or {@code -jar FILE}
     */
    record JavaCommand(String binary, List<String> options, List<Path> classPath, String main) {
        /** The parsed command, or null when it is not a class-path launch of java. */
        static JavaCommand parse(List<String> command, Map<String, String> env) {
            if (command.isEmpty()) {
                return null;
            }
            String first = command.getFirst();
            if (!Path.of(first).getFileName().toString().equals("java")) {
                return null;
            }
            String binary = first.contains("/") ? first : onPath(first, env);
            if (binary == null) {
                return null;
            }
            List<String> options = new ArrayList<>();
            String cp = null;
            String main = null;
            for (int i = 1; i < command.size(); i++) {
                String a = command.get(i);
                if (a.equals("-jar")) {
                    if (i + 1 >= command.size()) {
                        return null;
                    }
                    cp = command.get(i + 1);
                    options.add(a);
                    options.add(cp);
                    main = "-jar " + cp;
                    break;
                }
                if (!a.startsWith("-")) {
                    if (a.endsWith(".java")) {
                        return null; // source launcher: classes are compiled in memory
                    }
                    main = a;
                    break;
                }
                if (a.equals("-m") || a.equals("--module") || a.startsWith("--module=") || a.equals("-p")
                    || a.startsWith("--module-path") || a.startsWith("-XX:AOT") || a.startsWith("-XX:SharedArchiveFile")
                    || a.startsWith("-Xshare") || a.equals("--dry-run") || a.equals("-version")
                    || a.equals("--version") || a.startsWith("-XX:ArchiveClassesAtExit")) {
                    return null; // module launches and explicit CDS/AOT settings are the user's business
                }
                options.add(a);
                if (TWO_WORD.contains(a)) {
                    if (i + 1 >= command.size()) {
                        return null;
                    }
                    String value = command.get(++i);
                    options.add(value);
                    if (a.equals("-cp") || a.equals("-classpath") || a.equals("--class-path")) {
                        cp = value;
                    }
                } else if (a.startsWith("--class-path=")) {
                    cp = a.substring("--class-path=".length());
                }
            }
            if (main == null || cp == null || cp.isEmpty()) {
                return null;
            }
            List<Path> entries = expand(cp);
            for (Path e : entries) {
                if (Files.isDirectory(e)) {
                    return null; // an AOT cache takes classes from jar files only
                }
            }
            return new JavaCommand(binary, List.copyOf(options), entries, main);
        }

        private static String onPath(String name, Map<String, String> env) {
            String path = env.getOrDefault("PATH", System.getenv("PATH"));
            if (path == null) {
                return null;
            }
            for (String dir : path.split(File.pathSeparator)) {
                Path candidate = Path.of(dir.isEmpty() ? "." : dir, name);
                if (Files.isExecutable(candidate)) {
                    return candidate.toString();
                }
            }
            return null;
        }

        /** Class path entries; {@code dir/*} becomes the dir's .jar/.JAR files (sorted: the key only). */
        static List<Path> expand(String cp) {
            List<Path> out = new ArrayList<>();
            for (String e : cp.split(File.pathSeparator, -1)) {
                if (e.isEmpty()) {
                    out.add(Path.of("."));
                } else if (e.equals("*") || e.endsWith(File.separator + "*")) {
                    Path dir = Path.of(e.length() == 1 ? "." : e.substring(0, e.length() - 2));
                    List<Path> jars = new ArrayList<>();
                    try (DirectoryStream<Path> ds = Files.newDirectoryStream(dir)) {
                        for (Path p : ds) {
                            String n = p.getFileName().toString();
                            if (n.endsWith(".jar") || n.endsWith(".JAR")) {
                                jars.add(p);
                            }
                        }
                    } catch (IOException ignored) {
                        // a missing directory contributes nothing, as for java
                    }
                    jars.sort(Comparator.naturalOrder());
                    out.addAll(jars);
                } else {
                    out.add(Path.of(e));
                }
            }
            return out;
        }
    }
}
