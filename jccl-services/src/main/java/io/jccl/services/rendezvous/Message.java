package io.jccl.services.rendezvous;

/**
 * A control message another rank sent with {@link Rendezvous#send(int, byte[])}.
 *
 * @param from the sending rank
 * @param payload its bytes (at most {@link Rendezvous#MESSAGE_MAX_BYTES})
 */
public record Message(int from, byte[] payload) {
}
