package io.jccl.collectives;

import io.jccl.collectives.store.Store;
import io.jccl.collectives.store.TorchPython;
import io.jccl.collectives.store.TorchTcpStore;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Bug #1 of issue 16: under torchrun the agent serves its TCPStore at MASTER_PORT, and rank 0 died binding it. A
 * 2-rank job bootstraps through torch's own server (a Python child), as the launch environment chooses it.
 */
class TorchRendezvousTest {
    private static final long T = Duration.ofSeconds(30).toNanos();

    private static Map<String, String> torchrun(int rank, int port, Map<String, String> extra) {
        Map<String, String> env = new HashMap<>(Map.of("RANK", Integer.toString(rank), "WORLD_SIZE", "2",
            "LOCAL_RANK", Integer.toString(rank), "MASTER_ADDR", "127.0.0.1", "MASTER_PORT", Integer.toString(port)));
        env.putAll(extra);
        return env;
    }

    /** Opens each rank's store from its environment, joins, all-reduces, and returns the stores' kinds. */
    private static List<Store> job(int port, Map<String, String> extra, CommunicatorOptions options) throws Exception {
        List<CompletableFuture<Store>> ranks = new ArrayList<>();
        // A thread per rank: the common pool may have a single thread on a small machine, and ranks block.
        ExecutorService threads = Executors.newThreadPerTaskExecutor(Thread.ofPlatform().daemon().factory());
        for (int r = 0; r < 2; r++) {
            int rank = r;
            ranks.add(CompletableFuture.supplyAsync(() -> {
                LaunchEnvironment env = LaunchEnvironment.detect(torchrun(rank, port, extra));
                Store store = env.openStore(T, options.authSecret());
                try (Communicator c = Communicator.create(store, env.rank(), env.worldSize(), options);
                     Arena arena = Arena.ofConfined()) {
                    MemorySegment buf = arena.allocate(64 * 4L);
                    for (int i = 0; i < 64; i++) {
                        buf.setAtIndex(ValueLayout.JAVA_FLOAT, i, rank + i);
                    }
                    c.allReduce(buf, 64, DataType.FLOAT32, ReduceOp.SUM);
                    for (int i = 0; i < 64; i++) {
                        assertEquals(1f + 2f * i, buf.getAtIndex(ValueLayout.JAVA_FLOAT, i));
                    }
                } finally {
                    store.close();
                }
                return store;
            }, threads));
        }
        List<Store> stores = new ArrayList<>();
        AssertionError failed = null;
        for (int r = 0; r < ranks.size(); r++) {
            try {
                stores.add(ranks.get(r).get(120, TimeUnit.SECONDS));
            } catch (ExecutionException e) {
                AssertionError a = new AssertionError("rank " + r + " failed: " + e.getCause(), e.getCause());
                if (failed == null) {
                    failed = a;
                } else {
                    failed.addSuppressed(a);
                }
            }
        }
        if (failed != null) {
            throw failed;
        }
        return stores;
    }

    @Test
    void shouldBootstrapThroughTorchrunsAgentStore() throws Exception {
        TorchPython.require();
        try (TorchPython.Server server = new TorchPython.Server(1)) {
            CommunicatorOptions options = Ranks.loop();
            for (Store s : job(server.port(), Map.of("TORCHELASTIC_USE_AGENT_STORE", "True"), options)) {
                assertInstanceOf(TorchTcpStore.class, s);
            }
            // A restart (attempt 1) with the job secret: its keys are apart from attempt 0's, its values sealed.
            job(server.port(), Map.of("TORCHELASTIC_USE_AGENT_STORE", "True", "TORCHELASTIC_RESTART_COUNT", "1"),
                options.withAuthSecret("torch-store-secret"));
            String out = TorchPython.run(String.join("\n",
                "import datetime, torch.distributed as d",
                "c = d.TCPStore('127.0.0.1', " + server.port() + ", 1, False, timeout=datetime.timedelta(seconds=60))",
                "p0 = d.PrefixStore('jccl/attempt_0/jccl/world', c)",
                "p1 = d.PrefixStore('jccl/attempt_1/jccl/world', c)",
                "print('attempt0', p0.get('hello/1')[:8])",
                "print('attempt1', p1.get('hello/1')[:8])"));
            assertTrue(out.contains("attempt0 b'") && !out.contains("attempt0 b'JCCLSEAL'"), out);
            assertTrue(out.contains("attempt1 b'JCCLSEAL'"), "attempt 1's records are sealed: " + out);
        }
    }

    @Test
    void shouldFallBackToATorchStoreAlreadyServingMasterPort() throws Exception {
        TorchPython.require();
        try (TorchPython.Server server = new TorchPython.Server(1)) {
            // No TORCHELASTIC_USE_AGENT_STORE: rank 0 tries to serve MASTER_PORT, finds torch's store there.
            for (Store s : job(server.port(), Map.of(), Ranks.loop())) {
                assertInstanceOf(TorchTcpStore.class, s);
            }
        }
    }

    @Test
    void shouldKeepJcclsStoreWhenTheAgentDoesNotServeOne() {
        LaunchEnvironment e = LaunchEnvironment.detect(torchrun(0, 1, Map.of("TORCHELASTIC_USE_AGENT_STORE", "False")));
        assertTrue(e.startServer());
        assertFalse(e.storeProtocol().equals(LaunchEnvironment.PROTOCOL_TORCH));
    }
}
