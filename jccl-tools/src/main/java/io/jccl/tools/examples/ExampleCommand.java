package io.jccl.tools.examples;

import picocli.CommandLine.Command;
import picocli.CommandLine.Parameters;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.util.List;
import java.util.concurrent.Callable;

/** {@code jccl example NAME [ARGS…]}: runs an example of jccl-examples ({@code io.jccl.examples.NAME}) in this JVM. */
@Command(name = "example", mixinStandardHelpOptions = true,
    description = {"Run an example from jccl-examples: ParameterServerExample, SequencedWriteWithImmediateExample, "
        + "OperationLatencyExample, TransferEngineExample, ParameterServerTrainingExample, CheckpointStagingExample, "
        + "EmbeddingCacheExample, KvCacheTransferExample, InferenceBatchingExample, FeatureIngestionExample "
        + "(arguments go to the example, for example --device tcp0)."})
public final class ExampleCommand implements Callable<Integer> {
    /** Package of the examples. */
    static final String PACKAGE = "io.jccl.examples.";

    @Parameters(index = "0", paramLabel = "NAME", description = "example class (simple or fully qualified name)")
    String name;

    @Parameters(index = "1..*", paramLabel = "ARGS", description = "arguments for the example")
    List<String> args = List.of();

    @Override
    public Integer call() throws Exception {
        String className = name.contains(".") ? name : PACKAGE + name;
        Class<?> type;
        try {
            type = Class.forName(className, true, ExampleCommand.class.getClassLoader());
        } catch (ClassNotFoundException e) {
            throw new IllegalArgumentException("no example " + name + " (looked for " + className
                + " on the JCCL class path)");
        }
        Method main = type.getMethod("main", String[].class);
        if (!Modifier.isStatic(main.getModifiers())) {
            throw new IllegalArgumentException(className + " has no static main method");
        }
        try {
            main.invoke(null, (Object) args.toArray(String[]::new));
        } catch (InvocationTargetException e) {
            Throwable cause = e.getCause();
            if (cause instanceof Exception ex) {
                throw ex;
            }
            throw e;
        }
        return 0;
    }
}
