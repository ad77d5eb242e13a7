package io.jccl.common;

/**
 * Reads settings the NCCL way: an environment variable {@code JCCL_FOO}, overridable by the system property
 * {@code jccl.foo} (handy in tests).
 */
public final class Config {
    private Config() {
    }

    /** The raw value, or null when neither the property nor the variable is set. */
    public static String value(String envName) {
        String property = System.getProperty(propertyName(envName));
        if (property != null) {
            return property;
        }
        return System.getenv(envName);
    }

    /** The value, or {@code fallback}. */
    public static String value(String envName, String fallback) {
        String value = value(envName);
        return value == null || value.isBlank() ? fallback : value.trim();
    }

    /** A numeric value, or {@code fallback}; a malformed number is an error that names the variable. */
    public static long longValue(String envName, long fallback) {
        String value = value(envName);
        if (value == null || value.isBlank()) {
            return fallback;
        }
        try {
            return Long.parseLong(value.trim());
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(envName + "=" + value + " is not a number", e);
        }
    }

    /** The system-property spelling of an environment variable: JCCL_SPIN_US → jccl.spin.us. */
    public static String propertyName(String envName) {
        return envName.toLowerCase(java.util.Locale.ROOT).replace('_', '.');
    }
}
