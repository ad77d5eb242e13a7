package io.jccl.collectives;

import io.jccl.verbs.Endpoint;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.io.InputStream;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.atomic.AtomicInteger;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * An outsider on the same host as a job with {@code JCCL_AUTH_SECRET}: it reads every value the job writes into
 * the rendezvous store, finds the job's tcp0 listeners as they appear (as a port scan would) and, from before the
 * queue pairs connect until the job ends, throws handshakes at them: random frames, frames carrying whatever
 * endpoint it could decode from the store, oversized ones. It must not decode a single endpoint, must not get one
 * byte of the job's registered memory back, and the job's results must stay right.
 */
class OutsiderTest {
    private static final byte[] MARKER = "JOB-PRIVATE-TENSOR-".getBytes(StandardCharsets.US_ASCII);

    /** Listening TCP ports of this host (/proc/net/tcp and tcp6, state 0A). */
    static Set<Integer> listeningPorts() {
        Set<Integer> ports = new HashSet<>();
        for (String file : new String[] {"/proc/net/tcp", "/proc/net/tcp6"}) {
            try {
                List<String> lines = Files.readAllLines(Path.of(file));
                for (String line : lines.subList(1, lines.size())) {
                    String[] f = line.trim().split("\\s+");
                    if (f.length > 3 && f[3].equals("0A")) {
                        String local = f[1];
                        ports.add(Integer.parseInt(local.substring(local.indexOf(':') + 1), 16));
                    }
                }
            } catch (IOException | RuntimeException e) {
                // no such file (no IPv6): nothing listens there
            }
        }
        return ports;
    }

    /** The outsider: reads the store, attacks new listeners until stopped. */
    static final class Outsider implements Runnable {
        final StoreConfidentialityTest.Recording store;
        final Set<Integer> before;
        final Set<Integer> found = new HashSet<>();
        final AtomicInteger connections = new AtomicInteger();
        final AtomicInteger decoded = new AtomicInteger();
        final java.io.ByteArrayOutputStream received = new java.io.ByteArrayOutputStream();
        volatile boolean stop;
        final Random random = new Random(15);

        Outsider(StoreConfidentialityTest.Recording store, Set<Integer> before) {
            this.store = store;
            this.before = before;
        }

        @Override
        public void run() {
            while (!stop) {
                List<Endpoint> endpoints = new java.util.ArrayList<>();
                for (String value : store.seen) {
                    for (String token : value.split("[\\s]+")) {
                        if (token.startsWith("jccl-ep1:")) {
                            try {
                                endpoints.add(Endpoint.decode(token));
                                decoded.incrementAndGet();
                            } catch (RuntimeException ignored) {
                                // not one
                            }
                        }
                    }
                }
                Set<Integer> now = listeningPorts();
                now.removeAll(before);
                found.addAll(now);
                for (int port : now) {
                    attack(port, endpoints);
                }
                sleep(5);
            }
        }

        private void attack(int port, List<Endpoint> endpoints) {
            byte[] frame;
            switch (random.nextInt(3)) {
                case 0 -> {
                    frame = new byte[96];
                    random.nextBytes(frame);
                }
                case 1 -> {
                    // whatever identifies a queue pair, if the store gave any away
                    StringBuilder sb = new StringBuilder();
                    for (Endpoint e : endpoints) {
                        sb.append(e.encode()).append(' ').append(e.address());
                    }
                    frame = (sb + "HELLO").getBytes(StandardCharsets.UTF_8);
                }
                default -> {
                    frame = new byte[64 * 1024];
                    random.nextBytes(frame);
                }
            }
            try (Socket s = new Socket()) {
                s.connect(new InetSocketAddress("127.0.0.1", port), 200);
                connections.incrementAndGet();
                s.setSoTimeout(50);
                s.getOutputStream().write(frame);
                s.getOutputStream().flush();
                InputStream in = s.getInputStream();
                byte[] buf = new byte[4096];
                int n;
                while ((n = in.read(buf)) > 0) {
                    synchronized (received) {
                        received.write(buf, 0, n);
                    }
                }
            } catch (IOException e) {
                // refused, reset or timed out: what it should get
            }
        }

        private static void sleep(long ms) {
            try {
                Thread.sleep(ms);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    @Test
    void shouldGiveAnOutsiderNothingToActAsAPeerWith() throws Exception {
        StoreConfidentialityTest.Recording store = new StoreConfidentialityTest.Recording();
        Outsider outsider = new Outsider(store, listeningPorts());
        Thread attacker = Thread.ofPlatform().name("outsider").daemon().start(outsider);
        CommunicatorOptions options = CommunicatorOptions.defaults().withTransports("tcp0").withShmDisabled(true)
            .withTimeout(Duration.ofSeconds(60)).withAuthSecret("job-secret-15");
        int count = 1 << 16;
        try {
            Ranks.runWith(2, (s, r, n) -> Communicator.create(store, r, n, options), c -> {
                try (Arena arena = Arena.ofConfined()) {
                    MemorySegment buf = arena.allocate(count, 64);
                    for (int i = 0; i < 300; i++) {
                        if (c.rank() == 0) {
                            for (int b = 0; b < count; b++) {
                                buf.set(ValueLayout.JAVA_BYTE, b, MARKER[b % MARKER.length]);
                            }
                        } else {
                            buf.fill((byte) 0);
                        }
                        c.broadcast(buf, count, DataType.INT8, 0);
                        for (int b = 0; b < count; b += 997) {
                            assertEquals(MARKER[b % MARKER.length], buf.get(ValueLayout.JAVA_BYTE, b),
                                "iteration " + i + " byte " + b);
                        }
                        if (i % 30 == 0) {
                            Thread.sleep(20); // let the outsider find the listeners and try its luck
                        }
                    }
                }
            });
        } finally {
            outsider.stop = true;
            attacker.join(5_000);
        }
        assertFalse(store.seen.isEmpty(), "the outsider read nothing from the store: the test checks nothing");
        assertFalse(outsider.found.isEmpty(), "the outsider found no listener: the test checks nothing");
        assertTrue(outsider.connections.get() > 0, "the outsider never reached a listener");
        assertEquals(0, outsider.decoded.get(), "the outsider decoded endpoints from the store");
        byte[] got;
        synchronized (outsider.received) {
            got = outsider.received.toByteArray();
        }
        String text = new String(got, StandardCharsets.ISO_8859_1);
        assertFalse(text.contains(new String(MARKER, StandardCharsets.ISO_8859_1)),
            "the outsider got registered memory back");
        System.out.println("outsider: " + outsider.connections.get() + " connections to " + outsider.found.size()
            + " listeners, " + got.length + " bytes back, 0 endpoints decoded from " + store.seen.size()
            + " store values");
    }
}
