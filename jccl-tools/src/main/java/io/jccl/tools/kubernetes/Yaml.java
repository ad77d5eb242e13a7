package io.jccl.tools.kubernetes;

import java.util.List;
import java.util.Map;

/**
 * A small YAML writer for manifests: block maps and sequences, strings always double-quoted (YAML's double-quoted
 * style takes JSON's escapes, so a value such as {@code "yes"}, {@code 0755} or {@code a: b} can never be read
 * back as a boolean, a number or a map), numbers and booleans plain. Keys are written plain: they are field names
 * this package chooses, checked here to need no quoting.
 */
final class Yaml {
    private Yaml() {
    }

    /** {@code documents} as one multi-document stream, each after a {@code ---} line. */
    static String write(List<Map<String, Object>> documents) {
        StringBuilder out = new StringBuilder();
        for (Map<String, Object> document : documents) {
            out.append("---\n");
            map(out, document, 0);
        }
        return out.toString();
    }

    private static void map(StringBuilder out, Map<?, ?> map, int indent) {
        for (Map.Entry<?, ?> entry : map.entrySet()) {
            pad(out, indent);
            out.append(key(entry.getKey())).append(':');
            value(out, entry.getValue(), indent);
        }
    }

    /** Writes what follows "key:" or "- ": a scalar on the same line, a collection on the lines below. */
    private static void value(StringBuilder out, Object value, int indent) {
        if (value instanceof Map<?, ?> m) {
            if (m.isEmpty()) {
                out.append(" {}\n");
            } else {
                out.append('\n');
                map(out, m, indent + 2);
            }
        } else if (value instanceof List<?> list) {
            if (list.isEmpty()) {
                out.append(" []\n");
            } else {
                out.append('\n');
                sequence(out, list, indent + 2);
            }
        } else {
            out.append(' ').append(scalar(value)).append('\n');
        }
    }

    private static void sequence(StringBuilder out, List<?> list, int indent) {
        for (Object item : list) {
            pad(out, indent);
            if (item instanceof Map<?, ?> m && !m.isEmpty()) {
                // "- first: v" then the other keys aligned under "first".
                out.append("- ");
                boolean first = true;
                for (Map.Entry<?, ?> entry : m.entrySet()) {
                    if (!first) {
                        pad(out, indent + 2);
                    }
                    first = false;
                    out.append(key(entry.getKey())).append(':');
                    value(out, entry.getValue(), indent + 2);
                }
            } else if (item instanceof List<?> || item instanceof Map<?, ?>) {
                throw new IllegalArgumentException("nested sequences are not used in manifests");
            } else {
                out.append("- ").append(scalar(item)).append('\n');
            }
        }
    }

    private static String key(Object key) {
        String k = key.toString();
        if (k.isEmpty() || !k.matches("[A-Za-z0-9][A-Za-z0-9._/-]*")) {
            throw new IllegalArgumentException("manifest key '" + k + "' would need quoting");
        }
        return k;
    }

    static String scalar(Object value) {
        if (value instanceof Integer || value instanceof Long || value instanceof Boolean) {
            return value.toString();
        }
        if (value == null) {
            throw new IllegalArgumentException("null in a manifest");
        }
        return quote(value.toString());
    }

    /** A YAML double-quoted scalar (JSON's escapes; YAML 1.2 reads JSON strings). */
    static String quote(String s) {
        StringBuilder out = new StringBuilder(s.length() + 2).append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                case '\t' -> out.append("\\t");
                case '\r' -> out.append("\\r");
                default -> {
                    if (c < 0x20 || c == 0x7f || (c >= 0x80 && c <= 0x9f) || c == '\u2028' || c == '\u2029') {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
                }
            }
        }
        return out.append('"').toString();
    }

    private static void pad(StringBuilder out, int indent) {
        out.append(" ".repeat(indent));
    }
}
