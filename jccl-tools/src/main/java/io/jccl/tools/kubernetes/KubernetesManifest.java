package io.jccl.tools.kubernetes;

import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;

/**
 * The manifests of one JCCL job on Kubernetes, built from a {@link Spec}:
 * <ol>
 * <li>a Secret holding the job's {@code JCCL_AUTH_SECRET} (32 random bytes, hex; omitted when the spec names an
 * existing Secret), so that only the job's own pods can use its rendezvous store;</li>
 * <li>a headless Service named like the Job, selecting the Job's pods, with {@code publishNotReadyAddresses} so
 * that pod 0's DNS name ({@code <job>-0.<job>}) resolves as soon as the pod has an address, not only once ready;</li>
 * <li>a NetworkPolicy letting only the Job's pods reach them (the store and the tcp provider's ports), unless
 * disabled;</li>
 * <li>an Indexed Job: {@code completions = parallelism = ranks}, every pod's rank its completion index
 * ({@code JOB_COMPLETION_INDEX}, set by Kubernetes), {@code JCCL_WORLD_SIZE}, {@code JCCL_STORE_ADDR = <job>-0.<job>:
 * port}, {@code JCCL_SOCKET_IFNAME}, a memory-backed {@code /dev/shm} of the given size (the container runtime's
 * default is 64 MiB, too small for the shm provider's rings and bounce buffers), and, when asked, an RDMA device
 * resource with the {@code IPC_LOCK} capability that registering memory needs.</li>
 * </ol>
 * A job whose ranks cannot all run is over: {@code backoffLimit} defaults to 0 and {@code restartPolicy} is Never,
 * because a restarted pod cannot join a communicator that started without it (a static job; the elastic mode is in
 * docs/fault-tolerance.md).
 */
public final class KubernetesManifest {
    /** Label every object and pod of the job carries; the Service and the NetworkPolicy select on it. */
    public static final String JOB_LABEL = "jccl.io/job";
    /** Key of the store secret inside the Secret. */
    public static final String SECRET_KEY = "secret";

    private static final Pattern DNS_LABEL = Pattern.compile("[a-z0-9]([-a-z0-9]*[a-z0-9])?");
    private static final Pattern ENV_NAME = Pattern.compile("[A-Za-z_][A-Za-z0-9_.-]*");
    private static final Pattern QUANTITY = Pattern.compile("[0-9]+(\\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?");
    private static final Pattern RESOURCE = Pattern.compile("([a-z0-9.-]+/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?");

    private KubernetesManifest() {
    }

