package io.jccl.common;

import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.PrintStream;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.EnumSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.BooleanSupplier;
import java.util.function.Function;
import java.util.function.Supplier;

/**
 * JCCL's logging, NCCL_DEBUG style, with two backends.
 *
 * <p>Settings: {@code JCCL_DEBUG} = NONE | VERSION | WARN | INFO | TRACE; {@code JCCL_DEBUG_SUBSYS} = comma list of
 * INIT, COLL, NET, TUNING, ALL (a leading {@code ^} excludes); {@code JCCL_DEBUG_FILE} = a path where {@code %h} is
 * the host name and {@code %p} the pid (default stderr); {@code JCCL_DEBUG_TIMESTAMP_FORMAT} = a strftime-style
 * line prefix ({@link LogTimestamp}; default none); {@code JCCL_LOGGER} = jccl | system | auto (default auto).
 *
 * <p>Backend rule: {@code JCCL_LOGGER=jccl} prints JCCL's own lines ({@code host:pid:tid [rank] JCCL INFO SUBSYS
 * message}) to stderr or {@code JCCL_DEBUG_FILE}; {@code JCCL_LOGGER=system} sends every message to
 * {@code System.getLogger("io.jccl.<subsys>")} (io.jccl.init, io.jccl.coll, io.jccl.net, io.jccl.tuning) with WARN
 * as WARNING, INFO and VERSION as INFO, TRACE as TRACE, and the rank as a {@code [rank] } message prefix. Auto (the
 * default): JCCL's own lines when {@code JCCL_DEBUG} is set (someone asked for NCCL-style output) or when the
 * application installed no {@link System.LoggerFinder} of its own (the JDK's default one); otherwise (for example
 * slf4j-jdk-platform-logging or log4j-jpl on the class path) the system backend. With the system backend an unset
 * {@code JCCL_DEBUG} filters no level (the application's logger configuration decides) and {@code JCCL_DEBUG_SUBSYS}
 * keeps its default INIT,NET (COLL logs every operation at INFO; ask for it explicitly).
 *
 * <p>Cost when disabled: callers pass a {@link Supplier} ({@code info(rank, INIT, () -> "..." + x)}) or guard with
 * {@link #enabled}, so no message string is built for a level that is off.
 */
public final class Log {
    /** Verbosity levels. */
    public enum Level { NONE, VERSION, WARN, INFO, TRACE }

    /** Subsystems. */
    public enum Subsys { INIT, COLL, NET, TUNING }

    /** Where messages go (see the class comment for the rule that picks one). */
    public enum Backend {
        /** JCCL's own NCCL-style lines on stderr or {@code JCCL_DEBUG_FILE}. */
        JCCL,
        /** {@code System.getLogger("io.jccl.<subsys>")}. */
        SYSTEM
    }

    /** The prefix of the System.Logger names; the subsystem in lower case follows. */
    public static final String LOGGER_PREFIX = "io.jccl.";

    private static final String HOST = hostName();
    private static final long PID = ProcessIds.self();
    /** Once per process (NCCL prints its version and NCCL_* settings once per process too). */
    private static final AtomicBoolean VERSION_SHOWN = new AtomicBoolean();
    private static final AtomicBoolean SETTINGS_SHOWN = new AtomicBoolean();
    private static volatile Log global;

    private final Level level;
    private final Set<Subsys> subsystems;
    private final PrintStream out;
    private final Backend backend;
    private final LogTimestamp timestamp;
    private final System.Logger[] loggers;
    private String key = "";

    private Log(Level level, Set<Subsys> subsystems, PrintStream out, Backend backend, LogTimestamp timestamp,
                System.Logger[] loggers) {
        this.level = level;
        this.subsystems = subsystems;
        this.out = out;
        this.backend = backend;
        this.timestamp = timestamp;
        this.loggers = loggers;
    }

    /** The logger configured from the current JCCL_DEBUG* / JCCL_LOGGER settings (re-read when they change). */
    public static Log get() {
        Log log = global;
        String key = Config.value("JCCL_DEBUG", "") + "|" + Config.value("JCCL_DEBUG_SUBSYS", "")
            + "|" + Config.value("JCCL_DEBUG_FILE", "") + "|" + Config.value("JCCL_LOGGER", "")
            + "|" + Config.value("JCCL_DEBUG_TIMESTAMP_FORMAT", "");
        if (log == null || !key.equals(log.key)) {
            synchronized (Log.class) {
                log = global;
                if (log == null || !key.equals(log.key)) {
                    log = create(Config::value, Log::mayHaveApplicationFinder, System.LoggerFinder::getLoggerFinder,
                        System.err);
                    log.key = key;
                    global = log;
                }
            }
        }
        return log;
    }

