package io.jccl.tools;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/** What tools need to start more JCCL JVMs: the java binary, the class path and the JCCL JVM flags. */
public final class JcclRuntime {
    /** Flags every JCCL JVM runs with (FFM downcalls and the Vector API), as the parent pom's jccl.jvm.flags. */
    public static final List<String> JVM_FLAGS =
        List.of("--enable-native-access=ALL-UNNAMED", "--add-modules", "jdk.incubator.vector");

    private JcclRuntime() {
    }

    /** The java binary of this JVM. */
    public static String javaBinary() {
        return Path.of(System.getProperty("java.home"), "bin", "java").toString();
    }

    /** The class path of this JVM (the tools jar and its runtime dependencies when started by ./jccl). */
    public static String classPath() {
        return System.getProperty("java.class.path");
    }

    /**
     * A command that starts {@code mainClass} in a new JVM with the JCCL flags and this JVM's class path.
     *
     * @param jvmOptions extra JVM options placed before the main class (may be empty)
     */
    public static List<String> javaCommand(List<String> jvmOptions, String mainClass, List<String> args) {
        List<String> command = new ArrayList<>();
        command.add(javaBinary());
        command.addAll(JVM_FLAGS);
        command.addAll(jvmOptions);
        command.add("-cp");
        command.add(classPath());
        command.add(mainClass);
        command.addAll(args);
        return command;
    }

    /** Whether stderr is a terminal, so progress displays may be drawn there. */
    public static boolean stderrIsTerminal() {
        if (System.getProperty("jccl.stderr.tty") != null) {
            return Boolean.getBoolean("jccl.stderr.tty");
        }
        java.io.Console console = System.console();
        return console != null && console.isTerminal();
    }

    /** A TCP port on the loopback interface that is free right now. */
    public static int freePort() {
        try (ServerSocket socket = new ServerSocket()) {
            socket.setReuseAddress(false);
            socket.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
            return socket.getLocalPort();
        } catch (IOException e) {
            throw new IllegalStateException("cannot find a free TCP port: " + e.getMessage(), e);
        }
    }
}
