package io.jccl.common;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The two backends, the rule that picks one, levels, timestamps, the version and settings lines. */
class LogTest {
    private final ByteArrayOutputStream err = new ByteArrayOutputStream();
    private final PrintStream stderr = new PrintStream(err, true, StandardCharsets.UTF_8);

    /** A Log from {@code settings}; a null finder stands for the JDK's own (no application logging). */
    private Log create(Map<String, String> settings, System.LoggerFinder finder) {
        return Log.create(settings::get, () -> true,
            () -> finder != null ? finder : System.LoggerFinder.getLoggerFinder(), stderr);
    }

    private static List<RecordingLoggerFinder.Entry> recorded(Runnable logging) {
        RecordingLoggerFinder.print = false;
        RecordingLoggerFinder.ENTRIES.clear();
        logging.run();
        List<RecordingLoggerFinder.Entry> entries = List.copyOf(RecordingLoggerFinder.ENTRIES);
        RecordingLoggerFinder.ENTRIES.clear();
        return entries;
    }

    @Test
    void shouldRouteEveryLevelToTheSubsystemsSystemLogger() {
        Log log = create(Map.of("JCCL_LOGGER", "system", "JCCL_DEBUG_SUBSYS", "ALL"), new RecordingLoggerFinder());
        assertEquals(Log.Backend.SYSTEM, log.backend());
        List<RecordingLoggerFinder.Entry> entries = recorded(() -> {
            log.warn(3, Log.Subsys.NET, "w");
            log.info(-1, Log.Subsys.INIT, () -> "i");
            log.trace(0, Log.Subsys.COLL, "t");
            log.info(1, Log.Subsys.TUNING, "u");
        });
        assertEquals(List.of(
            new RecordingLoggerFinder.Entry(System.Logger.Level.WARNING, "io.jccl.net", "[3] w"),
            new RecordingLoggerFinder.Entry(System.Logger.Level.INFO, "io.jccl.init", "i"),
            new RecordingLoggerFinder.Entry(System.Logger.Level.TRACE, "io.jccl.coll", "[0] t"),
            new RecordingLoggerFinder.Entry(System.Logger.Level.INFO, "io.jccl.tuning", "[1] u")), entries);
        assertEquals("", err.toString(StandardCharsets.UTF_8), "nothing on stderr with the system backend");
    }

    @Test
    void shouldKeepPerOperationLinesOffByDefaultWithTheSystemBackend() {
        // an application logger at INFO must not receive a line per all-reduce (COLL), as NCCL keeps COLL off
        Log log = create(Map.of("JCCL_LOGGER", "system"), new RecordingLoggerFinder());
        assertFalse(log.enabled(Log.Level.INFO, Log.Subsys.COLL));
        assertFalse(log.enabled(Log.Level.INFO, Log.Subsys.TUNING));
        assertTrue(log.enabled(Log.Level.TRACE, Log.Subsys.NET));
        assertTrue(log.enabled(Log.Level.WARN, Log.Subsys.COLL));
    }

    @Test
    void shouldLetTheApplicationsLoggerDecideAndBuildNoMessageItRefuses() {
        Log log = create(Map.of("JCCL_LOGGER", "system", "JCCL_DEBUG_SUBSYS", "ALL"),
            new RecordingLoggerFinder(System.Logger.Level.INFO));
        assertTrue(log.enabled(Log.Level.INFO, Log.Subsys.COLL));
        assertFalse(log.enabled(Log.Level.TRACE, Log.Subsys.COLL));
        AtomicInteger built = new AtomicInteger();
        List<RecordingLoggerFinder.Entry> entries = recorded(() -> log.trace(0, Log.Subsys.COLL, () -> {
            built.incrementAndGet();
            return "expensive";
        }));
        assertEquals(List.of(), entries);
        assertEquals(0, built.get(), "a refused level must not build its message");
    }

