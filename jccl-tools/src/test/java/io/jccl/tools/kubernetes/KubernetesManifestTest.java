package io.jccl.tools.kubernetes;

import io.jccl.collectives.LaunchEnvironment;
import io.jccl.tools.JcclRuntime;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.yaml.snakeyaml.LoaderOptions;
import org.yaml.snakeyaml.Yaml;
import org.yaml.snakeyaml.constructor.SafeConstructor;

import java.io.ByteArrayOutputStream;
import java.io.InputStream;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * What {@code jccl k8s} writes, read back by a YAML parser as kubectl reads it: the objects and the fields each pod
 * depends on, then the environment every pod of the Indexed Job sees fed to JCCL's launcher detection, and four
 * processes started with exactly that environment forming one job through {@code Communicator.fromEnvironment}.
 */
class KubernetesManifestTest {
    private static KubernetesManifest.Spec spec(String name, int ranks) {
        return new KubernetesManifest.Spec(name, "ml", ranks, "registry.example/train:1", List.of("java", "-jar",
            "/app/train.jar"), 29500, "eth0", "2Gi", null, 0, "4", "8Gi", null, true, 0, Map.of());
    }

    @SuppressWarnings("unchecked")
    private static List<Map<String, Object>> parse(String yaml) {
        List<Map<String, Object>> docs = new ArrayList<>();
        for (Object o : new Yaml(new SafeConstructor(new LoaderOptions())).loadAll(yaml)) {
            docs.add((Map<String, Object>) o);
        }
        return docs;
    }

    private static Map<String, Object> kind(List<Map<String, Object>> docs, String kind) {
        return docs.stream().filter(d -> kind.equals(d.get("kind"))).findFirst()
            .orElseThrow(() -> new AssertionError("no " + kind + " in " + docs));
    }

    @SuppressWarnings("unchecked")
    private static <T> T at(Object root, String path) {
        Object o = root;
        for (String part : path.split("\\.")) {
            if (o instanceof List<?> l) {
                o = l.get(Integer.parseInt(part));
            } else {
                o = ((Map<String, Object>) o).get(part.replace('~', '.'));
            }
        }
        return (T) o;
    }

    @Test
    void shouldWriteAHeadlessServiceAndAnIndexedJobWhosePodsFindPodZero() {
        List<Map<String, Object>> docs = parse(KubernetesManifest.render(spec("train", 4)));
        assertEquals(List.of("Secret", "Service", "NetworkPolicy", "Job"), docs.stream().map(d -> d.get("kind"))
            .toList());
        Map<String, Object> job = kind(docs, "Job");
        assertEquals("Indexed", at(job, "spec.completionMode"));
        assertEquals(4, (int) at(job, "spec.completions"));
        assertEquals(4, (int) at(job, "spec.parallelism"));
        assertEquals(0, (int) at(job, "spec.backoffLimit"));
        assertEquals("Never", at(job, "spec.template.spec.restartPolicy"));
        // Pod i is <job>-i.<subdomain>; the headless Service of that name selects the pods and publishes them
        // before they are ready, so JCCL_STORE_ADDR names pod 0.
        Map<String, Object> service = kind(docs, "Service");
        assertEquals("train", at(job, "spec.template.spec.subdomain"));
        assertEquals("train", at(service, "metadata.name"));
        assertEquals("None", at(service, "spec.clusterIP"));
        assertEquals(true, at(service, "spec.publishNotReadyAddresses"));
        Map<String, Object> podLabels = at(job, "spec.template.metadata.labels");
        Map<String, Object> selector = at(service, "spec.selector");
        assertTrue(podLabels.entrySet().containsAll(selector.entrySet()), selector + " vs " + podLabels);
        assertEquals(29500, (int) at(service, "spec.ports.0.port"));
        Map<String, Object> container = at(job, "spec.template.spec.containers.0");
        Map<String, Object> env = envOf(container);
        assertEquals("4", env.get("JCCL_WORLD_SIZE"));
        assertEquals("train-0.train:29500", env.get("JCCL_STORE_ADDR"));
        assertEquals("eth0", env.get("JCCL_SOCKET_IFNAME"));
        assertEquals(Map.of("secretKeyRef", Map.of("name", "train-jccl-auth", "key", "secret")),
            env.get("JCCL_AUTH_SECRET"));
        assertEquals(List.of("java", "-jar", "/app/train.jar"), container.get("command"));
        assertEquals("ml", at(job, "metadata.namespace"));
        // /dev/shm is memory of the requested size, mounted where the shm provider looks.
        assertEquals(Map.of("name", "dshm", "mountPath", "/dev/shm"), at(container, "volumeMounts.0"));
        assertEquals(Map.of("medium", "Memory", "sizeLimit", "2Gi"), at(job, "spec.template.spec.volumes.0.emptyDir"));
        assertEquals(Map.of("cpu", "4", "memory", "8Gi"), at(container, "resources.limits"));
        assertEquals(null, container.get("securityContext"), "no capabilities without an RDMA device");
        // The secret is random per rendering, 32 bytes; only the job's pods may connect to its pods.
        Map<String, Object> secret = kind(docs, "Secret");
        String value = at(secret, "stringData.secret");
        assertTrue(value.matches("[0-9a-f]{64}"), value);
        assertNotEquals(value, at(kind(parse(KubernetesManifest.render(spec("train", 4))), "Secret"),
            "stringData.secret"));
        Map<String, Object> policy = kind(docs, "NetworkPolicy");
        assertEquals(selector, at(policy, "spec.podSelector.matchLabels"));
        assertEquals(selector, at(policy, "spec.ingress.0.from.0.podSelector.matchLabels"));
    }

