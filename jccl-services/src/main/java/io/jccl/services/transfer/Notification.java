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
}
