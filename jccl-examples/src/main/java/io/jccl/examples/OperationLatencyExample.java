package io.jccl.examples;

import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.Context;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.ProtectionDomain;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.Verbs;
import io.jccl.verbs.WorkCompletion;

import java.util.Arrays;

/**
 * Per-operation latency, timed from post to completion, of RDMA WRITE, RDMA READ and FETCH_AND_ADD of 8 bytes
 * between two contexts of this process. The hot loop re-posts one {@link SendWorkRequest} and polls into a
 * preallocated completion array, so it allocates nothing.
 *
 * <pre>java ... io.jccl.examples.OperationLatencyExample [--device shm0|tcp0] [--iterations 20000]</pre>
 */
public final class OperationLatencyExample {
    private OperationLatencyExample() {
    }

    /** Entry point. */
    public static void main(String[] args) {
        String device = ExampleSupport.option(args, "--device", "shm0");
        int iterations = Integer.parseInt(ExampleSupport.option(args, "--iterations", "20000"));
        System.out.print(run(device, iterations));
    }

    /** Measures and returns a small table. */
    public static String run(String device, int iterations) {
        StringBuilder report = new StringBuilder(String.format("%-22s %10s %10s %10s %10s%n", "op (" + device + ")",
            "min[us]", "median", "p99", "max"));
        try (Context serverContext = Verbs.device(device).open();
             Context clientContext = Verbs.device(device).open();
             ProtectionDomain serverDomain = serverContext.allocateProtectionDomain();
             ProtectionDomain clientDomain = clientContext.allocateProtectionDomain();
             CompletionQueue serverQueue = serverContext.createCompletionQueue(16);
             CompletionQueue clientQueue = clientContext.createCompletionQueue(16);
             MemoryRegion target = serverDomain.allocateMemory(4096, AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE,
                 AccessFlag.REMOTE_READ, AccessFlag.REMOTE_ATOMIC);
             MemoryRegion local = clientDomain.allocateMemory(4096, AccessFlag.LOCAL_WRITE);
             QueuePair server = serverDomain.createQueuePair(QueuePairInitAttributes.of(serverQueue));
             QueuePair client = clientDomain.createQueuePair(QueuePairInitAttributes.of(clientQueue))) {
            ExplicitSetup.connect(server, client.localEndpoint(), AccessFlag.REMOTE_WRITE, AccessFlag.REMOTE_READ,
                AccessFlag.REMOTE_ATOMIC);
            ExplicitSetup.connect(client, server.localEndpoint());
            SendWorkRequest request = new SendWorkRequest().flags(SendFlag.SIGNALED).local(local, 0, 8);
            WorkCompletion[] completions = WorkCompletion.array(1);
            long[] samples = new long[iterations];
            for (SendOpcode opcode : new SendOpcode[] {SendOpcode.RDMA_WRITE, SendOpcode.RDMA_READ,
                SendOpcode.ATOMIC_FETCH_AND_ADD}) {
                request.opcode(opcode).remote(target.address(), target.rkey()).atomic(1, 0);
                for (int i = -iterations / 10; i < iterations; i++) {
                    long start = System.nanoTime();
                    client.postSend(request.wrId(i));
                    ExampleSupport.awaitSuccess(clientQueue, completions);
                    long end = System.nanoTime();
                    if (i >= 0) {
                        samples[i] = end - start;
                    }
                }
                Arrays.sort(samples);
                report.append(String.format("%-22s %10.2f %10.2f %10.2f %10.2f%n", opcode, samples[0] / 1e3,
                    samples[iterations / 2] / 1e3, samples[(int) (iterations * 0.99)] / 1e3,
                    samples[iterations - 1] / 1e3));
            }
        }
        return report.toString();
    }
}