    @Test
    void shouldAskForTheRdmaDeviceAndTheCapabilityToPinMemory() {
        KubernetesManifest.Spec s = new KubernetesManifest.Spec("ib", null, 2, "img", List.of("run"), 29500, "net1",
            "1Gi", "rdma/hca", 1, null, null, "shared-secret", false, 2, Map.of("JCCL_DEBUG", "INFO"));
        List<Map<String, Object>> docs = parse(KubernetesManifest.render(s));
        assertEquals(List.of("Service", "Job"), docs.stream().map(d -> d.get("kind")).toList(),
            "an existing Secret and no NetworkPolicy were asked for");
        Map<String, Object> container = at(kind(docs, "Job"), "spec.template.spec.containers.0");
        assertEquals(1, (int) at(container, "resources.limits.rdma/hca"));
        assertEquals(List.of("IPC_LOCK"), at(container, "securityContext.capabilities.add"));
        Map<String, Object> env = envOf(container);
        assertEquals("net1", env.get("JCCL_SOCKET_IFNAME"));
        assertEquals("INFO", env.get("JCCL_DEBUG"));
        assertEquals(Map.of("secretKeyRef", Map.of("name", "shared-secret", "key", "secret")),
            env.get("JCCL_AUTH_SECRET"));
        assertEquals(2, (int) at(kind(docs, "Job"), "spec.backoffLimit"));
        assertFalse(at(kind(docs, "Job"), "metadata") instanceof Map<?, ?> m && m.containsKey("namespace"));
    }

    /** Values YAML would otherwise read as booleans, numbers, maps or comments stay the strings they were. */
    @Test
    void shouldKeepEveryValueAString() {
        Map<String, String> tricky = new LinkedHashMap<>();
        for (String v : List.of("yes", "off", "0755", "1e3", "a: b", "# not a comment", "x\ny", "quote\"back\\slash",
            "- item", "", "null", "~", "\u0007bell", "tab\there")) {
            tricky.put("V" + tricky.size(), v);
        }
        KubernetesManifest.Spec s = new KubernetesManifest.Spec("t", null, 1, "img", List.of("sh", "-c",
            "echo 'a: b' && true # x"), 29500, "eth0", "1Gi", null, 0, null, null, null, true, 0, tricky);
        Map<String, Object> container = at(kind(parse(KubernetesManifest.render(s)), "Job"),
            "spec.template.spec.containers.0");
        Map<String, Object> env = envOf(container);
        tricky.forEach((k, v) -> assertEquals(v, env.get(k), k));
        assertEquals(List.of("sh", "-c", "echo 'a: b' && true # x"), container.get("command"));
    }

