package io.jccl.collectives;

/** The kinds of operations a communicator runs (what signatures and the flight recorder name). */
public enum Collective {
    /** All-reduce. */
    ALL_REDUCE("allReduce"),
    /** Broadcast. */
    BROADCAST("broadcast"),
    /** Reduce to a root. */
    REDUCE("reduce"),
    /** All-gather. */
    ALL_GATHER("allGather"),
    /** Reduce-scatter. */
    REDUCE_SCATTER("reduceScatter"),
    /** All-to-all. */
    ALL_TO_ALL("allToAll"),
    /** Gather to a root. */
    GATHER("gather"),
    /** Scatter from a root. */
    SCATTER("scatter"),
    /** Barrier. */
    BARRIER("barrier"),
    /** Point-to-point send/receive group. */
    SEND_RECV("sendRecv"),
    /** Window registration and one-sided traffic. */
    WINDOW("window");

    private final String displayName;

    Collective(String displayName) {
        this.displayName = displayName;
    }

    /** camelCase name as in the API. */
    public String displayName() {
        return displayName;
    }

    /** Parses NCCL-style names ({@code allreduce}, {@code AllReduce}, {@code all_reduce}). */
    public static Collective parse(String name) {
        String n = name.trim().replace("_", "").toLowerCase(java.util.Locale.ROOT);
        for (Collective c : values()) {
            if (c.displayName.toLowerCase(java.util.Locale.ROOT).equals(n)) {
                return c;
            }
        }
        throw new IllegalArgumentException("unknown collective '" + name + "'");
    }
}
