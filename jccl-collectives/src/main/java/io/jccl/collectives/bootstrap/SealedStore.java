package io.jccl.collectives.bootstrap;

import io.jccl.collectives.store.Store;
import io.jccl.collectives.store.StoreException;
import io.jccl.common.SecureIds;

import javax.crypto.AEADBadTagException;
import javax.crypto.Cipher;
import javax.crypto.Mac;
import javax.crypto.spec.GCMParameterSpec;
import javax.crypto.spec.SecretKeySpec;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.util.Arrays;
import java.util.List;

/**
 * A view of a store whose values are sealed with the job secret: AES-256-GCM under a key derived from
 * {@code JCCL_AUTH_SECRET} and the job id (HKDF-SHA256), a fresh 96-bit nonce per value, and the key's name as
 * associated data, so a value can neither be read by anyone without the secret nor be moved to another key or
 * forged. What it protects: the join records, the queue-pair endpoint records (tcp listener address, QP number, PSN
 * and the QP's connection secret; inbox and direct-path keys), allocation keys and the error texts ranks quote in
 * failure messages. An outsider who can reach the store still sees the key names and can delete keys (the store's
 * own authentication keeps it out; see {@code TcpStore}). Counters ({@link #add}) are not sealed.
 *
 * <p>Layout of a sealed value: {@code "JCCLSEAL"} (8 bytes), nonce (12), ciphertext and tag (16).
 */
public final class SealedStore implements Store {
    private static final byte[] MAGIC = "JCCLSEAL".getBytes(StandardCharsets.US_ASCII);
    private static final int NONCE_BYTES = 12;
    private static final int TAG_BITS = 128;

    /** A value read under a key is not sealed: its writer has no job secret. */
    public static final class Unsealed extends StoreException {
        Unsealed(String message) {
            super(message);
        }
    }

    /** A value read under a key fails authentication: its writer has another secret, or it was tampered with. */
    public static final class Forged extends StoreException {
        Forged(String message) {
            super(message);
        }
    }

    private final Store inner;
    private final SecretKeySpec key;

    /** Seals the values of {@code inner} with a key derived from {@code secret} for job {@code jobId}. */
    public SealedStore(Store inner, String secret, String jobId) {
        this.inner = inner;
        this.key = new SecretKeySpec(deriveKey(secret, jobId), "AES");
    }

    /** HKDF-SHA256 (RFC 5869) of the secret, salted with the job id: 32 bytes. */
    static byte[] deriveKey(String secret, String jobId) {
        try {
            Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(("jccl job " + jobId).getBytes(StandardCharsets.UTF_8), "HmacSHA256"));
            byte[] prk = mac.doFinal(secret.getBytes(StandardCharsets.UTF_8));
            mac.init(new SecretKeySpec(prk, "HmacSHA256"));
            mac.update("jccl store records v1".getBytes(StandardCharsets.UTF_8));
            mac.update((byte) 1);
            return mac.doFinal();
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("HmacSHA256 unavailable", e);
        }
    }

    byte[] seal(String name, byte[] value) {
        byte[] nonce = new byte[NONCE_BYTES];
        for (int i = 0; i < NONCE_BYTES; i += 8) {
            long n = SecureIds.nonce();
            for (int b = 0; b < 8 && i + b < NONCE_BYTES; b++) {
                nonce[i + b] = (byte) (n >>> (8 * b));
            }
        }
        try {
            Cipher cipher = Cipher.getInstance("AES/GCM/NoPadding");
            cipher.init(Cipher.ENCRYPT_MODE, key, new GCMParameterSpec(TAG_BITS, nonce));
            cipher.updateAAD(name.getBytes(StandardCharsets.UTF_8));
            byte[] sealed = cipher.doFinal(value);
            byte[] out = new byte[MAGIC.length + NONCE_BYTES + sealed.length];
            System.arraycopy(MAGIC, 0, out, 0, MAGIC.length);
            System.arraycopy(nonce, 0, out, MAGIC.length, NONCE_BYTES);
            System.arraycopy(sealed, 0, out, MAGIC.length + NONCE_BYTES, sealed.length);
            return out;
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("AES/GCM unavailable", e);
        }
    }

    byte[] open(String name, byte[] value) {
        if (value.length < MAGIC.length + NONCE_BYTES + TAG_BITS / 8
            || !Arrays.equals(value, 0, MAGIC.length, MAGIC, 0, MAGIC.length)) {
            throw new Unsealed("the value of '" + name + "' in " + inner.describe() + " is not sealed: it was written "
                + "without JCCL_AUTH_SECRET");
        }
        try {
            Cipher cipher = Cipher.getInstance("AES/GCM/NoPadding");
            cipher.init(Cipher.DECRYPT_MODE, key, new GCMParameterSpec(TAG_BITS, value, MAGIC.length, NONCE_BYTES));
            cipher.updateAAD(name.getBytes(StandardCharsets.UTF_8));
            return cipher.doFinal(value, MAGIC.length + NONCE_BYTES, value.length - MAGIC.length - NONCE_BYTES);
        } catch (AEADBadTagException e) {
            throw new Forged("the value of '" + name + "' in " + inner.describe() + " fails authentication: written "
                + "with another JCCL_AUTH_SECRET, or tampered with");
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("AES/GCM unavailable", e);
        }
    }

    @Override
    public void set(String name, byte[] value, long timeoutNs) {
        inner.set(name, seal(name, value), timeoutNs);
    }

    @Override
    public byte[] get(String name, long timeoutNs) {
        return open(name, inner.get(name, timeoutNs));
    }

    /** Not sealed: a counter's value is arithmetic the store does. */
    @Override
    public long add(String name, long delta, long timeoutNs) {
        return inner.add(name, delta, timeoutNs);
    }

    @Override
    public void waitFor(List<String> names, long timeoutNs) {
        inner.waitFor(names, timeoutNs);
    }

    /** Only {@code expected == null} (create if absent): sealed values are never equal twice. */
    @Override
    public boolean compareAndSet(String name, byte[] expected, byte[] desired, long timeoutNs) {
        if (expected != null) {
            throw new UnsupportedOperationException("a sealed store compares only against absence");
        }
        return inner.compareAndSet(name, null, seal(name, desired), timeoutNs);
    }

    @Override
    public boolean delete(String name, long timeoutNs) {
        return inner.delete(name, timeoutNs);
    }

    @Override
    public boolean check(String name, long timeoutNs) {
        return inner.check(name, timeoutNs);
    }

    @Override
    public String describe() {
        return inner.describe();
    }

    @Override
    public void close() {
        inner.close();
    }
}
