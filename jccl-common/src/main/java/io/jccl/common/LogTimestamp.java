package io.jccl.common;

import java.time.Instant;
import java.time.ZoneId;
import java.time.ZonedDateTime;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * The line prefix of {@code JCCL_DEBUG_TIMESTAMP_FORMAT}: the strftime subset NCCL's
 * {@code NCCL_DEBUG_TIMESTAMP_FORMAT} users write ({@code %Y %m %d %H %M %S %F %T %j %z %s %%}), plus NCCL's
 * {@code %Nf} for N (1-9) digits of fractions of a second ({@code "[%F %T.%3f] "}). Local time. Anything else after
 * a {@code %} is refused with a message that lists what is accepted (strftime has dozens; silently printing them
 * raw would hide a typo).
 */
public final class LogTimestamp {
    /** What {@link #parse} accepts, for error messages and docs. */
    public static final String ACCEPTED = "%Y %m %d %H %M %S %F %T %j %z %s %% and %1f..%9f";

    private final String pattern;
    private final List<Object> parts;
    private final ZoneId zone;

    private LogTimestamp(String pattern, List<Object> parts, ZoneId zone) {
        this.pattern = pattern;
        this.parts = parts;
        this.zone = zone;
    }

    /**
     * Parses a format; text outside conversions is copied.
     *
     * @throws IllegalArgumentException naming the bad conversion and what is accepted
     */
    public static LogTimestamp parse(String pattern) {
        return parse(pattern, ZoneId.systemDefault());
    }

    static LogTimestamp parse(String pattern, ZoneId zone) {
        List<Object> parts = new ArrayList<>();
        StringBuilder literal = new StringBuilder();
        for (int i = 0; i < pattern.length(); i++) {
            char c = pattern.charAt(i);
            if (c != '%') {
                literal.append(c);
                continue;
            }
            if (i + 1 >= pattern.length()) {
                throw bad(pattern, "a lone % at the end");
            }
            char k = pattern.charAt(++i);
            if (k == '%') {
                literal.append('%');
                continue;
            }
            if (k >= '1' && k <= '9') {
                if (i + 1 >= pattern.length() || pattern.charAt(i + 1) != 'f') {
                    throw bad(pattern, "%" + k + " (digits must be followed by f: %3f is milliseconds)");
                }
                i++;
                flush(literal, parts);
                parts.add(Integer.valueOf(k - '0'));
                continue;
            }
            if ("YmdHMSFTjzs".indexOf(k) < 0) {
                throw bad(pattern, "%" + k);
            }
            flush(literal, parts);
            parts.add(Character.valueOf(k));
        }
        flush(literal, parts);
        return new LogTimestamp(pattern, List.copyOf(parts), zone);
    }

    private static void flush(StringBuilder literal, List<Object> parts) {
        if (!literal.isEmpty()) {
            parts.add(literal.toString());
            literal.setLength(0);
        }
    }

    private static IllegalArgumentException bad(String pattern, String what) {
        return new IllegalArgumentException("JCCL_DEBUG_TIMESTAMP_FORMAT=" + pattern + ": " + what
            + " is not supported; accepted: " + ACCEPTED);
    }

    /** The format as given. */
    public String pattern() {
        return pattern;
    }

    /** The prefix for {@code instant}. */
    public String format(Instant instant) {
        ZonedDateTime t = ZonedDateTime.ofInstant(instant, zone);
        StringBuilder sb = new StringBuilder(32);
        for (Object part : parts) {
            switch (part) {
                case String s -> sb.append(s);
                case Integer digits -> {
                    String nanos = String.format(Locale.ROOT, "%09d", t.getNano());
                    sb.append(nanos, 0, digits);
                }
                case Character k -> append(sb, k, t);
                default -> throw new IllegalStateException(part.toString());
            }
        }
        return sb.toString();
    }

    private static void append(StringBuilder sb, char k, ZonedDateTime t) {
        switch (k) {
            case 'Y' -> sb.append(t.getYear());
            case 'm' -> two(sb, t.getMonthValue());
            case 'd' -> two(sb, t.getDayOfMonth());
            case 'H' -> two(sb, t.getHour());
            case 'M' -> two(sb, t.getMinute());
            case 'S' -> two(sb, t.getSecond());
            case 'F' -> {
                sb.append(t.getYear()).append('-');
                two(sb, t.getMonthValue());
                sb.append('-');
                two(sb, t.getDayOfMonth());
            }
            case 'T' -> {
                two(sb, t.getHour());
                sb.append(':');
                two(sb, t.getMinute());
                sb.append(':');
                two(sb, t.getSecond());
            }
            case 'j' -> sb.append(String.format(Locale.ROOT, "%03d", t.getDayOfYear()));
            case 'z' -> {
                int seconds = t.getOffset().getTotalSeconds();
                sb.append(seconds < 0 ? '-' : '+');
                int abs = Math.abs(seconds) / 60;
                two(sb, abs / 60);
                two(sb, abs % 60);
            }
            case 's' -> sb.append(t.toEpochSecond());
            default -> throw new IllegalStateException("%" + k);
        }
    }

    private static void two(StringBuilder sb, int value) {
        if (value < 10) {
            sb.append('0');
        }
        sb.append(value);
    }
}
