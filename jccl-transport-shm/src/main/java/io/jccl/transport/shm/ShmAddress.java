package io.jccl.transport.shm;

import io.jccl.verbs.VerbsException;

import java.util.HexFormat;

/**
 * The provider-specific part of an shm {@link io.jccl.verbs.Endpoint}:
 * {@code shm2|<boot id>|<pid>|<context file>|<queue-pair file>|<token hex>}. The boot id identifies the host, so an
 * endpoint from another host is refused with a clear message instead of failing on a missing file.
 *
 * @param bootId the owner's host identity
 * @param pid the owner's process id
 * @param contextFile name of the owner's context control file
 * @param queuePairFile name of the owner's queue-pair file
 * @param token random secret the queue-pair file must carry
 */
public record ShmAddress(String bootId, long pid, String contextFile, String queuePairFile, long token) {
    /** Version 2: file names carry the owner id, not the start time (an older peer's endpoint is refused). */
    private static final String VERSION = "shm2";

    /** The text form. */
    public String encode() {
        return VERSION + "|" + bootId + "|" + pid + "|" + contextFile + "|" + queuePairFile + "|"
            + HexFormat.of().toHexDigits(token);
    }

    /**
     * Parses and checks an address: well-formed, of this host, and naming files the way the provider names them
     * (no path separators: an endpoint cannot point the provider at arbitrary files).
     */
    public static ShmAddress parse(String text) {
        String[] parts = text.split("\\|", -1);
        if (parts.length != 6 || !parts[0].equals(VERSION)) {
            throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT,
                "not an shm endpoint address: '" + text + "' (expected " + VERSION + "|boot|pid|ctx|qp|token)");
        }
        ShmAddress address;
        try {
            address = new ShmAddress(parts[1], Long.parseLong(parts[2]), parts[3], parts[4],
                HexFormat.fromHexDigitsToLong(parts[5]));
        } catch (RuntimeException e) {
            throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT, "malformed shm endpoint address: '"
                + text + "'", e);
        }
        if (!ShmFiles.isValidName(address.contextFile, ShmFiles.CONTEXT)
            || !ShmFiles.isValidName(address.queuePairFile, ShmFiles.QUEUE_PAIR)
            || ShmFiles.ownerPid(address.contextFile) != address.pid
            || ShmFiles.ownerPid(address.queuePairFile) != address.pid
            || ShmFiles.ownerId(address.contextFile) != ShmFiles.ownerId(address.queuePairFile)) {
            throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT,
                "shm endpoint address names files the provider would not create: '" + text + "'");
        }
        String local = ShmFiles.bootId();
        if (!address.bootId.equals(local)) {
            throw new VerbsException(VerbsException.Reason.CONNECTION, "shm endpoint is on another host (its "
                + "boot_id is " + address.bootId + ", this host's is " + local + "): the shm provider connects "
                + "processes of one host only; use the tcp provider between hosts");
        }
        return address;
    }
}
