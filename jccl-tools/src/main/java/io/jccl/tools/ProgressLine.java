package io.jccl.tools;

import java.io.PrintStream;

/**
 * A one-line progress display on stderr ({@code \r}-redrawn), drawn only when enabled — callers enable it when stderr
 * is a terminal ({@link JcclRuntime#stderrIsTerminal()}), so logs and pipes never see it.
 */
public final class ProgressLine {
    private final PrintStream err;
    private final boolean enabled;
    private int width;

    /** A display on {@code err}; {@code enabled} false makes every call a no-op. */
    public ProgressLine(PrintStream err, boolean enabled) {
        this.err = err;
        this.enabled = enabled;
    }

    /** Whether anything is drawn at all. */
    public boolean enabled() {
        return enabled;
    }

    /** Replaces the line with {@code [text]}. */
    public synchronized void show(String text) {
        if (enabled) {
            String line = "  [" + text + "]";
            err.print("\r" + line + " ".repeat(Math.max(0, width - line.length())));
            err.flush();
            width = line.length();
        }
    }

    /** Erases the line (before other output goes to the terminal). */
    public synchronized void clear() {
        if (enabled && width > 0) {
            err.print("\r" + " ".repeat(width) + "\r");
            err.flush();
            width = 0;
        }
    }
}
