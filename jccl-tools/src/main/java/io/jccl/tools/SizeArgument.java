package io.jccl.tools;

import picocli.CommandLine;

import java.util.Locale;

/**
 * Size flags of the tools ({@code jccl tests -b/-e/-i}, {@code jccl perf -s/-I}): a whole number of bytes with an
 * optional K, M or G suffix (powers of 1024, as nccl-tests reads them). A malformed value is an error that names the
 * flag and says what is accepted (issue 16, bug #4: {@code -b 1Q} printed a raw "For input string").
 */
public final class SizeArgument {
    /** What a size may look like, for error messages. */
    public static final String ACCEPTED = "a size is a whole number of bytes with an optional K, M or G suffix "
        + "(powers of 1024), for example 8, 64K, 32M or 1G";

    private SizeArgument() {
    }

    /**
     * Parses {@code text} given to {@code flag}.
     *
     * @throws IllegalArgumentException naming the flag and the accepted form
     */
    public static long parse(String flag, String text) {
        try {
            return parse(text);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException(flag + " " + text + ": " + e.getMessage());
        }
    }

    private static long parse(String text) {
        String t = text == null ? "" : text.trim().toUpperCase(Locale.ROOT);
        int shift = 0;
        if (t.endsWith("K")) {
            shift = 10;
        } else if (t.endsWith("M")) {
            shift = 20;
        } else if (t.endsWith("G")) {
            shift = 30;
        }
        if (shift != 0) {
            t = t.substring(0, t.length() - 1);
        }
        if (t.isEmpty() || !t.chars().allMatch(c -> c >= '0' && c <= '9')) {
            throw new IllegalArgumentException(t.startsWith("-") ? "a size cannot be negative; " + ACCEPTED : ACCEPTED);
        }
        try {
            return Math.multiplyExact(Long.parseLong(t), 1L << shift);
        } catch (ArithmeticException | NumberFormatException e) {
            throw new IllegalArgumentException("too large (at most " + Long.MAX_VALUE + " bytes); " + ACCEPTED);
        }
    }

    /** picocli converter for {@code long} size options; picocli names the option in front of the message. */
    public static final class Converter implements CommandLine.ITypeConverter<Long> {
        /** For picocli. */
        public Converter() {
        }

        @Override
        public Long convert(String value) {
            try {
                return parse(value);
            } catch (IllegalArgumentException e) {
                throw new CommandLine.TypeConversionException("'" + value + "': " + e.getMessage());
            }
        }
    }

    /** picocli converter for {@code int} size options (at most 2 GiB - 1). */
    public static final class IntConverter implements CommandLine.ITypeConverter<Integer> {
        /** For picocli. */
        public IntConverter() {
        }

        @Override
        public Integer convert(String value) {
            long v = new Converter().convert(value);
            if (v > Integer.MAX_VALUE) {
                throw new CommandLine.TypeConversionException("'" + value + "': too large (at most "
                    + Integer.MAX_VALUE + " bytes); " + ACCEPTED);
            }
            return (int) v;
        }
    }
}
