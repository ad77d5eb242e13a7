package io.jccl.verbs;

import java.time.Duration;

/**
 * What {@link ConnectionManager} negotiates for a connection, like librdmacm's {@code rdma_conn_param}: access the
 * QP grants its peer, READ/atomic depths, retry counts, RNR timer, private data, and the handshake deadline.
 *
 * @param accessFlags remote access the local QP grants ({@link AccessFlag} mask)
 * @param responderResources incoming READs/atomics accepted at once (max_dest_rd_atomic)
 * @param initiatorDepth outstanding READs/atomics initiated (max_rd_atomic)
 * @param retryCount transport retries (0..7)
 * @param rnrRetryCount RNR retries (0..7, 7 = infinite)
 * @param minRnrTimer RNR timer code asked of peers (0..31)
 * @param ackTimeout local ACK timeout code (4.096 µs × 2^code)
 * @param privateData up to 196 bytes handed to the peer (as rdma_cm's private data)
 * @param handshakeTimeout deadline for the whole handshake
 * @param secret shared secret both sides must know (null: none; from JCCL_AUTH_SECRET by default)
 */
public record ConnectionParameters(int accessFlags, int responderResources, int initiatorDepth, int retryCount,
                                   int rnrRetryCount, int minRnrTimer, int ackTimeout, byte[] privateData,
                                   Duration handshakeTimeout, byte[] secret) {
    /** Largest private data, as InfiniBand CM's REQ private data. */
    public static final int MAX_PRIVATE_DATA = 196;

    /** Validates the fields. */
    public ConnectionParameters {
        AccessFlag.validate(accessFlags | (accessFlags != 0 ? AccessFlag.LOCAL_WRITE.bit() : 0));
        privateData = privateData == null ? new byte[0] : privateData.clone();
        if (privateData.length > MAX_PRIVATE_DATA) {
            throw new IllegalArgumentException("private data above " + MAX_PRIVATE_DATA + " bytes");
        }
        if (handshakeTimeout == null || handshakeTimeout.isNegative() || handshakeTimeout.isZero()) {
            throw new IllegalArgumentException("handshake timeout must be positive");
        }
    }

    /**
     * Defaults: REMOTE_WRITE|REMOTE_READ|REMOTE_ATOMIC granted, 16 READs/atomics each way, retry 7, RNR retry 7,
     * RNR timer code 1 (10 µs), ACK timeout 14 (67 ms), no private data, 10 s handshake, secret from
     * JCCL_AUTH_SECRET when set.
     */
    public static ConnectionParameters defaults() {
        String secret = io.jccl.common.Config.value("JCCL_AUTH_SECRET");
        return new ConnectionParameters(AccessFlag.toMask(AccessFlag.REMOTE_WRITE, AccessFlag.REMOTE_READ,
            AccessFlag.REMOTE_ATOMIC), 16, 16, 7, 7, 1, 14, null, Duration.ofSeconds(10),
            secret == null || secret.isEmpty() ? null : secret.getBytes(java.nio.charset.StandardCharsets.UTF_8));
    }

    /** A copy with other private data. */
    public ConnectionParameters withPrivateData(byte[] data) {
        return new ConnectionParameters(accessFlags, responderResources, initiatorDepth, retryCount, rnrRetryCount,
            minRnrTimer, ackTimeout, data, handshakeTimeout, secret);
    }

    /** A copy with another shared secret (null for none). */
    public ConnectionParameters withSecret(byte[] newSecret) {
        return new ConnectionParameters(accessFlags, responderResources, initiatorDepth, retryCount, rnrRetryCount,
            minRnrTimer, ackTimeout, privateData, handshakeTimeout, newSecret == null ? null : newSecret.clone());
    }

    /** A copy with other retry settings. */
    public ConnectionParameters withRetries(int retries, int rnrRetries, int rnrTimerCode) {
        return new ConnectionParameters(accessFlags, responderResources, initiatorDepth, retries, rnrRetries,
            rnrTimerCode, ackTimeout, privateData, handshakeTimeout, secret);
    }

    /** A copy with another handshake deadline. */
    public ConnectionParameters withHandshakeTimeout(Duration timeout) {
        return new ConnectionParameters(accessFlags, responderResources, initiatorDepth, retryCount, rnrRetryCount,
            minRnrTimer, ackTimeout, privateData, timeout, secret);
    }
}
