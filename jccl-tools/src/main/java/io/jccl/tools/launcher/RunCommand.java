package io.jccl.tools.launcher;

import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

import java.net.InetAddress;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.regex.Pattern;

/** {@code jccl run -np N COMMAND…}: the local launcher (see {@link Launcher}). */
@Command(name = "run", mixinStandardHelpOptions = true, sortOptions = false,
    description = {"Start N ranks of COMMAND on this host with JCCL_RANK, JCCL_WORLD_SIZE, JCCL_LOCAL_RANK, "
        + "JCCL_LOCAL_SIZE, JCCL_JOB_ID, JCCL_STORE_ADDR, MASTER_ADDR, MASTER_PORT (and RANK, WORLD_SIZE, "
        + "LOCAL_RANK) set.",
        "Output lines are prefixed with [rank]. The first non-zero exit status ends the job (the other ranks are "
            + "killed) and becomes jccl run's status.",
        "COMMAND may be a Java main class (--java, or any class on the JCCL class path): it then runs in a JVM "
            + "with the JCCL class path and flags."})
public final class RunCommand implements Callable<Integer> {
    private static final Pattern CLASS_NAME =
        Pattern.compile("([\\p{javaJavaIdentifierStart}][\\p{javaJavaIdentifierPart}]*\\.)+"
            + "[\\p{javaJavaIdentifierStart}][\\p{javaJavaIdentifierPart}]*");

    @Option(names = {"-np", "-n", "--np"}, paramLabel = "N", required = true, description = "number of ranks")
    int ranks;

    @Option(names = "--hosts", paramLabel = "HOST[:SLOTS],…", split = ",",
        description = "hosts to run on; only this host for now (localhost, 127.0.0.1 or its own name)")
    List<String> hosts;

    @Option(names = "--no-prefix", description = "do not prefix output lines with [rank]")
    boolean noPrefix;

    @Option(names = "--timeout", paramLabel = "SECONDS", description = "kill the job after this long (exit 124)")
    long timeoutSeconds;

    @Option(names = "--java", description = "COMMAND is a Java main class and its arguments")
    boolean java;

    @Option(names = "--jvm-opt", paramLabel = "OPT", description = "extra JVM option for --java ranks (repeatable)")
    List<String> jvmOptions = new ArrayList<>();

    @Option(names = {"-x", "--env"}, paramLabel = "NAME=VALUE", description = "extra environment variable "
        + "(repeatable)")
    Map<String, String> env = new java.util.LinkedHashMap<>();

    @Parameters(arity = "1..*", paramLabel = "COMMAND", description = "the program and its arguments")
    List<String> command;

    @Override
    public Integer call() throws Exception {
        checkHosts();
        Launcher.Builder builder = Launcher.builder().ranks(ranks).prefixOutput(!noPrefix)
            .timeout(timeoutSeconds > 0 ? Duration.ofSeconds(timeoutSeconds) : null);
        env.forEach(builder::env);
        Map<String, String> environment = new java.util.LinkedHashMap<>(System.getenv());
        environment.putAll(env);
        builder.aotCache(AotCache.fromEnvironment(environment, System.err));
        if (java || looksLikeMainClass(command.getFirst())) {
            builder.javaMain(jvmOptions, command.getFirst(), command.subList(1, command.size()));
        } else {
            builder.command(command);
        }
        Launcher.Result result = builder.build().run();
        return result.exitCode();
    }

    private void checkHosts() throws Exception {
        if (hosts == null) {
            return;
        }
        String self = InetAddress.getLocalHost().getHostName();
        int slots = 0;
        for (String h : hosts) {
            String[] parts = h.split(":");
            String name = parts[0].toLowerCase(Locale.ROOT);
            if (!name.equals("localhost") && !name.equals("127.0.0.1") && !name.equals(self.toLowerCase(Locale.ROOT))
                && !name.equals("::1")) {
                throw new IllegalArgumentException("remote host '" + parts[0] + "': jccl run launches on this host "
                    + "only for now (start one 'jccl run' per host with the same MASTER_ADDR to span hosts)");
            }
            slots += parts.length > 1 ? Integer.parseInt(parts[1]) : 0;
        }
        if (slots > 0 && slots < ranks) {
            throw new IllegalArgumentException("--hosts offers " + slots + " slots for " + ranks + " ranks");
        }
    }

    /** A dotted Java class name that is on our class path and is not a file. */
    static boolean looksLikeMainClass(String word) {
        if (!CLASS_NAME.matcher(word).matches() || Files.exists(Path.of(word))) {
            return false;
        }
        try {
            Class.forName(word, false, RunCommand.class.getClassLoader());
            return true;
        } catch (ClassNotFoundException | LinkageError e) {
            return false;
        }
    }
}