    @Test
    void shouldStillFilterBySubsystemAndLevelWhenTheyAreSetWithTheSystemBackend() {
        Log log = create(Map.of("JCCL_LOGGER", "system", "JCCL_DEBUG", "INFO", "JCCL_DEBUG_SUBSYS", "NET"),
            new RecordingLoggerFinder());
        assertTrue(log.enabled(Log.Level.INFO, Log.Subsys.NET));
        assertFalse(log.enabled(Log.Level.INFO, Log.Subsys.COLL));
        assertFalse(log.enabled(Log.Level.TRACE, Log.Subsys.NET));
        assertTrue(log.enabled(Log.Level.WARN, Log.Subsys.COLL));
    }

    @Test
    void shouldPickTheBackendByTheDocumentedRule() {
        System.LoggerFinder application = new RecordingLoggerFinder();
        System.LoggerFinder jdk = System.LoggerFinder.getLoggerFinder(); // no service file in this JVM: the JDK's
        assertFalse(Log.isApplicationFinder(jdk), jdk.getClass().getName());
        assertTrue(Log.isApplicationFinder(application));
        assertFalse(Log.mayHaveApplicationFinder(), "no service file or providing module in this JVM");
        // the cheap probe says none could be installed: the JDK is not even asked
        assertEquals(Log.Backend.JCCL, Log.create(Map.<String, String>of()::get, () -> false, () -> {
            throw new AssertionError("asked for the LoggerFinder");
        }, stderr).backend());
        // auto: an application's finder wins unless JCCL_DEBUG asks for JCCL's own lines
        assertEquals(Log.Backend.SYSTEM, create(Map.of(), application).backend());
        assertEquals(Log.Backend.JCCL, create(Map.of("JCCL_DEBUG", "INFO"), application).backend());
        assertEquals(Log.Backend.JCCL, create(Map.of(), jdk).backend());
        assertEquals(Log.Backend.SYSTEM, create(Map.of("JCCL_LOGGER", "system"), jdk).backend());
        assertEquals(Log.Backend.SYSTEM, create(Map.of("JCCL_LOGGER", "SYSTEM", "JCCL_DEBUG", "INFO"), jdk)
            .backend());
        assertEquals(Log.Backend.JCCL, create(Map.of("JCCL_LOGGER", "jccl"), application).backend());
        assertEquals("", err.toString(StandardCharsets.UTF_8));
        assertEquals(Log.Backend.JCCL, create(Map.of("JCCL_LOGGER", "slf4j"), jdk).backend());
        assertTrue(err.toString(StandardCharsets.UTF_8).contains("JCCL_LOGGER=slf4j is not one of jccl, system, auto"),
            err.toString(StandardCharsets.UTF_8));
    }

    @Test
    void shouldPrintNcclStyleLinesAndBuildNothingWhenOff() {
        Log log = create(Map.of("JCCL_DEBUG", "INFO"), null);
        log.info(2, Log.Subsys.INIT, "hello\nworld");
        log.info(2, Log.Subsys.COLL, () -> {
            throw new AssertionError("COLL is not in the default INIT,NET");
        });
        log.trace(2, Log.Subsys.INIT, () -> {
            throw new AssertionError("TRACE is above INFO");
        });
        String[] lines = err.toString(StandardCharsets.UTF_8).split("\n");
        assertEquals(2, lines.length, err.toString(StandardCharsets.UTF_8));
        String prefix = Log.host() + ":" + ProcessIds.self() + ":" + Thread.currentThread().threadId()
            + " [2] JCCL INFO INIT ";
        assertEquals(prefix + "hello", lines[0]);
        assertEquals(prefix + "world", lines[1]);
    }

    @Test
    void shouldComplainAboutAnUnknownLevelAndKeepWarnings() {
        Log log = create(Map.of("JCCL_DEBUG", "VERBOSE"), null);
        assertTrue(err.toString(StandardCharsets.UTF_8).contains("JCCL_DEBUG=VERBOSE is not one of NONE, VERSION, "
            + "WARN, INFO, TRACE; using WARN"), err.toString(StandardCharsets.UTF_8));
        assertTrue(log.enabled(Log.Level.WARN, Log.Subsys.INIT));
        assertFalse(log.enabled(Log.Level.INFO, Log.Subsys.INIT));
    }

