package io.jccl.verbs.spi;

import java.util.Arrays;

/**
 * An int-keyed table with lock-free reads: lookups on the data path read an immutable open-addressing array;
 * registrations (rare) copy it. No boxing, no allocation per lookup.
 *
 * @param <V> value type
 */
public final class KeyTable<V> {
    private record Table(int[] keys, Object[] values, int size) {
    }

    private volatile Table table = new Table(new int[16], new Object[16], 0);

    /** The value for {@code key}, or null. Key 0 is never stored. */
    @SuppressWarnings("unchecked")
    public V get(int key) {
        if (key == 0) {
            return null;
        }
        Table t = table;
        int mask = t.keys.length - 1;
        for (int i = mix(key) & mask; ; i = (i + 1) & mask) {
            int k = t.keys[i];
            if (k == key) {
                return (V) t.values[i];
            }
            if (k == 0) {
                return null;
            }
        }
    }

    /** Stores a value under a new key; returns false (storing nothing) when the key is 0 or taken. */
    public synchronized boolean putIfAbsent(int key, V value) {
        if (key == 0 || get(key) != null) {
            return false;
        }
        Table t = table;
        int capacity = t.keys.length;
        while ((t.size + 1) * 2 > capacity) {
            capacity *= 2;
        }
        int[] keys = new int[capacity];
        Object[] values = new Object[capacity];
        for (int i = 0; i < t.keys.length; i++) {
            if (t.keys[i] != 0) {
                insert(keys, values, t.keys[i], t.values[i]);
            }
        }
        insert(keys, values, key, value);
        table = new Table(keys, values, t.size + 1);
        return true;
    }

    /** Removes a key; returns the value it had, or null. */
    @SuppressWarnings("unchecked")
    public synchronized V remove(int key) {
        V old = get(key);
        if (old == null) {
            return null;
        }
        Table t = table;
        int[] keys = new int[t.keys.length];
        Object[] values = new Object[t.keys.length];
        for (int i = 0; i < t.keys.length; i++) {
            if (t.keys[i] != 0 && t.keys[i] != key) {
                insert(keys, values, t.keys[i], t.values[i]);
            }
        }
        table = new Table(keys, values, t.size - 1);
        return old;
    }

    /** Number of entries. */
    public int size() {
        return table.size;
    }

    /** A snapshot of the values. */
    @SuppressWarnings("unchecked")
    public java.util.List<V> values() {
        Table t = table;
        return Arrays.stream(t.values).filter(v -> v != null).map(v -> (V) v).toList();
    }

    private static void insert(int[] keys, Object[] values, int key, Object value) {
        int mask = keys.length - 1;
        int i = mix(key) & mask;
        while (keys[i] != 0) {
            i = (i + 1) & mask;
        }
        keys[i] = key;
        values[i] = value;
    }

    private static int mix(int key) {
        int h = key * 0x9E3779B9;
        return h ^ (h >>> 16);
    }
}