    /**
     * A logger from settings read through {@code config} (names as the environment spells them; null when unset),
     * with {@code finder} supplying the System.LoggerFinder (asked only when the rule needs it: its first call costs
     * some 12 ms of start-up), {@code mayHaveFinder} saying cheaply whether the application could have installed one
     * at all, and {@code stderr} for JCCL's own lines and for complaints about bad settings. {@link #get()} uses the
     * process's settings.
     */
    static Log create(Function<String, String> config, BooleanSupplier mayHaveFinder,
                      Supplier<System.LoggerFinder> finder, PrintStream stderr) {
        String debug = setting(config, "JCCL_DEBUG");
        String subsys = setting(config, "JCCL_DEBUG_SUBSYS");
        Backend backend = backend(setting(config, "JCCL_LOGGER"), debug != null, mayHaveFinder, finder, stderr);
        Level level = backend == Backend.SYSTEM ? Level.TRACE : Level.WARN;
        if (debug != null) {
            try {
                level = Level.valueOf(debug.toUpperCase(Locale.ROOT));
            } catch (IllegalArgumentException e) {
                stderr.println("JCCL WARN JCCL_DEBUG=" + debug + " is not one of NONE, VERSION, WARN, INFO, TRACE; "
                    + "using " + level);
            }
        }
        // INIT,NET by default with either backend: COLL at INFO is a line per operation (NCCL keeps it off too), and
        // an application's logger at INFO would otherwise log every all-reduce.
        Set<Subsys> set = subsystems(subsys != null ? subsys : "INIT,NET");
        LogTimestamp timestamp = null;
        String format = config.apply("JCCL_DEBUG_TIMESTAMP_FORMAT");
        if (format != null && !format.isEmpty()) {
            try {
                timestamp = LogTimestamp.parse(format);
            } catch (IllegalArgumentException e) {
                stderr.println("JCCL WARN " + e.getMessage() + "; printing no timestamps");
            }
        }
        if (backend == Backend.SYSTEM) {
            System.LoggerFinder f = finder.get();
            System.Logger[] loggers = new System.Logger[Subsys.values().length];
            for (Subsys s : Subsys.values()) {
                loggers[s.ordinal()] = f.getLogger(loggerName(s), Log.class.getModule());
            }
            return new Log(level, set, stderr, backend, timestamp, loggers);
        }
        PrintStream target = stderr;
        String file = setting(config, "JCCL_DEBUG_FILE");
        if (file != null) {
            String path = file.replace("%h", HOST).replace("%p", Long.toString(PID));
            try {
                target = new PrintStream(new FileOutputStream(path, true), true, StandardCharsets.UTF_8);
            } catch (IOException e) {
                stderr.println("JCCL WARN cannot open JCCL_DEBUG_FILE " + path + ": " + e + "; logging to stderr");
            }
        }
        return new Log(level, set, target, backend, timestamp, null);
    }

    private static String setting(Function<String, String> config, String name) {
        String value = config.apply(name);
        return value == null || value.isBlank() ? null : value.trim();
    }

    /** The rule of the class comment. */
    private static Backend backend(String spec, boolean debugSet, BooleanSupplier mayHaveFinder,
                                   Supplier<System.LoggerFinder> finder, PrintStream stderr) {
        if (spec != null) {
            switch (spec.toLowerCase(Locale.ROOT)) {
                case "jccl" -> {
                    return Backend.JCCL;
                }
                case "system" -> {
                    return Backend.SYSTEM;
                }
                case "auto" -> {
                    // below
                }
                default -> stderr.println("JCCL WARN JCCL_LOGGER=" + spec + " is not one of jccl, system, auto; "
                    + "using auto");
            }
        }
        if (debugSet) {
            return Backend.JCCL;
        }
        return mayHaveFinder.getAsBoolean() && isApplicationFinder(finder.get()) ? Backend.SYSTEM : Backend.JCCL;
    }

    /**
     * Whether an application LoggerFinder could be installed: a service file for it on the class path or a
     * non-JDK module of the boot layer that provides one. Cheap (no service loading), so the common case, no
     * logging bridge at all, skips System.LoggerFinder.getLoggerFinder() and its ~12 ms of first-call start-up.
     */
    static boolean mayHaveApplicationFinder() {
        String service = System.LoggerFinder.class.getName();
        for (Module module : ModuleLayer.boot().modules()) {
            String name = module.getName();
            if (name.startsWith("java.") || name.startsWith("jdk.")) {
                continue;
            }
            // plain loops: a first lambda or stream in the JVM costs milliseconds of start-up
            for (java.lang.module.ModuleDescriptor.Provides provides : module.getDescriptor().provides()) {
                if (provides.service().equals(service)) {
                    return true;
                }
            }
        }
        try {
            return ClassLoader.getSystemClassLoader().getResource("META-INF/services/" + service) != null;
        } catch (RuntimeException e) {
            return true; // cannot tell: ask the JDK
        }
    }

