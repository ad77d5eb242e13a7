package io.jccl.collectives.bootstrap;

import io.jccl.collectives.store.InMemoryStore;
import org.junit.jupiter.api.Test;

import java.nio.charset.StandardCharsets;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Values sealed with the job secret: unreadable, unforgeable and bound to their key. */
class SealedStoreTest {
    private static final long T = 1_000_000_000L;

    @Test
    void shouldRoundTripAndHideTheValue() {
        InMemoryStore plain = new InMemoryStore();
        SealedStore sealed = new SealedStore(plain, "s3cret", "job1");
        byte[] value = "tcp0 127.0.0.1:40000/00112233445566778899aabbccddeeff".getBytes(StandardCharsets.UTF_8);
        sealed.set("ep/0/1", value, T);
        assertArrayEquals(value, sealed.get("ep/0/1", T));
        String stored = new String(plain.get("ep/0/1", T), StandardCharsets.ISO_8859_1);
        assertFalse(stored.contains("00112233") || stored.contains("127.0.0.1"), stored);
        assertTrue(JoinRecord.isSealed(plain.get("ep/0/1", T)));
        // a fresh nonce per value: the same value seals differently
        sealed.set("ep/0/2", value, T);
        assertFalse(java.util.Arrays.equals(plain.get("ep/0/1", T), plain.get("ep/0/2", T)));
    }

    @Test
    void shouldRefuseValuesOfAnotherSecretAnotherJobOrAnotherKey() {
        InMemoryStore plain = new InMemoryStore();
        new SealedStore(plain, "s3cret", "job1").set("a", new byte[] {1, 2, 3}, T);
        assertThrows(SealedStore.Forged.class, () -> new SealedStore(plain, "guess", "job1").get("a", T));
        assertThrows(SealedStore.Forged.class, () -> new SealedStore(plain, "s3cret", "job2").get("a", T));
        // moved under another key (the key is associated data): refused
        plain.set("b", plain.get("a", T), T);
        assertThrows(SealedStore.Forged.class, () -> new SealedStore(plain, "s3cret", "job1").get("b", T));
        // tampered with
        byte[] v = plain.get("a", T);
        v[v.length - 1] ^= 1;
        plain.set("c", v, T);
        assertThrows(SealedStore.Forged.class, () -> new SealedStore(plain, "s3cret", "job1").get("c", T));
        // written without a secret
        plain.set("d", new byte[] {1, 2, 3}, T);
        assertThrows(SealedStore.Unsealed.class, () -> new SealedStore(plain, "s3cret", "job1").get("d", T));
    }

    @Test
    void shouldDeriveTheKeyPerSecretAndJob() {
        assertFalse(java.util.Arrays.equals(SealedStore.deriveKey("s", "j1"), SealedStore.deriveKey("s", "j2")));
        assertFalse(java.util.Arrays.equals(SealedStore.deriveKey("s1", "j"), SealedStore.deriveKey("s2", "j")));
        assertArrayEquals(SealedStore.deriveKey("s", "j"), SealedStore.deriveKey("s", "j"));
    }
}
