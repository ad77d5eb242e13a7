package io.jccl.services.transfer;

/**
 * A message a peer attached to a batch ({@link TransferBatch#notify(byte[])}): it arrives after every transfer of that
 * batch has landed in this process's memory (NIXL's {@code genNotif}/{@code getNotifs}).
 *
 * @param fromRank the rank that submitted the batch
 * @param message the bytes it attached (at most {@link TransferEngine#NOTIFICATION_MAX_BYTES})
 */
public record Notification(int fromRank, byte[] message) {
    /** The message as UTF-8 text. */
    public String text() {
        return new String(message, java.nio.charset.StandardCharsets.UTF_8);
    }

    /**
     * The immediate data of a {@link TransferBatch#notifyImmediate(int)} notification (its four message bytes,
     * big-endian).
     *
     * @throws IllegalStateException when the message is not four bytes long
     */
    public int immediateData() {
        if (message.length != Integer.BYTES) {
            throw new IllegalStateException("a " + message.length + "-byte notification carries no immediate data");
        }
        return ((message[0] & 0xFF) << 24) | ((message[1] & 0xFF) << 16) | ((message[2] & 0xFF) << 8)
            | (message[3] & 0xFF);
    }
}