    /**
     * Whether the application installed this LoggerFinder: the JDK's own (java.base's default, java.logging's JUL
     * bridge) are loaded by the boot or platform loader; SLF4J's or Log4j's come from the class path or module path.
     */
    static boolean isApplicationFinder(System.LoggerFinder finder) {
        ClassLoader loader = finder.getClass().getClassLoader();
        return loader != null && loader != ClassLoader.getPlatformClassLoader();
    }

    private static Set<Subsys> subsystems(String specText) {
        String spec = specText.toUpperCase(Locale.ROOT);
        boolean exclude = spec.startsWith("^");
        EnumSet<Subsys> set = exclude ? EnumSet.allOf(Subsys.class) : EnumSet.noneOf(Subsys.class);
        for (String part : (exclude ? spec.substring(1) : spec).split(",")) {
            String p = part.trim();
            if (p.isEmpty()) {
                continue;
            }
            if (p.equals("ALL")) {
                if (exclude) {
                    set.clear();
                } else {
                    set.addAll(EnumSet.allOf(Subsys.class));
                }
                continue;
            }
            try {
                Subsys s = Subsys.valueOf(p);
                if (exclude) {
                    set.remove(s);
                } else {
                    set.add(s);
                }
            } catch (IllegalArgumentException ignored) {
                // unknown subsystems (NCCL has many more) are ignored
            }
        }
        return set;
    }

    /** The System.Logger name of a subsystem: {@code io.jccl.init}, {@code io.jccl.coll}, ... */
    public static String loggerName(Subsys subsys) {
        return LOGGER_PREFIX + subsys.name().toLowerCase(Locale.ROOT);
    }

    /** The System.Logger level a JCCL level maps to (WARN → WARNING, VERSION and INFO → INFO, TRACE → TRACE). */
    public static System.Logger.Level systemLevel(Level at) {
        return switch (at) {
            case NONE -> System.Logger.Level.OFF;
            case VERSION, INFO -> System.Logger.Level.INFO;
            case WARN -> System.Logger.Level.WARNING;
            case TRACE -> System.Logger.Level.TRACE;
        };
    }

    /** The backend in use. */
    public Backend backend() {
        return backend;
    }

    /** Whether messages at {@code at} for {@code subsys} are printed (allocates nothing: safe on hot paths). */
    public boolean enabled(Level at, Subsys subsys) {
        if (at.ordinal() > level.ordinal() || level == Level.NONE || at == Level.NONE) {
            return false;
        }
        if (at != Level.WARN && at != Level.VERSION && !subsystems.contains(subsys)) {
            return false;
        }
        return loggers == null || loggers[subsys.ordinal()].isLoggable(systemLevel(at));
    }

    /** Prints a warning (always, unless JCCL_DEBUG=NONE or VERSION). */
    public void warn(int rank, Subsys subsys, String message) {
        log(Level.WARN, rank, subsys, message);
    }

    /** Prints an INFO message when enabled; pass a {@link Supplier} instead when the message is built. */
    public void info(int rank, Subsys subsys, String message) {
        log(Level.INFO, rank, subsys, message);
    }

    /** Prints an INFO message when enabled, building it only then. */
    public void info(int rank, Subsys subsys, Supplier<String> message) {
        log(Level.INFO, rank, subsys, message);
    }

    /** Prints a TRACE message when enabled; pass a {@link Supplier} instead when the message is built. */
    public void trace(int rank, Subsys subsys, String message) {
        log(Level.TRACE, rank, subsys, message);
    }

    /** Prints a TRACE message when enabled, building it only then. */
    public void trace(int rank, Subsys subsys, Supplier<String> message) {
        log(Level.TRACE, rank, subsys, message);
    }

    /** Prints at {@code at} when enabled; {@code rank} &lt; 0 omits the rank. */
    public void log(Level at, int rank, Subsys subsys, String message) {
        if (enabled(at, subsys)) {
            emit(at, rank, subsys, message);
        }
    }

    /** Prints at {@code at} when enabled, building the message only then; {@code rank} &lt; 0 omits the rank. */
    public void log(Level at, int rank, Subsys subsys, Supplier<String> message) {
        if (enabled(at, subsys)) {
            emit(at, rank, subsys, message.get());
        }
    }

