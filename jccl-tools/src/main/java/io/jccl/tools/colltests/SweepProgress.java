package io.jccl.tools.colltests;

import io.jccl.tools.ProgressLine;

import java.io.ByteArrayOutputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;

/**
 * The output of a launched {@code jccl tests} job with a progress line on the terminal while the sweep runs: the
 * launcher process counts the table rows rank 0 prints (it knows how many sizes there are) and draws
 * {@code [all_reduce_perf: 5/13 sizes, 12 s]}.
 *
 * <p>Never interleaved: the ranks' stdout (this stream) and their stderr ({@link #errors}) pass through here line by
 * line under one lock, and the progress line is erased before each line and redrawn after it, so a table row or a
 * warning never lands in the middle of the progress text. A ticker ({@link #startTicker}) redraws the elapsed time
 * every second, so the line does not freeze during the JIT warm-up, when rank 0 prints nothing for a while.
 */
final class SweepProgress extends OutputStream {
    private final PrintStream target;
    private final ProgressLine progress;
    private final String program;
    private final int sizes;
    private final long startNs = System.nanoTime();
    private final ByteArrayOutputStream line = new ByteArrayOutputStream();
    private int rows;
    private boolean headerSeen;
    private boolean done;
    private boolean closed;
    private Thread ticker;

    SweepProgress(PrintStream target, ProgressLine progress, String program, int sizes) {
        this.target = target;
        this.progress = progress;
        this.program = program;
        this.sizes = sizes;
    }

    /** Rows seen so far. */
    synchronized int rows() {
        return rows;
    }

    /**
     * A stream for the ranks' stderr that writes whole lines to {@code errTarget} under this stream's lock,
     * erasing the progress line before each and redrawing it after.
     */
    OutputStream errors(PrintStream errTarget) {
        return new OutputStream() {
            private final ByteArrayOutputStream errLine = new ByteArrayOutputStream();

            @Override
            public void write(int b) {
                synchronized (SweepProgress.this) {
                    errLine.write(b);
                    if (b == '\n') {
                        passLine(errTarget, errLine, false);
                    }
                }
            }

            @Override
            public void write(byte[] bytes, int offset, int length) {
                synchronized (SweepProgress.this) {
                    for (int i = offset; i < offset + length; i++) {
                        write(bytes[i]);
                    }
                }
            }

            @Override
            public void flush() {
                errTarget.flush();
            }

            @Override
            public void close() {
                synchronized (SweepProgress.this) {
                    if (errLine.size() > 0) {
                        passLine(errTarget, errLine, false);
                    }
                }
            }
        };
    }

    /** Redraws the progress line every {@code periodMs} until {@link #close}; a no-op when progress is off. */
    synchronized void startTicker(long periodMs) {
        if (!progress.enabled() || ticker != null || closed) {
            return;
        }
        ticker = Thread.ofPlatform().daemon().name("tests-progress").start(() -> {
            try {
                while (true) {
                    Thread.sleep(periodMs);
                    tick();
                }
            } catch (InterruptedException e) {
                // closed
            }
        });
    }

    /** Redraws the progress line with the current elapsed time (what the ticker calls). */
    synchronized void tick() {
        if (!done && !closed) {
            draw();
        }
    }

    @Override
    public synchronized void write(int b) {
        line.write(b);
        if (b == '\n') {
            passLine(target, line, true);
        }
    }

    @Override
    public synchronized void write(byte[] bytes, int offset, int length) {
        for (int i = offset; i < offset + length; i++) {
            write(bytes[i]);
        }
    }

    @Override
    public synchronized void flush() {
        target.flush();
    }

    @Override
    public void close() {
        Thread t;
        synchronized (this) {
            if (line.size() > 0) {
                passLine(target, line, true);
            }
            closed = true;
            progress.clear();
            t = ticker;
        }
        if (t != null) {
            t.interrupt();
        }
    }

    /** Erases the progress line, prints {@code buffer}'s line to {@code to}, then redraws (holding the lock). */
    private void passLine(PrintStream to, ByteArrayOutputStream buffer, boolean table) {
        String text = buffer.toString(StandardCharsets.UTF_8);
        buffer.reset();
        progress.clear();
        to.print(text);
        to.flush();
        if (table) {
            String trimmed = text.strip();
            if (trimmed.startsWith("# Out of bounds")) {
                done = true;
            } else if (trimmed.startsWith("#") && trimmed.contains("(B)")) {
                headerSeen = true;
            } else if (headerSeen && !trimmed.isEmpty() && !trimmed.startsWith("#")) {
                rows++;
            }
        }
        if (!done && !closed) {
            draw();
        }
    }

    private void draw() {
        long seconds = (System.nanoTime() - startNs) / 1_000_000_000L;
        progress.show(program + ": " + (headerSeen ? rows + "/" + sizes + " sizes" : "starting, JIT warm-up")
            + ", " + seconds + " s");
    }
}