    /**
     * What the job needs.
     *
     * @param name the Job's name, also the Service's and the pods' subdomain (a DNS label)
     * @param namespace namespace of every object, or null for the one kubectl uses
     * @param ranks number of ranks, one per pod
     * @param image container image with a JDK 25 and the application
     * @param command the container's command (the rank's {@code java ...} line)
     * @param storePort port of the rendezvous store that pod 0 serves
     * @param socketInterface {@code JCCL_SOCKET_IFNAME}: the pod interface the tcp provider uses
     * @param shmSize size limit of the memory-backed {@code /dev/shm} (a Kubernetes quantity, e.g. 1Gi)
     * @param rdmaResource extended resource for an RDMA device (e.g. {@code rdma/hca}), or null for none
     * @param rdmaCount how many of {@code rdmaResource} each pod asks for
     * @param cpu CPU request and limit per pod (a quantity), or null
     * @param memory memory request and limit per pod (a quantity), or null
     * @param existingSecret name of an existing Secret with key {@value #SECRET_KEY}, or null to write a new one
     * @param networkPolicy whether to write the NetworkPolicy
     * @param backoffLimit the Job's backoffLimit
     * @param extraEnv more environment variables for every rank, in order
     */
    public record Spec(String name, String namespace, int ranks, String image, List<String> command, int storePort,
                       String socketInterface, String shmSize, String rdmaResource, int rdmaCount, String cpu,
                       String memory, String existingSecret, boolean networkPolicy, int backoffLimit,
                       Map<String, String> extraEnv) {
        /** Checks every field now, so a bad value is an error naming it rather than a manifest kubectl refuses. */
        public Spec {
            if (name == null || !DNS_LABEL.matcher(name).matches()) {
                throw new IllegalArgumentException("--name '" + name + "': a Kubernetes name must be a DNS label "
                    + "(lower-case letters, digits and '-', starting and ending with a letter or digit)");
            }
            if (ranks < 1) {
                throw new IllegalArgumentException("--ranks " + ranks + ": at least 1");
            }
            // Pod hostnames are <name>-<index> and must stay within a DNS label's 63 characters.
            int hostLength = name.length() + 1 + Integer.toString(ranks - 1).length();
            if (hostLength > 63) {
                throw new IllegalArgumentException("--name '" + name + "' is too long: pod host names <name>-<index> "
                    + "would have " + hostLength + " characters, more than a DNS label's 63");
            }
            if (namespace != null && !DNS_LABEL.matcher(namespace).matches()) {
                throw new IllegalArgumentException("--namespace '" + namespace + "' is not a DNS label");
            }
            if (image == null || image.isBlank()) {
                throw new IllegalArgumentException("--image is required: a container image with a JDK 25 and the "
                    + "application (docs/kubernetes.md has a Dockerfile)");
            }
            if (command == null || command.isEmpty()) {
                throw new IllegalArgumentException("no command: give the rank's command after --");
            }
            if (storePort < 1 || storePort > 65535) {
                throw new IllegalArgumentException("--store-port " + storePort + ": 1..65535");
            }
            if (socketInterface == null || socketInterface.isBlank()) {
                throw new IllegalArgumentException("--ifname is required (the pod's interface, usually eth0)");
            }
            quantity("--shm-size", shmSize, false);
            quantity("--cpu", cpu, true);
            quantity("--memory", memory, true);
            if (rdmaResource != null) {
                if (!RESOURCE.matcher(rdmaResource).matches()) {
                    throw new IllegalArgumentException("--rdma '" + rdmaResource + "' is not a resource name such "
                        + "as rdma/hca");
                }
                if (rdmaCount < 1) {
                    throw new IllegalArgumentException("--rdma " + rdmaResource + "=" + rdmaCount + ": at least 1");
                }
            }
            if (existingSecret != null && !existingSecret.matches("[a-z0-9]([-a-z0-9.]*[a-z0-9])?")) {
                throw new IllegalArgumentException("--secret '" + existingSecret + "' is not a Secret name");
            }
            if (backoffLimit < 0) {
                throw new IllegalArgumentException("--backoff-limit " + backoffLimit + ": not negative");
            }
            extraEnv = extraEnv == null ? Map.of() : new LinkedHashMap<>(extraEnv);
            for (String key : extraEnv.keySet()) {
                if (!ENV_NAME.matcher(key).matches()) {
                    throw new IllegalArgumentException("--env '" + key + "' is not an environment variable name");
                }
                if (Generated.NAMES.contains(key) || key.equals("JOB_COMPLETION_INDEX")) {
                    throw new IllegalArgumentException("--env " + key + ": set by the manifest itself ("
                        + (key.equals("JOB_COMPLETION_INDEX") ? "Kubernetes sets it in every pod" : "use the option "
                        + "for it") + ")");
                }
            }
            command = List.copyOf(command);
        }

        private static void quantity(String option, String value, boolean optional) {
            if (value == null && optional) {
                return;
            }
            if (value == null || !QUANTITY.matcher(value).matches()) {
                throw new IllegalArgumentException(option + " '" + value + "' is not a Kubernetes quantity such as "
                    + "512Mi, 2Gi or 500m");
            }
        }

        /** Name of the Secret the pods read {@code JCCL_AUTH_SECRET} from. */
        public String secretName() {
            return existingSecret != null ? existingSecret : name + "-jccl-auth";
        }

        /** {@code JCCL_STORE_ADDR}: pod 0's name under the headless Service. */
        public String storeAddress() {
            return name + "-0." + name + ":" + storePort;
        }
    }

    /** Environment variables the Job writes itself. */
    private static final class Generated {
        static final List<String> NAMES = List.of("JCCL_WORLD_SIZE", "JCCL_STORE_ADDR", "JCCL_SOCKET_IFNAME",
            "JCCL_AUTH_SECRET", "JDK_JAVA_OPTIONS");
    }

    /** The manifests as one YAML stream, with a new random store secret unless the spec names one. */
    public static String render(Spec spec) {
        return Yaml.write(documents(spec, newSecret()));
    }

    /** The manifests as YAML objects (maps and lists), with {@code secretHex} as the new Secret's value. */
    static List<Map<String, Object>> documents(Spec spec, String secretHex) {
        List<Map<String, Object>> docs = new ArrayList<>();
        if (spec.existingSecret() == null) {
            docs.add(secret(spec, secretHex));
        }
        docs.add(service(spec));
        if (spec.networkPolicy()) {
            docs.add(networkPolicy(spec));
        }
        docs.add(job(spec));
        return docs;
    }

    private static String newSecret() {
        byte[] bytes = new byte[32];
        new SecureRandom().nextBytes(bytes);
        return HexFormat.of().formatHex(bytes);
    }

    private static Map<String, Object> metadata(Spec spec, String name) {
        Map<String, Object> m = map("name", name);
        if (spec.namespace() != null) {
            m.put("namespace", spec.namespace());
        }
        m.put("labels", map("app.kubernetes.io/managed-by", "jccl", JOB_LABEL, spec.name()));
        return m;
    }

