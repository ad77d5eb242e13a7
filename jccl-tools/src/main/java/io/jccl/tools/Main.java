package io.jccl.tools;

import io.jccl.tools.colltests.TestsCommand;
import io.jccl.tools.demo.DemoCommand;
import io.jccl.tools.devinfo.DevicesCommand;
import io.jccl.tools.devinfo.DevInfoCommand;
import io.jccl.tools.examples.ExampleCommand;
import io.jccl.tools.kubernetes.KubernetesCommand;
import io.jccl.tools.launcher.RunCommand;
import io.jccl.tools.perftest.PerfCommand;
import picocli.CommandLine;
import picocli.CommandLine.Command;

/**
 * The {@code jccl} command: {@code devices}, {@code devinfo}, {@code perf}, {@code run}, {@code tests},
 * {@code demo}, {@code example} and {@code k8s}.
 * Started by the {@code ./jccl} script at the repository root.
 */
@Command(name = "jccl", mixinStandardHelpOptions = true, versionProvider = Main.Version.class,
    description = "JCCL tools: verbs devices, perftest-compatible benchmarks, a local launcher.",
    subcommands = {DevicesCommand.class, DevInfoCommand.class, PerfCommand.class, RunCommand.class,
        TestsCommand.class, io.jccl.tools.colltests.PlotCommand.class, DemoCommand.class, ExampleCommand.class, KubernetesCommand.class,
        CommandLine.HelpCommand.class})
public final class Main implements Runnable {
    @CommandLine.Spec
    private CommandLine.Model.CommandSpec spec;

    /** Runs the command line and exits with its status. */
    public static void main(String[] args) {
        System.exit(run(args));
    }

    /** Runs the command line and returns the exit status (for tests and embedding). */
    public static int run(String... args) {
        return commandLine().execute(args);
    }

    /** The configured picocli command line (exposed so tests can parse without executing). */
    public static CommandLine commandLine() {
        CommandLine commandLine = new CommandLine(new Main());
        commandLine.setCaseInsensitiveEnumValuesAllowed(true);
        // Everything after the launched command's first word belongs to that command.
        commandLine.getSubcommands().get("run").setStopAtPositional(true);
        commandLine.getSubcommands().get("run").setUnmatchedOptionsArePositionalParams(true);
        commandLine.getSubcommands().get("example").setStopAtPositional(true);
        commandLine.getSubcommands().get("example").setUnmatchedOptionsArePositionalParams(true);
        commandLine.setExecutionExceptionHandler((exception, cmd, parseResult) -> {
            cmd.getErr().println("jccl " + cmd.getCommandName() + ": " + describe(exception));
            if (Boolean.getBoolean("jccl.debug")) {
                exception.printStackTrace(cmd.getErr());
            }
            return 1;
        });
        return commandLine;
    }

    private static String describe(Throwable exception) {
        String message = exception.getMessage();
        return message == null ? exception.toString() : message;
    }

    @Override
    public void run() {
        spec.commandLine().usage(spec.commandLine().getOut());
    }

    /** Reports the project version. */
    static final class Version implements CommandLine.IVersionProvider {
        @Override
        public String[] getVersion() {
            String version = Main.class.getPackage().getImplementationVersion();
            return new String[] {"jccl " + (version == null ? "0.2.0" : version)
                + " (Java " + Runtime.version() + ")"};
        }
    }
}
