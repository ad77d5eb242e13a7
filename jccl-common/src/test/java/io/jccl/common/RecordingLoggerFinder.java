package io.jccl.common;

import java.util.List;
import java.util.ResourceBundle;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.function.Supplier;

/**
 * A System.LoggerFinder as an application's logging bridge would install (SLF4J's, Log4j's): it records every
 * message, and {@link #print} (the forked JVM of {@link LogTest}) echoes each as {@code LEVEL|logger|message} on
 * stdout. Loggers accept everything down to {@link #threshold}.
 */
public final class RecordingLoggerFinder extends System.LoggerFinder {
    /** One message as it arrived. */
    public record Entry(System.Logger.Level level, String logger, String message) {
    }

    /** Everything logged through any instance. */
    public static final List<Entry> ENTRIES = new CopyOnWriteArrayList<>();

    /** Whether to echo each message to stdout (the forked JVM). */
    public static volatile boolean print = true;

    private final System.Logger.Level threshold;

    /** The finder the service file names: accepts every level. */
    public RecordingLoggerFinder() {
        this(System.Logger.Level.ALL);
    }

    /** A finder whose loggers accept {@code threshold} and above. */
    public RecordingLoggerFinder(System.Logger.Level threshold) {
        this.threshold = threshold;
    }

    @Override
    public System.Logger getLogger(String name, Module module) {
        return new System.Logger() {
            @Override
            public String getName() {
                return name;
            }

            @Override
            public boolean isLoggable(Level level) {
                return level.getSeverity() >= threshold.getSeverity();
            }

            @Override
            public void log(Level level, ResourceBundle bundle, String msg, Throwable thrown) {
                record(level, msg);
            }

            @Override
            public void log(Level level, ResourceBundle bundle, String format, Object... params) {
                record(level, params == null || params.length == 0 ? format
                    : java.text.MessageFormat.format(format, params));
            }

            @Override
            public void log(Level level, Supplier<String> msgSupplier) {
                record(level, msgSupplier.get());
            }

            private void record(Level level, String msg) {
                if (!isLoggable(level)) {
                    return;
                }
                ENTRIES.add(new Entry(level, name, msg));
                if (print) {
                    System.out.println(level + "|" + name + "|" + msg);
                }
            }
        };
    }
}
