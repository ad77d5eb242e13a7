package io.jccl.verbs;

/** Port states as {@code enum ibv_port_state}; the code is what ibv_devinfo prints in brackets. */
public enum PortState {
    /** No state change. */
    NOP(0),
    /** Link down. */
    DOWN(1),
    /** Link initializing. */
    INIT(2),
    /** Link armed. */
    ARMED(3),
    /** Link active. */
    ACTIVE(4),
    /** Active, deferred. */
    ACTIVE_DEFER(5);

    private final int code;

    PortState(int code) {
        this.code = code;
    }

    /** The ibv_port_state value. */
    public int code() {
        return code;
    }
}
