package io.jccl.verbs;

/** Send flags with the bit values of {@code enum ibv_send_flags}. */
public final class SendFlag {
    /** Fence: wait for earlier RDMA READs and atomics of this QP to complete before starting. */
    public static final int FENCE = 1;
    /** Generate a completion on success (errors always generate one). */
    public static final int SIGNALED = 2;
    /** Solicited event at the receiver; valid for SEND and WRITE_WITH_IMM. */
    public static final int SOLICITED = 4;
    /** Copy the payload at post time; the lkey is not checked and the buffer is reusable on return. */
    public static final int INLINE = 8;

    private SendFlag() {
    }

    /** Readable list of the flags in {@code flags}. */
    public static String describe(int flags) {
        StringBuilder sb = new StringBuilder();
        if ((flags & FENCE) != 0) {
            sb.append("FENCE|");
        }
        if ((flags & SIGNALED) != 0) {
            sb.append("SIGNALED|");
        }
        if ((flags & SOLICITED) != 0) {
            sb.append("SOLICITED|");
        }
        if ((flags & INLINE) != 0) {
            sb.append("INLINE|");
        }
        return sb.isEmpty() ? "none" : sb.substring(0, sb.length() - 1);
    }
}
