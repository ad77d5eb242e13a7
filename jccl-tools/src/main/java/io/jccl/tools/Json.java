package io.jccl.tools;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * A minimal JSON writer for the tools' {@code --json} output (maps keep their insertion order), and a reader for
 * reading such files back ({@code jccl plot}).
 */
public final class Json {
    private Json() {
    }

    /** Writes {@code value} (Map, List, String, Number, Boolean or null) as indented JSON. */
    public static String write(Object value) {
        StringBuilder out = new StringBuilder();
        write(out, value, 0);
        return out.append('\n').toString();
    }

    private static void write(StringBuilder out, Object value, int indent) {
        switch (value) {
            case null -> out.append("null");
            case Map<?, ?> map -> {
                if (map.isEmpty()) {
                    out.append("{}");
                    return;
                }
                out.append("{\n");
                int i = 0;
                for (Map.Entry<?, ?> entry : map.entrySet()) {
                    pad(out, indent + 1);
                    string(out, String.valueOf(entry.getKey()));
                    out.append(": ");
                    write(out, entry.getValue(), indent + 1);
                    out.append(++i < map.size() ? ",\n" : "\n");
                }
                pad(out, indent);
                out.append('}');
            }
            case List<?> list -> {
                if (list.isEmpty()) {
                    out.append("[]");
                    return;
                }
                out.append("[\n");
                for (int i = 0; i < list.size(); i++) {
                    pad(out, indent + 1);
                    write(out, list.get(i), indent + 1);
                    out.append(i + 1 < list.size() ? ",\n" : "\n");
                }
                pad(out, indent);
                out.append(']');
            }
            case Double d -> out.append(Double.isFinite(d) ? String.format(Locale.ROOT, "%.6f", d) : "null");
            case Float f -> write(out, f.doubleValue(), indent);
            case Number n -> out.append(n);
            case Boolean b -> out.append(b);
            default -> string(out, value.toString());
        }
    }

    private static void pad(StringBuilder out, int indent) {
        out.append("  ".repeat(indent));
    }

    private static void string(StringBuilder out, String s) {
        out.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                case '\r' -> out.append("\\r");
                case '\t' -> out.append("\\t");
                default -> {
                    if (c < 0x20) {
                        out.append(String.format(Locale.ROOT, "\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
                }
            }
        }
        out.append('"');
    }

    /**
     * Parses JSON text into Map (insertion order), List, String, Double, Boolean or null.
     *
     * @throws IllegalArgumentException with the offset, when the text is not JSON
     */
    public static Object parse(String text) {
        Reader reader = new Reader(text);
        Object value = reader.value();
        reader.skipSpace();
        if (reader.at < text.length()) {
            throw reader.error("trailing characters");
        }
        return value;
    }

    private static final class Reader {
        private final String text;
        private int at;

        Reader(String text) {
            this.text = text;
        }

        IllegalArgumentException error(String what) {
            return new IllegalArgumentException("not JSON: " + what + " at offset " + at);
        }

        void skipSpace() {
            while (at < text.length() && Character.isWhitespace(text.charAt(at))) {
                at++;
            }
        }

        char next() {
            skipSpace();
            if (at >= text.length()) {
                throw error("unexpected end");
            }
            return text.charAt(at);
        }

        void expect(char c) {
            if (next() != c) {
                throw error("expected '" + c + "'");
            }
            at++;
        }

        Object value() {
            char c = next();
            switch (c) {
                case '{' -> {
                    at++;
                    Map<String, Object> map = new LinkedHashMap<>();
                    if (next() == '}') {
                        at++;
                        return map;
                    }
                    do {
                        String key = string();
                        expect(':');
                        map.put(key, value());
                    } while (comma('}'));
                    return map;
                }
                case '[' -> {
                    at++;
                    List<Object> list = new ArrayList<>();
                    if (next() == ']') {
                        at++;
                        return list;
                    }
                    do {
                        list.add(value());
                    } while (comma(']'));
                    return list;
                }
                case '"' -> {
                    return string();
                }
                default -> {
                    for (String word : new String[] {"true", "false", "null"}) {
                        if (text.startsWith(word, at)) {
                            at += word.length();
                            return word.equals("null") ? null : Boolean.valueOf(word);
                        }
                    }
                    int start = at;
                    while (at < text.length() && "+-0123456789.eE".indexOf(text.charAt(at)) >= 0) {
                        at++;
                    }
                    try {
                        return Double.valueOf(text.substring(start, at));
                    } catch (NumberFormatException e) {
                        at = start;
                        throw error("unexpected character '" + c + "'");
                    }
                }
            }
        }

        boolean comma(char close) {
            char c = next();
            at++;
            if (c == ',') {
                return true;
            }
            if (c == close) {
                return false;
            }
            at--;
            throw error("expected ',' or '" + close + "'");
        }

        String string() {
            expect('"');
            StringBuilder out = new StringBuilder();
            while (true) {
                if (at >= text.length()) {
                    throw error("unterminated string");
                }
                char c = text.charAt(at++);
                if (c == '"') {
                    return out.toString();
                }
                if (c != '\\') {
                    out.append(c);
                    continue;
                }
                if (at >= text.length()) {
                    throw error("unterminated escape");
                }
                char e = text.charAt(at++);
                switch (e) {
                    case 'n' -> out.append('\n');
                    case 'r' -> out.append('\r');
                    case 't' -> out.append('\t');
                    case 'b' -> out.append('\b');
                    case 'f' -> out.append('\f');
                    case 'u' -> {
                        if (at + 4 > text.length()) {
                            throw error("short \\u escape");
                        }
                        out.append((char) Integer.parseInt(text.substring(at, at + 4), 16));
                        at += 4;
                    }
                    default -> out.append(e);
                }
            }
        }
    }
}
