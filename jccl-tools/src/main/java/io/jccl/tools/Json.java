package io.jccl.tools;

import java.util.List;
import java.util.Locale;
import java.util.Map;

/** A minimal JSON writer for the tools' {@code --json} output (maps keep their insertion order). */
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
}