    @Test
    void shouldPrefixTimestampsInTheStrftimeSubset() {
        LogTimestamp t = LogTimestamp.parse("[%F %T.%3f %z] %Y/%m/%d %H%M%S %j %s %6f %% ", ZoneOffset.UTC);
        assertEquals("[2026-11-26 02:17:40.123 +0000] 2026/11/26 021740 330 1795659460 123456 % ",
            t.format(Instant.parse("2026-11-26T02:17:40.123456789Z")));
        IllegalArgumentException bad = assertThrows(IllegalArgumentException.class, () -> LogTimestamp.parse("%F %Q"));
        assertTrue(bad.getMessage().contains("%Q is not supported; accepted: %Y %m %d"), bad.getMessage());
        assertThrows(IllegalArgumentException.class, () -> LogTimestamp.parse("%3"));
        assertThrows(IllegalArgumentException.class, () -> LogTimestamp.parse("50%"));

        Log log = create(Map.of("JCCL_DEBUG_TIMESTAMP_FORMAT", "[%F %T] "), null);
        log.warn(-1, Log.Subsys.NET, "late");
        String line = err.toString(StandardCharsets.UTF_8);
        assertTrue(line.matches("\\[\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d] " + Pattern.quote(Log.host())
            + ":\\d+:\\d+ JCCL WARN late\\n"), line);
    }

    @Test
    void shouldIgnoreABadTimestampFormatWithAWarning() {
        Log log = create(Map.of("JCCL_DEBUG_TIMESTAMP_FORMAT", "%c"), null);
        log.warn(-1, Log.Subsys.NET, "x");
        String text = err.toString(StandardCharsets.UTF_8);
        assertTrue(text.startsWith("JCCL WARN JCCL_DEBUG_TIMESTAMP_FORMAT=%c: %c is not supported"), text);
        assertTrue(text.contains("\n" + Log.host() + ":"), text);
    }

    @Test
    void shouldListTheJcclSettingsInEffectAndHideSecrets() {
        Map<String, String> env = new HashMap<>(Map.of("JCCL_DEBUG", "INFO", "JCCL_AUTH_SECRET", "s3cr3t",
            "PATH", "/bin", "JCCL_ALGO", "tree"));
        Properties properties = new Properties();
        properties.setProperty("jccl.algo", "ring");
        properties.setProperty("java.version", "25");
        assertEquals(List.of(
            "JCCL_ALGO set by system property jccl.algo to ring",
            "JCCL_AUTH_SECRET set by environment to (hidden, 6 characters)",
            "JCCL_DEBUG set by environment to INFO"), Log.settingLines(env, properties));
    }

    @Test
    void shouldKnowItsVersion() {
        assertEquals("JCCL version " + Log.version() + "+java" + Runtime.version().feature(), Log.versionLine());
        assertTrue(Log.version().matches("\\d+\\.\\d+\\.\\d+.*"), Log.version());
    }

    // ------------------------------------------------------------------------------------------- forked JVMs

    private static List<String> runChild(Path extraClassPath, Map<String, String> env) throws Exception {
        String javaBin = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        String classPath = System.getProperty("java.class.path")
            + (extraClassPath != null ? java.io.File.pathSeparator + extraClassPath : "");
        List<String> command = List.of(javaBin, "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
            "-cp", classPath, LogChild.class.getName());
        ProcessBuilder pb = new ProcessBuilder(command).redirectErrorStream(true);
        pb.environment().keySet().removeIf(name -> name.startsWith("JCCL_"));
        pb.environment().putAll(env);
        Process p = pb.start();
        byte[] out = p.getInputStream().readAllBytes();
        assertTrue(p.waitFor(60, TimeUnit.SECONDS), "child did not end");
        String text = new String(out, StandardCharsets.UTF_8);
        assertEquals(0, p.exitValue(), text);
        return text.lines().toList();
    }