    @Test
    void shouldRefuseWhatKubernetesWouldRefuseNamingTheOption() {
        assertMessage("--name 'Train'", () -> spec("Train", 2));
        assertMessage("pod host names", () -> spec("a".repeat(62), 11));
        assertMessage("--ranks 0", () -> spec("t", 0));
        assertMessage("--shm-size 'lots'", () -> new KubernetesManifest.Spec("t", null, 1, "img", List.of("x"),
            29500, "eth0", "lots", null, 0, null, null, null, true, 0, Map.of()));
        assertMessage("--env JCCL_WORLD_SIZE", () -> new KubernetesManifest.Spec("t", null, 1, "img", List.of("x"),
            29500, "eth0", "1Gi", null, 0, null, null, null, true, 0, Map.of("JCCL_WORLD_SIZE", "9")));
        assertMessage("--env JOB_COMPLETION_INDEX", () -> new KubernetesManifest.Spec("t", null, 1, "img",
            List.of("x"), 29500, "eth0", "1Gi", null, 0, null, null, null, true, 0, Map.of("JOB_COMPLETION_INDEX",
            "1")));
        assertMessage("--image is required", () -> new KubernetesManifest.Spec("t", null, 1, " ", List.of("x"),
            29500, "eth0", "1Gi", null, 0, null, null, null, true, 0, Map.of()));
        assertEquals(1, io.jccl.tools.Main.run("k8s", "--name", "Bad_Name", "--ranks", "2", "--image", "i"));
    }

