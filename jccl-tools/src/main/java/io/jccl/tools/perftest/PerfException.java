package io.jccl.tools.perftest;

/** A perf run failed (bad completion, peer gone, impossible parameters); the message says what happened. */
public final class PerfException extends RuntimeException {
    /** Creates the exception. */
    public PerfException(String message) {
        super(message);
    }
}