    private static Map<String, Object> secret(Spec spec, String secretHex) {
        Map<String, Object> d = map("apiVersion", "v1", "kind", "Secret");
        d.put("metadata", metadata(spec, spec.secretName()));
        d.put("type", "Opaque");
        d.put("stringData", map(SECRET_KEY, secretHex));
        return d;
    }

    private static Map<String, Object> service(Spec spec) {
        Map<String, Object> d = map("apiVersion", "v1", "kind", "Service");
        d.put("metadata", metadata(spec, spec.name()));
        Map<String, Object> s = map("clusterIP", "None");
        s.put("publishNotReadyAddresses", true);
        s.put("selector", map(JOB_LABEL, spec.name()));
        s.put("ports", List.of(map("name", "store", "port", spec.storePort(), "protocol", "TCP")));
        d.put("spec", s);
        return d;
    }

    private static Map<String, Object> networkPolicy(Spec spec) {
        Map<String, Object> d = map("apiVersion", "networking.k8s.io/v1", "kind", "NetworkPolicy");
        d.put("metadata", metadata(spec, spec.name() + "-jccl-peers"));
        Map<String, Object> s = map("podSelector", map("matchLabels", map(JOB_LABEL, spec.name())));
        s.put("policyTypes", List.of("Ingress"));
        s.put("ingress", List.of(map("from", List.of(map("podSelector", map("matchLabels",
            map(JOB_LABEL, spec.name())))))));
        d.put("spec", s);
        return d;
    }

    private static Map<String, Object> job(Spec spec) {
        Map<String, Object> d = map("apiVersion", "batch/v1", "kind", "Job");
        d.put("metadata", metadata(spec, spec.name()));
        Map<String, Object> s = map("completionMode", "Indexed");
        s.put("completions", spec.ranks());
        s.put("parallelism", spec.ranks());
        s.put("backoffLimit", spec.backoffLimit());
        Map<String, Object> podMeta = map("labels", map(JOB_LABEL, spec.name()));
        Map<String, Object> pod = map("subdomain", spec.name());
        pod.put("restartPolicy", "Never");
        pod.put("containers", List.of(container(spec)));
        pod.put("volumes", List.of(map("name", "dshm", "emptyDir", map("medium", "Memory", "sizeLimit",
            spec.shmSize()))));
        s.put("template", map("metadata", podMeta, "spec", pod));
        d.put("spec", s);
        return d;
    }

    private static Map<String, Object> container(Spec spec) {
        Map<String, Object> c = map("name", "rank", "image", spec.image());
        c.put("command", new ArrayList<Object>(spec.command()));
        List<Object> env = new ArrayList<>();
        env.add(map("name", "JCCL_WORLD_SIZE", "value", Integer.toString(spec.ranks())));
        env.add(map("name", "JCCL_STORE_ADDR", "value", spec.storeAddress()));
        env.add(map("name", "JCCL_SOCKET_IFNAME", "value", spec.socketInterface()));
        env.add(map("name", "JCCL_AUTH_SECRET", "valueFrom", map("secretKeyRef", map("name", spec.secretName(),
            "key", SECRET_KEY))));
        // Ranks look up pod 0's name before its DNS record exists; the JDK caches a failed lookup for 10 s.
        env.add(map("name", "JDK_JAVA_OPTIONS", "value", "-Dsun.net.inetaddr.negative.ttl=1"));
        for (Map.Entry<String, String> e : spec.extraEnv().entrySet()) {
            env.add(map("name", e.getKey(), "value", e.getValue()));
        }
        c.put("env", env);
        c.put("ports", List.of(map("name", "store", "containerPort", spec.storePort(), "protocol", "TCP")));
        Map<String, Object> limits = new LinkedHashMap<>();
        if (spec.cpu() != null) {
            limits.put("cpu", spec.cpu());
        }
        if (spec.memory() != null) {
            limits.put("memory", spec.memory());
        }
        if (spec.rdmaResource() != null) {
            limits.put(spec.rdmaResource(), spec.rdmaCount());
        }
        if (!limits.isEmpty()) {
            Map<String, Object> requests = new LinkedHashMap<>(limits);
            c.put("resources", map("requests", requests, "limits", limits));
        }
        if (spec.rdmaResource() != null) {
            // Registering memory pins it: without IPC_LOCK the pod's memlock limit (64 KiB by default) refuses it.
            c.put("securityContext", map("capabilities", map("add", List.of("IPC_LOCK"))));
        }
        c.put("volumeMounts", List.of(map("name", "dshm", "mountPath", "/dev/shm")));
        return c;
    }

    private static Map<String, Object> map(Object... keysAndValues) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < keysAndValues.length; i += 2) {
            m.put((String) keysAndValues[i], keysAndValues[i + 1]);
        }
        return m;
    }
}
