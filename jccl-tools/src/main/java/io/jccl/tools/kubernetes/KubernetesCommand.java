package io.jccl.tools.kubernetes;

import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;

/**
 * {@code jccl k8s --name NAME --ranks N --image IMAGE [options] [-- COMMAND...]}: prints (or writes) the manifests
 * of {@link KubernetesManifest} for {@code kubectl apply -f -}.
 */
@Command(name = "k8s", mixinStandardHelpOptions = true,
    description = {"Write the Kubernetes manifests of a JCCL job: a Secret for JCCL_AUTH_SECRET, a headless Service, "
        + "a NetworkPolicy and an Indexed Job whose pods take their rank from the completion index "
        + "(docs/kubernetes.md). Pipe to: kubectl apply -f -"})
public final class KubernetesCommand implements Callable<Integer> {
    /** The rank's command when none is given: JCCL's all-reduce test over the whole job, a first check of a cluster. */
    static final List<String> DEFAULT_COMMAND = List.of("java", "--enable-native-access=ALL-UNNAMED", "--add-modules",
        "jdk.incubator.vector", "-cp", "/opt/jccl/lib/*", "io.jccl.tools.Main", "tests", "all_reduce_perf", "-b", "8",
        "-e", "64M", "-f", "4");

    @Option(names = "--name", required = true, description = "name of the Job, its Service and pod subdomain")
    String name;

    @Option(names = {"--ranks", "-n"}, required = true, description = "number of ranks (one pod each)")
    int ranks;

    @Option(names = "--image", required = true, description = "container image with a JDK 25 and the application")
    String image;

    @Option(names = "--namespace", description = "namespace of every object (default: kubectl's)")
    String namespace;

    @Option(names = "--store-port", defaultValue = "29500", description = "port of pod 0's store (default ${DEFAULT-VALUE})")
    int storePort;

    @Option(names = "--ifname", defaultValue = "eth0", description = "JCCL_SOCKET_IFNAME in the pods (default "
        + "${DEFAULT-VALUE})")
    String socketInterface;

    @Option(names = "--shm-size", defaultValue = "1Gi", description = "size of the memory-backed /dev/shm per pod "
        + "(default ${DEFAULT-VALUE})")
    String shmSize;

    @Option(names = "--rdma", paramLabel = "RESOURCE[=COUNT]", description = "request an RDMA device resource per "
        + "pod, e.g. rdma/hca=1 (adds the IPC_LOCK capability)")
    String rdma;

    @Option(names = "--cpu", description = "CPU request and limit per pod, e.g. 4")
    String cpu;

    @Option(names = "--memory", description = "memory request and limit per pod, e.g. 8Gi")
    String memory;

    @Option(names = "--secret", description = "use this existing Secret (key 'secret') for JCCL_AUTH_SECRET instead "
        + "of writing a new one")
    String existingSecret;

    @Option(names = "--no-network-policy", description = "do not write the NetworkPolicy that admits only the job's "
        + "pods")
    boolean noNetworkPolicy;

    @Option(names = "--backoff-limit", defaultValue = "0", description = "the Job's backoffLimit (default "
        + "${DEFAULT-VALUE}: a lost rank ends the job)")
    int backoffLimit;

    @Option(names = {"-x", "--env"}, paramLabel = "NAME=VALUE", description = "extra environment variable for every "
        + "rank (repeatable)")
    Map<String, String> env = new LinkedHashMap<>();

    @Option(names = {"-o", "--output"}, description = "write to this file instead of standard output")
    Path output;

    @Parameters(paramLabel = "COMMAND", arity = "0..*", description = "the rank's command (after --); default: "
        + "jccl tests all_reduce_perf from /opt/jccl/lib")
    List<String> command = new ArrayList<>();

    @Override
    public Integer call() throws Exception {
        String rdmaResource = null;
        int rdmaCount = 0;
        if (rdma != null) {
            int eq = rdma.indexOf('=');
            rdmaResource = eq < 0 ? rdma : rdma.substring(0, eq);
            try {
                rdmaCount = eq < 0 ? 1 : Integer.parseInt(rdma.substring(eq + 1));
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException("--rdma " + rdma + ": the count after '=' is not a number", e);
            }
        }
        KubernetesManifest.Spec spec = new KubernetesManifest.Spec(name, namespace, ranks, image,
            command.isEmpty() ? DEFAULT_COMMAND : command, storePort, socketInterface, shmSize, rdmaResource,
            rdmaCount, cpu, memory, existingSecret, !noNetworkPolicy, backoffLimit, env);
        String yaml = "# jccl k8s: " + ranks + " ranks of job " + name + "; apply with kubectl apply -f FILE "
            + "(docs/kubernetes.md)\n" + KubernetesManifest.render(spec);
        if (output != null) {
            Files.writeString(output, yaml, StandardCharsets.UTF_8);
        } else {
            System.out.print(yaml);
            System.out.flush();
        }
        return 0;
    }
}
