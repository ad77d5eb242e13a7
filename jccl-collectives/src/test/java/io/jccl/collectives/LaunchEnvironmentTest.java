package io.jccl.collectives;

import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class LaunchEnvironmentTest {
    @Test
    void jccl() {
        LaunchEnvironment e = LaunchEnvironment.detect(Map.of("JCCL_RANK", "2", "JCCL_WORLD_SIZE", "4",
            "JCCL_STORE_ADDR", "10.0.0.5:1234"));
        assertEquals(new LaunchEnvironment(2, 4, -1, "10.0.0.5:1234", "jccl", false), e);
        assertTrue(LaunchEnvironment.detect(Map.of("JCCL_RANK", "0", "JCCL_WORLD_SIZE", "4", "JCCL_STORE_ADDR",
            "h")).startServer());
        assertEquals("h:29500", LaunchEnvironment.detect(Map.of("JCCL_RANK", "0", "JCCL_WORLD_SIZE", "4",
            "JCCL_STORE_ADDR", "h")).storeAddress());
        assertFalse(LaunchEnvironment.detect(Map.of("JCCL_RANK", "0", "JCCL_WORLD_SIZE", "4", "JCCL_STORE_ADDR",
            "h:1", "JCCL_STORE_SERVER", "0")).startServer());
        assertEquals("file:/shared/rdv", LaunchEnvironment.detect(Map.of("JCCL_RANK", "0", "JCCL_WORLD_SIZE", "1",
            "JCCL_STORE_ADDR", "file:/shared/rdv")).storeAddress());
    }

    @Test
    void torchrun() {
        LaunchEnvironment e = LaunchEnvironment.detect(Map.of("RANK", "0", "WORLD_SIZE", "8", "LOCAL_RANK", "0",
            "MASTER_ADDR", "node1", "MASTER_PORT", "29501"));
        // Without TORCHELASTIC_USE_AGENT_STORE: JCCL's store, unless a torch store already serves MASTER_PORT.
        assertEquals(new LaunchEnvironment(0, 8, 0, "node1:29501", "torchrun", true, "auto", 0), e);
    }

    @Test
    void shouldUseTorchrunsAgentStoreWithoutStartingAServer() {
        LaunchEnvironment e = LaunchEnvironment.detect(Map.of("RANK", "0", "WORLD_SIZE", "2", "LOCAL_RANK", "0",
            "MASTER_ADDR", "127.0.0.1", "MASTER_PORT", "29400", "TORCHELASTIC_USE_AGENT_STORE", "True",
            "TORCHELASTIC_RESTART_COUNT", "3"));
        assertEquals(new LaunchEnvironment(0, 2, 0, "127.0.0.1:29400", "torchrun", false, "torch", 3), e);
        assertEquals("jccl", LaunchEnvironment.detect(Map.of("RANK", "0", "WORLD_SIZE", "2", "MASTER_ADDR", "h",
            "TORCHELASTIC_USE_AGENT_STORE", "False")).storeProtocol());
        assertEquals("jccl", LaunchEnvironment.detect(Map.of("RANK", "0", "WORLD_SIZE", "2", "MASTER_ADDR", "h",
            "TORCHELASTIC_USE_AGENT_STORE", "True", "JCCL_STORE_PROTOCOL", "jccl")).storeProtocol());
        assertEquals("torch", LaunchEnvironment.detect(Map.of("JCCL_RANK", "0", "JCCL_WORLD_SIZE", "2",
            "JCCL_STORE_ADDR", "h:1", "JCCL_STORE_PROTOCOL", "Torch")).storeProtocol());
        IllegalStateException bad = assertThrows(IllegalStateException.class, () -> LaunchEnvironment.detect(
            Map.of("JCCL_RANK", "0", "JCCL_WORLD_SIZE", "2", "JCCL_STORE_ADDR", "h:1", "JCCL_STORE_PROTOCOL", "redis")));
        assertTrue(bad.getMessage().contains("JCCL_STORE_PROTOCOL=redis") && bad.getMessage().contains("jccl, torch"),
            bad.getMessage());
    }

    /** Bug #3: a rank that can never match failed only after the whole rendezvous timeout. */
    @Test
    void shouldRefuseImpossibleRanksAtOnceNamingTheVariables() {
        IllegalStateException high = assertThrows(IllegalStateException.class, () -> LaunchEnvironment.detect(
            Map.of("RANK", "2", "WORLD_SIZE", "2", "MASTER_ADDR", "127.0.0.1", "MASTER_PORT", "1")));
        assertEquals("RANK=2 is outside 0..1 (WORLD_SIZE=2): each process needs a distinct rank below the world size",
            high.getMessage());
        IllegalStateException negative = assertThrows(IllegalStateException.class, () -> LaunchEnvironment.detect(
            Map.of("JCCL_RANK", "-1", "JCCL_WORLD_SIZE", "4", "JCCL_STORE_ADDR", "h:1")));
        assertTrue(negative.getMessage().startsWith("JCCL_RANK=-1 is outside 0..3 (JCCL_WORLD_SIZE=4)"),
            negative.getMessage());
        IllegalStateException empty = assertThrows(IllegalStateException.class, () -> LaunchEnvironment.detect(
            Map.of("SLURM_PROCID", "0", "SLURM_NTASKS", "0", "SLURM_NODELIST", "n1")));
        assertEquals("SLURM_NTASKS=0: the world size must be at least 1", empty.getMessage());
        IllegalStateException local = assertThrows(IllegalStateException.class, () -> LaunchEnvironment.detect(
            Map.of("OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "2", "OMPI_COMM_WORLD_LOCAL_RANK", "-3",
                "JCCL_STORE_ADDR", "h:1")));
        assertTrue(local.getMessage().startsWith("OMPI_COMM_WORLD_LOCAL_RANK=-3"), local.getMessage());
        IllegalStateException notNumber = assertThrows(IllegalStateException.class, () -> LaunchEnvironment.detect(
            Map.of("RANK", "one", "WORLD_SIZE", "2", "MASTER_ADDR", "h")));
        assertTrue(notNumber.getMessage().startsWith("RANK='one' is not a number"), notNumber.getMessage());
    }

    @Test
    void openMpi() {
        LaunchEnvironment e = LaunchEnvironment.detect(Map.of("OMPI_COMM_WORLD_RANK", "3", "OMPI_COMM_WORLD_SIZE",
            "4", "OMPI_COMM_WORLD_LOCAL_RANK", "1", "JCCL_STORE_ADDR", "head:7000"));
        assertEquals(new LaunchEnvironment(3, 4, 1, "head:7000", "openmpi", false), e);
        IllegalStateException missing = assertThrows(IllegalStateException.class, () -> LaunchEnvironment.detect(
            Map.of("OMPI_COMM_WORLD_RANK", "3", "OMPI_COMM_WORLD_SIZE", "4")));
        assertTrue(missing.getMessage().contains("JCCL_STORE_ADDR"), missing.getMessage());
    }

    @Test
    void slurm() {
        LaunchEnvironment e = LaunchEnvironment.detect(Map.of("SLURM_PROCID", "5", "SLURM_NTASKS", "16",
            "SLURM_LOCALID", "1", "SLURM_NODELIST", "node[01-04,07],gpu5"));
        assertEquals(new LaunchEnvironment(5, 16, 1, "node01:29500", "slurm", false), e);
        assertEquals(List.of("node01", "node02", "node03", "node04", "node07", "gpu5", "x1", "x2", "a9-b"),
            LaunchEnvironment.expandNodeList("node[01-04,07],gpu5,x[1-2],a9-b"));
        assertEquals(List.of("r1n08", "r1n09", "r1n10"), LaunchEnvironment.expandNodeList("r1n[08-10]"));
    }

    /**
     * A pod of a Kubernetes Indexed Job: the rank is the completion index Kubernetes sets, world size and store come
     * from the manifest; a pod without them fails at once naming the variable to set.
     */
    @Test
    void kubernetesIndexedJob() {
        LaunchEnvironment e = LaunchEnvironment.detect(Map.of("JOB_COMPLETION_INDEX", "3", "JCCL_WORLD_SIZE", "4",
            "JCCL_STORE_ADDR", "train-0.train:29500"));
        assertEquals(new LaunchEnvironment(3, 4, -1, "train-0.train:29500", "kubernetes", false), e);
        assertTrue(LaunchEnvironment.launched(Map.of("JOB_COMPLETION_INDEX", "0")));
        assertFalse(LaunchEnvironment.launched(Map.of("JCCL_WORLD_SIZE", "4", "JCCL_STORE_ADDR", "a:1")));
        assertTrue(LaunchEnvironment.detect(Map.of("JOB_COMPLETION_INDEX", "0", "JCCL_WORLD_SIZE", "4",
            "JCCL_STORE_ADDR", "train-0.train")).startServer());
        // torchrun inside a pod keeps its own variables.
        assertEquals("torchrun", LaunchEnvironment.detect(Map.of("JOB_COMPLETION_INDEX", "1", "RANK", "5",
            "WORLD_SIZE", "8", "MASTER_ADDR", "m", "MASTER_PORT", "1")).launcher());
        IllegalStateException noSize = assertThrows(IllegalStateException.class, () -> LaunchEnvironment.detect(
            Map.of("JOB_COMPLETION_INDEX", "1", "JCCL_STORE_ADDR", "train-0.train:29500")));
        assertTrue(noSize.getMessage().contains("JCCL_WORLD_SIZE"), noSize.getMessage());
        IllegalStateException noStore = assertThrows(IllegalStateException.class, () -> LaunchEnvironment.detect(
            Map.of("JOB_COMPLETION_INDEX", "1", "JCCL_WORLD_SIZE", "4")));
        assertTrue(noStore.getMessage().contains("JCCL_STORE_ADDR=<job>-0.<service>:29500"), noStore.getMessage());
        IllegalStateException outside = assertThrows(IllegalStateException.class, () -> LaunchEnvironment.detect(
            Map.of("JOB_COMPLETION_INDEX", "4", "JCCL_WORLD_SIZE", "4", "JCCL_STORE_ADDR", "a:1")));
        assertTrue(outside.getMessage().contains("JOB_COMPLETION_INDEX=4 is outside 0..3"), outside.getMessage());
    }

    @Test
    void openStoreAuthenticatesWithTheSecretAndListensOnTheStoreAddress() throws Exception {
        long timeout = java.util.concurrent.TimeUnit.SECONDS.toNanos(5);
        LaunchEnvironment rank0 = new LaunchEnvironment(0, 2, 0, "127.0.0.1:0", "jccl", true);
        try (io.jccl.collectives.store.Store store = rank0.openStore(timeout, "job-secret")) {
            int port = ((io.jccl.collectives.store.TcpStore) store).port();
            store.setString("hello/0", "x", timeout);
            LaunchEnvironment rank1 = new LaunchEnvironment(1, 2, 0, "127.0.0.1:" + port, "jccl", false);
            io.jccl.collectives.store.StoreException e = assertThrows(io.jccl.collectives.store.StoreException.class,
                () -> rank1.openStore(timeout, null).close());
            assertTrue(e.getMessage().contains("requires JCCL_AUTH_SECRET"), e.getMessage());
            try (io.jccl.collectives.store.Store peer = rank1.openStore(timeout, "job-secret")) {
                assertEquals("x", peer.getString("hello/0", timeout));
            }
            System.setProperty("jccl.auth.secret", "job-secret"); // openStore(timeout): JCCL_AUTH_SECRET by default
            try (io.jccl.collectives.store.Store peer = rank1.openStore(timeout)) {
                assertEquals("x", peer.getString("hello/0", timeout));
            } finally {
                System.clearProperty("jccl.auth.secret");
            }
            java.net.InetAddress other = nonLoopbackIpv4();
            if (other != null) {
                try (java.net.Socket s = new java.net.Socket()) {
                    assertThrows(java.net.ConnectException.class,
                        () -> s.connect(new java.net.InetSocketAddress(other, port), 2000));
                }
            }
        }
    }

    private static java.net.InetAddress nonLoopbackIpv4() throws java.net.SocketException {
        for (java.net.NetworkInterface nic : java.util.Collections.list(java.net.NetworkInterface.getNetworkInterfaces())) {
            if (nic.isUp() && !nic.isLoopback()) {
                for (java.net.InetAddress a : java.util.Collections.list(nic.getInetAddresses())) {
                    if (a instanceof java.net.Inet4Address && !a.isLinkLocalAddress()) {
                        return a;
                    }
                }
            }
        }
        return null;
    }

    @Test
    void nothingToGoOn() {
        IllegalStateException e = assertThrows(IllegalStateException.class, () -> LaunchEnvironment.detect(Map.of()));
        assertTrue(e.getMessage().contains("JCCL_RANK"), e.getMessage());
    }
}
