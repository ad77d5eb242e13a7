package io.jccl.examples;

import io.jccl.collectives.LaunchEnvironment;
import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.VerbsException;
import io.jccl.verbs.WorkCompletion;

import java.util.Map;
import java.util.concurrent.TimeUnit;

/** Small helpers the examples share. */
final class ExampleSupport {
    private ExampleSupport() {
    }

    /** Waits up to 10 s for one completion and fails loudly unless it succeeded. */
    static WorkCompletion awaitSuccess(CompletionQueue queue, WorkCompletion[] completions) {
        int n = queue.poll(completions, 1, TimeUnit.SECONDS.toNanos(10));
        if (n == 0) {
            throw new VerbsException(VerbsException.Reason.TIMEOUT, "no completion within 10 s");
        }
        WorkCompletion completion = completions[0];
        if (!completion.isSuccess()) {
            throw new VerbsException(VerbsException.Reason.CONNECTION, "work request failed: " + completion);
        }
        return completion;
    }

    /**
     * Whether a launcher started this process as one rank of a job (JCCL's launcher, torchrun, mpirun, Slurm or a
     * Kubernetes Indexed Job): the examples then run that rank only, else both sides in this process.
     */
    static boolean launched(Map<String, String> env) {
        return LaunchEnvironment.launched(env);
    }

    /** The value of {@code --name value} in {@code args}, or {@code fallback}. */
    static String option(String[] args, String name, String fallback) {
        for (int i = 0; i + 1 < args.length; i++) {
            if (args[i].equals(name)) {
                return args[i + 1];
            }
        }
        return fallback;
    }
}
