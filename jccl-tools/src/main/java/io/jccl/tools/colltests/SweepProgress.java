package io.jccl.tools.colltests;

import io.jccl.tools.ProgressLine;

import java.io.ByteArrayOutputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;

/**
 * The stdout of a launched {@code jccl tests} job, passed through line by line, with a progress line on stderr
 * while the sweep runs: the launcher process counts the table rows rank 0 prints (it knows how many sizes there
 * are) and redraws {@code [all_reduce_perf: 5/13 sizes, 12 s]} after each, erasing it before every line of output.
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

    SweepProgress(PrintStream target, ProgressLine progress, String program, int sizes) {
        this.target = target;
        this.progress = progress;
        this.program = program;
        this.sizes = sizes;
    }

    /** Rows seen so far. */
    int rows() {
        return rows;
    }

    @Override
    public synchronized void write(int b) {
        line.write(b);
        if (b == '\n') {
            flushLine();
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
    public synchronized void close() {
        if (line.size() > 0) {
            flushLine();
        }
        progress.clear();
    }

    private void flushLine() {
        String text = line.toString(StandardCharsets.UTF_8);
        line.reset();
        progress.clear();
        target.print(text);
        target.flush();
        String trimmed = text.strip();
        if (trimmed.startsWith("# Out of bounds")) {
            done = true;
        } else if (trimmed.startsWith("#") && trimmed.contains("(B)")) {
            headerSeen = true;
        } else if (headerSeen && !trimmed.isEmpty() && !trimmed.startsWith("#")) {
            rows++;
        }
        if (!done) {
            long seconds = (System.nanoTime() - startNs) / 1_000_000_000L;
            progress.show(program + ": " + (headerSeen ? rows + "/" + sizes + " sizes" : "starting, JIT warm-up")
                + ", " + seconds + " s");
        }
    }
}