    private void emit(Level at, int rank, Subsys subsys, String message) {
        if (loggers != null) {
            loggers[subsys.ordinal()].log(systemLevel(at), rank >= 0 ? "[" + rank + "] " + message : message);
            return;
        }
        String stamp = timestamp == null ? "" : timestamp.format(Instant.now());
        // NCCL_DEBUG=VERSION prints the bare version line; every other level gets the host:pid:tid prefix.
        String prefix = at == Level.VERSION ? stamp : stamp + HOST + ":" + PID + ":" + Thread.currentThread().threadId()
            + " " + (rank >= 0 ? "[" + rank + "] " : "") + "JCCL " + at + " "
            + (at == Level.INFO || at == Level.TRACE ? subsys + " " : "");
        synchronized (out) {
            for (String line : message.split("\n", -1)) {
                out.println(prefix + line);
            }
        }
    }

    /** The version line: {@code JCCL version 0.2.0+java25} (NCCL: {@code NCCL version 2.x.y+cuda12.z}). */
    public static String versionLine() {
        return "JCCL version " + version() + "+java" + Runtime.version().feature();
    }

    /** JCCL's version (from the build), e.g. {@code 0.2.0}. */
    public static String version() {
        return VersionHolder.VERSION;
    }

    /** Read on first use: the resource lookup costs ~2 ms of start-up that most processes never need. */
    private static final class VersionHolder {
        static final String VERSION = readVersion();
    }

    /**
     * Once per process, as NCCL does at communicator creation: the version line from rank 0's process only (one
     * line per job, not per rank; JCCL_DEBUG=VERSION prints it bare, INFO as an INIT message) and, at INFO, one
     * "JCCL_X set by environment to V" line per JCCL_* setting in every process. Each part counts as shown only once
     * it was enabled, so a later communicator under a more verbose setting still prints it.
     */
    public void announce(int rank) {
        boolean info = enabled(Level.INFO, Subsys.INIT);
        boolean bare = loggers == null && level == Level.VERSION;
        if (rank == 0 && (info || bare) && VERSION_SHOWN.compareAndSet(false, true)) {
            emit(bare ? Level.VERSION : Level.INFO, rank, Subsys.INIT, versionLine());
        }
        if (info && SETTINGS_SHOWN.compareAndSet(false, true)) {
            for (String line : settingLines(System.getenv(), System.getProperties())) {
                emit(Level.INFO, rank, Subsys.INIT, line);
            }
        }
    }

    /**
     * NCCL's "NCCL_X set by environment to V" lines for the JCCL_* variables and {@code jccl.*} system properties in
     * {@code env}/{@code properties} (sorted; a property wins, as in {@link Config}); values of names that hold a
     * secret (SECRET, PASSWORD, TOKEN) are hidden.
     */
    static List<String> settingLines(Map<String, String> env, Properties properties) {
        TreeMap<String, String> lines = new TreeMap<>();
        env.forEach((name, value) -> {
            if (name.startsWith("JCCL_")) {
                lines.put(name, name + " set by environment to " + shown(name, value));
            }
        });
        for (String property : properties.stringPropertyNames()) {
            if (property.startsWith("jccl.")) {
                String name = property.toUpperCase(Locale.ROOT).replace('.', '_');
                lines.put(name, name + " set by system property " + property + " to "
                    + shown(name, properties.getProperty(property)));
            }
        }
        return List.copyOf(lines.values());
    }

    private static String shown(String name, String value) {
        return name.contains("SECRET") || name.contains("PASSWORD") || name.contains("TOKEN")
            ? "(hidden, " + value.length() + " characters)" : value;
    }

    private static String readVersion() {
        try (InputStream in = Log.class.getResourceAsStream("version.properties")) {
            if (in != null) {
                Properties p = new Properties();
                p.load(in);
                String v = p.getProperty("version");
                if (v != null && !v.isBlank() && !v.startsWith("$")) {
                    return v.trim();
                }
            }
        } catch (IOException e) {
            // fall through to the manifest
        }
        String v = Log.class.getPackage().getImplementationVersion();
        return v != null ? v : "unknown";
    }

    /** The host name (or "localhost"). */
    public static String host() {
        return HOST;
    }

    /**
     * The kernel's host name (what gethostname(2) returns) from /proc: InetAddress.getLocalHost() gives the same
     * name but first resolves it, which costs 10-40 ms of start-up (resolver and InetAddress initialisation) and can
     * hang on a broken resolver. InetAddress only where /proc is missing.
     */
    private static String hostName() {
        try {
            String name = Files.readString(Path.of("/proc/sys/kernel/hostname")).trim();
            if (!name.isEmpty()) {
                return name;
            }
        } catch (IOException | RuntimeException e) {
            // not Linux
        }
        try {
            return InetAddress.getLocalHost().getHostName();
        } catch (IOException e) {
            String env = System.getenv("HOSTNAME");
            return env != null ? env : "localhost";
        }
    }
}