    private static void assertMessage(String expected, org.junit.jupiter.api.function.Executable executable) {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, executable);
        assertTrue(e.getMessage().contains(expected), e.getMessage());
    }

    /** The command writes the same manifests to a file; the default command runs JCCL's all-reduce test. */
    @Test
    void shouldWriteTheManifestsToAFile(@TempDir Path dir) throws Exception {
        Path file = dir.resolve("job.yaml");
        assertEquals(0, io.jccl.tools.Main.run("k8s", "--name", "smoke", "--ranks", "3", "--image", "img",
            "-x", "JCCL_DEBUG=WARN", "-o", file.toString()));
        List<Map<String, Object>> docs = parse(Files.readString(file));
        Map<String, Object> container = at(kind(docs, "Job"), "spec.template.spec.containers.0");
        assertEquals(KubernetesCommand.DEFAULT_COMMAND, container.get("command"));
        assertEquals("WARN", envOf(container).get("JCCL_DEBUG"));
        assertEquals(0, io.jccl.tools.Main.run("k8s", "--name", "cmd", "--ranks", "1", "--image", "img", "-o",
            file.toString(), "--", "java", "-cp", "/app/*", "Train"));
        assertEquals(List.of("java", "-cp", "/app/*", "Train"), at(kind(parse(Files.readString(file)), "Job"),
            "spec.template.spec.containers.0.command"));
    }

    /**
     * Every pod's environment, as Kubernetes builds it from the Job (its env, the Secret's value for the
     * secretKeyRef, JOB_COMPLETION_INDEX), gives JCCL's launcher detection ranks 0..N-1 of one job, and pod 0
     * serves the store.
     */
    @Test
    void shouldGiveEveryPodItsRankFromTheCompletionIndex() {
        List<Map<String, Object>> docs = parse(KubernetesManifest.render(spec("train", 4)));
        for (int index = 0; index < 4; index++) {
            LaunchEnvironment e = LaunchEnvironment.detect(podEnvironment(docs, index));
            assertEquals(index, e.rank());
            assertEquals(4, e.worldSize());
            assertEquals("kubernetes", e.launcher());
            assertEquals("train-0.train:29500", e.storeAddress());
            assertEquals(index == 0, e.startServer());
        }
    }

    /**
     * Four processes with exactly the pods' environments (only the interface swapped for this host's loopback, and
     * pod 0's DNS name given by a hosts file as the cluster's DNS would) form one job through
     * {@code Communicator.fromEnvironment} and run a checked all-reduce.
     */
    @Test
    void shouldRunAJobFromThePodsEnvironments(@TempDir Path dir) throws Exception {
        int port = JcclRuntime.freePort();
        KubernetesManifest.Spec s = new KubernetesManifest.Spec("train", null, 4, "img", List.of("x"), port, "eth0",
            "1Gi", null, 0, null, null, null, true, 0, Map.of());
        List<Map<String, Object>> docs = parse(KubernetesManifest.render(s));
        Path hosts = dir.resolve("hosts");
        Files.writeString(hosts, "127.0.0.1 localhost " + InetAddress.getLocalHost().getHostName()
            + "\n127.0.0.1 train-0.train\n");
        List<Process> pods = new ArrayList<>();
        List<ByteArrayOutputStream> outputs = new ArrayList<>();
        try {
            for (int index = 0; index < 4; index++) {
                Map<String, String> env = podEnvironment(docs, index);
                env.put("JCCL_SOCKET_IFNAME", "lo");
                ProcessBuilder builder = new ProcessBuilder(JcclRuntime.javaCommand(List.of("-Xmx256m",
                    "-Djdk.net.hosts.file=" + hosts), "io.jccl.tools.Main", List.of("tests", "all_reduce_perf",
                    "-b", "8", "-e", "64K", "-f", "64", "-n", "3", "-w", "1", "--jit_warmup", "0")));
                builder.environment().keySet().removeIf(k -> k.startsWith("JCCL_") || k.equals("RANK")
                    || k.equals("WORLD_SIZE") || k.startsWith("OMPI_") || k.startsWith("SLURM_"));
                builder.environment().putAll(env);
                builder.redirectErrorStream(true);
                Process p = builder.start();
                ByteArrayOutputStream out = new ByteArrayOutputStream();
                Thread.ofPlatform().daemon().start(() -> copy(p.getInputStream(), out));
                pods.add(p);
                outputs.add(out);
            }
            for (int index = 0; index < 4; index++) {
                Process p = pods.get(index);
                if (!p.waitFor(120, TimeUnit.SECONDS)) {
                    fail("pod " + index + " did not finish within 120 s:\n" + text(outputs.get(index)));
                }
                assertEquals(0, p.exitValue(), "pod " + index + ":\n" + text(outputs.get(index)));
            }
            String rank0 = text(outputs.get(0));
            assertTrue(rank0.contains("# Out of bounds values : 0 OK"), rank0);
            assertTrue(rank0.contains("Rank  3 Group"), rank0);
        } finally {
            pods.forEach(Process::destroyForcibly);
        }
    }

    private static void copy(InputStream in, ByteArrayOutputStream out) {
        byte[] buffer = new byte[8192];
        try (in) {
            for (int n; (n = in.read(buffer)) >= 0; ) {
                synchronized (out) {
                    out.write(buffer, 0, n);
                }
            }
        } catch (java.io.IOException closed) {
            // the process ended
        }
    }

    private static String text(ByteArrayOutputStream out) {
        synchronized (out) {
            return out.toString(StandardCharsets.UTF_8);
        }
    }

    /** The container's env as a map: plain values as strings, valueFrom entries as their maps. */
    private static Map<String, Object> envOf(Map<String, Object> container) {
        Map<String, Object> env = new LinkedHashMap<>();
        List<Map<String, Object>> list = at(container, "env");
        for (Map<String, Object> e : list) {
            env.put((String) e.get("name"), e.containsKey("value") ? e.get("value") : e.get("valueFrom"));
        }
        return env;
    }

    /** What a pod of index {@code index} gets: the Job's env with the secret resolved, and JOB_COMPLETION_INDEX. */
    private static Map<String, String> podEnvironment(List<Map<String, Object>> docs, int index) {
        Map<String, Object> container = at(kind(docs, "Job"), "spec.template.spec.containers.0");
        Map<String, String> env = new HashMap<>();
        for (Map.Entry<String, Object> e : envOf(container).entrySet()) {
            if (e.getValue() instanceof String v) {
                env.put(e.getKey(), v);
            } else {
                String secretName = at(e.getValue(), "secretKeyRef.name");
                Map<String, Object> secret = kind(docs, "Secret");
                assertEquals(secretName, at(secret, "metadata.name"));
                env.put(e.getKey(), at(secret, "stringData." + at(e.getValue(), "secretKeyRef.key")));
            }
        }
        env.put("JOB_COMPLETION_INDEX", Integer.toString(index));
        return env;
    }
}
