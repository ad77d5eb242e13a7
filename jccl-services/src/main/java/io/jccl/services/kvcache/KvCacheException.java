package io.jccl.services.kvcache;

import io.jccl.services.transfer.TransferException;

/**
 * A KV-cache request that cannot go ahead or did not complete: bad block table, unknown request, double release, no
 * free blocks in time, peer gone. It concerns the one request (or call) named in its message; other requests go on.
 */
public class KvCacheException extends TransferException {
    /** An error with its message. */
    public KvCacheException(String message) {
        super(message);
    }

    /** An error with its message and cause. */
    public KvCacheException(String message, Throwable cause) {
        super(message, cause);
    }
}
