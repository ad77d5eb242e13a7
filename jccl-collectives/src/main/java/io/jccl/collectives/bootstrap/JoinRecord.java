package io.jccl.collectives.bootstrap;

import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.util.Arrays;
import java.util.HexFormat;

/**
 * What a rank publishes when it joins (the store key {@code hello/RANK}), and the checks every rank makes of every
 * other's before it connects anything. Text, {@code |}-separated:
 *
 * <pre>
 * v2 | job id | rank | size | host identity | pid | PID namespace | settings hash | devices opened (comma list)
 *    | nonce | proof
 * </pre>
 *
 * where proof is the HMAC-SHA256 of the first ten fields under {@code JCCL_AUTH_SECRET}, or {@code -} without one.
 *
 * @param jobId the job identity every rank must present
 * @param rank the rank
 * @param size the communicator size the rank expects
 * @param hostId the rank's host identity (boot id and host name)
 * @param pid the rank's process id
 * @param pidNamespace the rank's PID namespace ({@link io.jccl.common.ProcessIds#pidNamespace()}): its pid means
 *     something here only when this equals ours
 * @param settingsHash the hash of the settings every rank must share
 * @param devices the devices the rank opened
 * @param fields the record's fields as published (for checks that need the raw text)
 */
public record JoinRecord(String jobId, int rank, int size, String hostId, long pid, String pidNamespace,
                         String settingsHash, String devices, String[] fields) {
    private static final int FIELDS = 11;

    /** The record this rank publishes, signed with {@code secret} (null: none). */
    public static byte[] encode(String jobId, int rank, int size, String hostId, long pid, String pidNamespace,
                                String settingsHash, String devices, String nonce, String secret) {
        String body = "v2|" + jobId + "|" + rank + "|" + size + "|" + hostId + "|" + pid + "|" + pidNamespace + "|"
            + settingsHash + "|" + devices + "|" + nonce;
        String proof = secret == null ? "-" : hmac(secret, body);
        return (body + "|" + proof).getBytes(StandardCharsets.UTF_8);
    }

    /** Whether {@code record} as read from a plain store is a value sealed by a {@link SealedStore}. */
    public static boolean isSealed(byte[] record) {
        byte[] magic = "JCCLSEAL".getBytes(StandardCharsets.US_ASCII);
        return record.length >= magic.length && Arrays.equals(record, 0, magic.length, magic, 0, magic.length);
    }

    /** The fields of a published record (no checks). */
    public static String[] split(byte[] record) {
        return new String(record, StandardCharsets.UTF_8).split("\\|", -1);
    }

    /**
     * Parses {@code peer}'s record and checks it against this rank's view: version, job, size, settings and
     * proof. Returns the record, or throws {@link IllegalArgumentException} saying why it is refused.
     */
    public static JoinRecord verify(int peer, byte[] record, String jobId, int size, String settingsHash,
                                    String secret) {
        String[] f = split(record);
        String why = null;
        if (f.length != FIELDS || !f[0].equals("v2")) {
            why = "rank " + peer + " sent a malformed join record (another program or JCCL version?)";
        } else if (!f[1].equals(jobId)) {
            why = "rank " + peer + " belongs to job '" + f[1] + "', but this rank is in job '" + jobId
                + "' (JCCL_JOB_ID); refusing to mix jobs";
        } else if (Integer.parseInt(f[3]) != size) {
            why = "rank " + peer + " expects " + f[3] + " ranks, this rank expects " + size;
        } else if (!f[7].equals(settingsHash)) {
            why = "rank " + peer + " runs with different JCCL settings (chunk/slots/direct/JCCL_ALGO/JCCL_TRANSPORT/"
                + "JCCL_WARMUP on or off must match on every rank)";
        } else if (secret != null) {
            String expected = hmac(secret, String.join("|", Arrays.copyOf(f, FIELDS - 1)));
            if (!MessageDigest.isEqual(expected.getBytes(StandardCharsets.UTF_8),
                f[10].getBytes(StandardCharsets.UTF_8))) {
                why = "rank " + peer + " did not prove knowledge of JCCL_AUTH_SECRET (wrong or missing secret)";
            }
        } else if (!f[10].equals("-")) {
            why = "rank " + peer + " authenticates with JCCL_AUTH_SECRET but this rank has no secret set";
        }
        if (why != null) {
            throw new IllegalArgumentException(why);
        }
        return new JoinRecord(f[1], Integer.parseInt(f[2]), size, f[4], Long.parseLong(f[5]), f[6], f[7], f[8], f);
    }

    private static String hmac(String secret, String message) {
        try {
            Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(secret.getBytes(StandardCharsets.UTF_8), "HmacSHA256"));
            return HexFormat.of().formatHex(mac.doFinal(message.getBytes(StandardCharsets.UTF_8)));
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("HmacSHA256 unavailable", e);
        }
    }
}
