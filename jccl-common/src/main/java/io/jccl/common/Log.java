package io.jccl.common;

import java.io.FileOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.EnumSet;
import java.util.Locale;
import java.util.Set;

/**
 * NCCL_DEBUG-style logging: {@code JCCL_DEBUG} = NONE | VERSION | WARN (default) | INFO | TRACE,
 * {@code JCCL_DEBUG_SUBSYS} = comma list of INIT, COLL, NET, TUNING, ALL (a leading {@code ^} excludes; default
 * INIT,NET), {@code JCCL_DEBUG_FILE} = a path where {@code %h} is the host name and {@code %p} the pid
 * (default stderr). Lines read {@code host:pid:tid [rank] JCCL INFO message}.
 */
public final class Log {
    /** Verbosity levels. */
    public enum Level { NONE, VERSION, WARN, INFO, TRACE }

    /** Subsystems. */
    public enum Subsys { INIT, COLL, NET, TUNING }

    private static final String HOST = hostName();
    private static final long PID = ProcessIds.self();
    private static volatile Log global;

    private final Level level;
    private final Set<Subsys> subsystems;
    private final PrintStream out;

    private Log(Level level, Set<Subsys> subsystems, PrintStream out) {
        this.level = level;
        this.subsystems = subsystems;
        this.out = out;
    }

    /** The logger configured from the current JCCL_DEBUG* settings (re-read when they change). */
    public static Log get() {
        Log log = global;
        String key = Config.value("JCCL_DEBUG", "WARN") + "|" + Config.value("JCCL_DEBUG_SUBSYS", "")
            + "|" + Config.value("JCCL_DEBUG_FILE", "");
        if (log == null || !key.equals(log.key)) {
            synchronized (Log.class) {
                log = global;
                if (log == null || !key.equals(log.key)) {
                    log = fromConfig();
                    log.key = key;
                    global = log;
                }
            }
        }
        return log;
    }

    private String key = "";

    private static Log fromConfig() {
        Level level;
        try {
            level = Level.valueOf(Config.value("JCCL_DEBUG", "WARN").toUpperCase(Locale.ROOT));
        } catch (IllegalArgumentException e) {
            level = Level.WARN;
        }
        String spec = Config.value("JCCL_DEBUG_SUBSYS", "INIT,NET").toUpperCase(Locale.ROOT);
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
        PrintStream out = System.err;
        String file = Config.value("JCCL_DEBUG_FILE");
        if (file != null && !file.isBlank()) {
            String path = file.replace("%h", HOST).replace("%p", Long.toString(PID));
            try {
                out = new PrintStream(new FileOutputStream(path, true), true, StandardCharsets.UTF_8);
            } catch (IOException e) {
                System.err.println("JCCL WARN cannot open JCCL_DEBUG_FILE " + path + ": " + e + "; logging to stderr");
            }
        }
        return new Log(level, set, out);
    }

    /** Whether messages at {@code at} for {@code subsys} are printed. */
    public boolean enabled(Level at, Subsys subsys) {
        if (at.ordinal() > level.ordinal() || level == Level.NONE) {
            return false;
        }
        return at == Level.WARN || at == Level.VERSION || subsystems.contains(subsys);
    }

    /** Prints a warning (always, unless JCCL_DEBUG=NONE). */
    public void warn(int rank, Subsys subsys, String message) {
        log(Level.WARN, rank, subsys, message);
    }

    /** Prints an INFO message when enabled. */
    public void info(int rank, Subsys subsys, String message) {
        log(Level.INFO, rank, subsys, message);
    }

    /** Prints a TRACE message when enabled. */
    public void trace(int rank, Subsys subsys, String message) {
        log(Level.TRACE, rank, subsys, message);
    }

    /** Prints at {@code at} when enabled; {@code rank} &lt; 0 omits the rank. */
    public void log(Level at, int rank, Subsys subsys, String message) {
        if (!enabled(at, subsys)) {
            return;
        }
        String prefix = HOST + ":" + PID + ":" + Thread.currentThread().threadId() + " " + (rank >= 0 ? "[" + rank + "] " : "")
            + "JCCL " + at + " " + (at == Level.INFO || at == Level.TRACE ? subsys + " " : "");
        synchronized (out) {
            for (String line : message.split("\n", -1)) {
                out.println(prefix + line);
            }
        }
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