    @Test
    void shouldRouteToAnInstalledLoggerFinderInAFreshJvm(@TempDir Path dir) throws Exception {
        Path services = dir.resolve("META-INF/services/java.lang.System$LoggerFinder");
        Files.createDirectories(services.getParent());
        Files.writeString(services, RecordingLoggerFinder.class.getName() + "\n");
        List<String> lines = runChild(dir, Map.of());
        String all = String.join("\n", lines);
        assertTrue(lines.contains("backend=SYSTEM"), all);
        assertTrue(lines.contains("WARNING|io.jccl.net|[0] a warning"), all);
        assertTrue(lines.contains("INFO|io.jccl.init|[1] an info 42"), all);
        assertTrue(lines.contains("TRACE|io.jccl.net|[2] a trace"), all);
        assertEquals(1, lines.stream().filter(l -> l.startsWith("INFO|io.jccl.init|[0] JCCL version ")).count(), all);
        assertFalse(all.contains(" JCCL WARN "), "no NCCL-style line: " + all);

        // JCCL_DEBUG set: JCCL's own lines even with the application's finder installed
        List<String> own = runChild(dir, Map.of("JCCL_DEBUG", "INFO"));
        String ownText = String.join("\n", own);
        assertTrue(own.contains("backend=JCCL"), ownText);
        assertTrue(ownText.contains(" [0] JCCL WARN a warning"), ownText);
        assertTrue(ownText.contains(" [1] JCCL INFO INIT an info 42"), ownText);
        assertTrue(ownText.contains(" JCCL INFO INIT JCCL_DEBUG set by environment to INFO"), ownText);
        assertFalse(ownText.contains("|io.jccl."), ownText);
    }

    @Test
    void shouldPrintTheVersionLineOncePerProcessAtJcclDebugVersion() throws Exception {
        List<String> lines = runChild(null, Map.of("JCCL_DEBUG", "VERSION"));
        String all = String.join("\n", lines);
        assertEquals(List.of(Log.versionLine(), "backend=JCCL"), lines, all);
        // the default (WARN) prints no version line and no settings
        List<String> quiet = runChild(null, Map.of());
        assertTrue(quiet.stream().noneMatch(l -> l.contains("JCCL version")), String.join("\n", quiet));
        assertTrue(quiet.stream().anyMatch(l -> l.endsWith(" [0] JCCL WARN a warning")), String.join("\n", quiet));
    }

    // ------------------------------------------------------------------------------------- call-site check

    /**
     * A message at INFO or TRACE (off by default) must not be built when it is off: every such call that builds its
     * message ({@code "..." + x}) passes a Supplier or sits under an {@code enabled(...)} guard a few lines up.
     * Scans the main sources of every module.
     */
    @Test
    void shouldBuildNoInfoOrTraceMessageThatIsOff() throws IOException {
        Path root = Path.of(System.getProperty("basedir", System.getProperty("user.dir"))).toAbsolutePath()
            .getParent();
        Pattern call = Pattern.compile("\\.(info|trace)\\(\\s*[^,()]+,\\s*Log\\.Subsys\\.\\w+,\\s*(.*)");
        List<String> violations = new ArrayList<>();
        List<Path> files;
        try (Stream<Path> walk = Files.walk(root, 12)) {
            files = walk.filter(p -> p.toString().endsWith(".java") && p.toString().contains("/src/main/java/"))
                .toList();
        }
        assertTrue(files.size() > 50, "scanned too few files under " + root);
        for (Path file : files) {
            List<String> lines = Files.readAllLines(file);
            for (int i = 0; i < lines.size(); i++) {
                Matcher m = call.matcher(lines.get(i));
                if (!m.find()) {
                    continue;
                }
                String argument = m.group(2).trim();
                // the statement's text up to its ';' (calls span lines)
                StringBuilder statement = new StringBuilder(argument);
                for (int j = i + 1; j < lines.size() && !statement.toString().contains(";"); j++) {
                    statement.append(' ').append(lines.get(j).trim());
                }
                boolean builds = !argument.startsWith("()") && statement.toString().contains(" + ");
                boolean guarded = false;
                for (int j = Math.max(0, i - 4); j < i; j++) {
                    guarded |= lines.get(j).contains("enabled(");
                }
                if (builds && !guarded) {
                    violations.add(root.relativize(file) + ":" + (i + 1) + ": " + lines.get(i).trim());
                }
            }
        }
        assertEquals(List.of(), violations, "INFO/TRACE messages built even when off; pass () -> \"...\" instead");
    }
}
