package io.jccl.collectives.tuning;

import io.jccl.collectives.Collective;

import java.util.EnumMap;
import java.util.EnumSet;
import java.util.Map;
import java.util.Set;

/**
 * {@code JCCL_ALGO} with NCCL's syntax: a list of algorithms applies to every collective ({@code ring,tree});
 * {@code func:list} restricts one collective, several separated by {@code ;} ({@code allreduce:ring;broadcast:tree});
 * a leading {@code ^} excludes instead ({@code ^direct}, {@code allreduce:^tree}).
 */
public final class AlgorithmFilter {
    private final Map<Collective, Set<Algorithm>> allowed = new EnumMap<>(Collective.class);
    private final String spec;

    private AlgorithmFilter(String spec) {
        this.spec = spec;
    }

    /** No restriction. */
    public static AlgorithmFilter none() {
        return new AlgorithmFilter("");
    }

    /** Parses a JCCL_ALGO value (null or blank: no restriction). */
    public static AlgorithmFilter parse(String spec) {
        AlgorithmFilter f = new AlgorithmFilter(spec == null ? "" : spec.trim());
        if (f.spec.isEmpty()) {
            return f;
        }
        for (String clause : f.spec.split(";")) {
            String c = clause.trim();
            if (c.isEmpty()) {
                continue;
            }
            Set<Collective> targets;
            String list;
            int colon = c.indexOf(':');
            if (colon >= 0) {
                targets = EnumSet.of(Collective.parse(c.substring(0, colon)));
                list = c.substring(colon + 1).trim();
            } else {
                targets = EnumSet.allOf(Collective.class);
                list = c;
            }
            boolean exclude = list.startsWith("^");
            if (exclude) {
                list = list.substring(1);
            }
            EnumSet<Algorithm> named = EnumSet.noneOf(Algorithm.class);
            for (String name : list.split(",")) {
                if (!name.isBlank()) {
                    try {
                        named.add(Algorithm.valueOf(name.trim().toUpperCase(java.util.Locale.ROOT)));
                    } catch (IllegalArgumentException e) {
                        throw new IllegalArgumentException("JCCL_ALGO=" + spec + ": unknown algorithm '" + name.trim()
                            + "' (known: ring, tree, rhd, rd, direct, hier, pairwise, linear, dissemination)");
                    }
                }
            }
            for (Collective t : targets) {
                EnumSet<Algorithm> set = exclude ? EnumSet.complementOf(named) : named.clone();
                f.allowed.put(t, set);
            }
        }
        return f;
    }

    /** Whether {@code algorithm} may run {@code collective}. */
    public boolean allows(Collective collective, Algorithm algorithm) {
        Set<Algorithm> set = allowed.get(collective);
        return set == null || set.contains(algorithm);
    }

    /** Whether the filter restricts {@code collective}. */
    public boolean restricts(Collective collective) {
        return allowed.containsKey(collective);
    }

    @Override
    public String toString() {
        return spec.isEmpty() ? "(none)" : spec;
    }
}
