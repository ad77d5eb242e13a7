package io.jccl.collectives;

import io.jccl.collectives.message.Peer;
import io.jccl.collectives.store.InMemoryStore;
import io.jccl.collectives.store.Store;
import io.jccl.verbs.PortAttributes;
import org.junit.jupiter.api.Test;

import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * What an outsider who can read the rendezvous store learns. Without a secret it reads every tcp queue pair's
 * connection secret (the job says so loudly at start); with {@code JCCL_AUTH_SECRET} every value is sealed, and no
 * secret, address or key appears in the store. A one-host job that falls back to tcp listens on loopback only.
 */
class StoreConfidentialityTest {
    /** A store that keeps a copy of every value written to it, as an outsider polling the store would. */
    static final class Recording implements Store {
        final InMemoryStore inner = new InMemoryStore();
        final Set<String> seen = ConcurrentHashMap.newKeySet();

        private byte[] saw(byte[] v) {
            seen.add(new String(v, StandardCharsets.ISO_8859_1));
            return v;
        }

        @Override
        public void set(String key, byte[] value, long t) {
            inner.set(key, saw(value), t);
        }

        @Override
        public byte[] get(String key, long t) {
            return inner.get(key, t);
        }

        @Override
        public long add(String key, long delta, long t) {
            return inner.add(key, delta, t);
        }

        @Override
        public void waitFor(List<String> keys, long t) {
            inner.waitFor(keys, t);
        }

        @Override
        public boolean compareAndSet(String key, byte[] expected, byte[] desired, long t) {
            return inner.compareAndSet(key, expected, saw(desired), t);
        }

        @Override
        public boolean delete(String key, long t) {
            return inner.delete(key, t);
        }

        @Override
        public boolean check(String key, long t) {
            return inner.check(key, t);
        }

        @Override
        public String describe() {
            return "recording store";
        }

        @Override
        public void close() {
        }
    }

    private static CommunicatorOptions tcp(String secret) {
        CommunicatorOptions o = CommunicatorOptions.defaults().withTransports("tcp0").withShmDisabled(true)
            .withTimeout(Duration.ofSeconds(30));
        return secret == null ? o : o.withAuthSecret(secret);
    }

    @Test
    void shouldSealEveryValueWithTheJobSecret() {
        for (String secret : new String[] {null, "s3cret"}) {
            Recording store = new Recording();
            Set<String> endpointSecrets = ConcurrentHashMap.newKeySet();
            Ranks.runWith(2, (s, r, n) -> Communicator.create(store, r, n, tcp(secret)), c -> {
                for (Peer p : c.messagePath().peers()) {
                    if (p != null) {
                        // The encoded endpoint carries host:port/<128-bit secret> (base64 inside the record).
                        endpointSecrets.add(p.queuePair().localEndpoint().encode());
                    }
                }
                c.barrier();
            });
            assertFalse(endpointSecrets.isEmpty());
            boolean exposed = false;
            for (String value : store.seen) {
                for (String s : endpointSecrets) {
                    exposed |= value.contains(s);
                }
            }
            if (secret == null) {
                assertTrue(exposed, "the endpoint secrets should be in clear without a job secret (what this test"
                    + " checks must be visible at all)");
            } else {
                assertFalse(exposed, "an endpoint secret is readable in the store although JCCL_AUTH_SECRET is set");
                for (String value : store.seen) {
                    assertTrue(value.startsWith("JCCLSEAL"), "a value is not sealed: " + value);
                }
            }
        }
    }

    @Test
    void shouldListenOnLoopbackWhenEveryRankIsOnThisHost() {
        Ranks.run(2, tcp(null), c -> {
            PortAttributes port = c.messagePath().devices().get("tcp0").context().query().ports().getFirst();
            assertTrue(InetAddress.getByName(port.gid()).isLoopbackAddress(), "tcp0 listens on " + port.gid());
        });
    }
}
