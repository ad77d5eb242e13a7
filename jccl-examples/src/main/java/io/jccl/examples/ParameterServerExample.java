package io.jccl.examples;

import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.ConnectionManager;
import io.jccl.verbs.ConnectionParameters;
import io.jccl.verbs.Context;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.ProtectionDomain;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.Verbs;
import io.jccl.verbs.WorkCompletion;

import java.lang.foreign.ValueLayout;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.concurrent.CompletableFuture;

/**
 * Parameter-server push/pull with one-sided verbs: the server exposes a parameter table (REMOTE_WRITE |
 * REMOTE_READ) and does nothing else; the client pushes a record with RDMA WRITE and pulls it back with RDMA
 * READ, then checks that what it read is what it wrote. Connection setup uses {@link ConnectionManager}; the
 * table's address and rkey travel as the server's private data.
 *
 * <pre>
 * java ... io.jccl.examples.ParameterServerExample [--device shm0|tcp0] [--floats 1024]
 *   runs server and client in one process (each with its own context);
 * --role server [--port P]  /  --role client --host H --port P  runs one side.
 * </pre>
 */
public final class ParameterServerExample {
    private ParameterServerExample() {
    }

    /** Entry point. */
    public static void main(String[] args) throws Exception {
        String device = ExampleSupport.option(args, "--device", "shm0");
        String role = ExampleSupport.option(args, "--role", "both");
        int floats = Integer.parseInt(ExampleSupport.option(args, "--floats", "1024"));
        int port = Integer.parseInt(ExampleSupport.option(args, "--port", "0"));
        switch (role) {
            case "server" -> serve(device, floats, port, null);
            case "client" -> System.out.println(push(device, floats, new InetSocketAddress(
                ExampleSupport.option(args, "--host", "127.0.0.1"), port)));
            default -> System.out.println(runBoth(device, floats));
        }
    }

    /** Runs server and client in this process and returns the client's report. */
    public static String runBoth(String device, int floats) throws Exception {
        CompletableFuture<InetSocketAddress> listening = new CompletableFuture<>();
        CompletableFuture<Void> server = CompletableFuture.runAsync(() -> serve(device, floats, 0, listening));
        String report = push(device, floats, listening.get());
        server.get();
        return report;
    }

    /** Serves one client: exposes the table, waits until the client disconnects its QP. */
    static void serve(String device, int floats, int port, CompletableFuture<InetSocketAddress> listening) {
        try (Context context = Verbs.device(device).open();
             ProtectionDomain domain = context.allocateProtectionDomain();
             CompletionQueue queue = context.createCompletionQueue(64);
             MemoryRegion table = domain.allocateMemory((long) floats * Float.BYTES, AccessFlag.LOCAL_WRITE,
                 AccessFlag.REMOTE_WRITE, AccessFlag.REMOTE_READ);
             var listener = ConnectionManager.listen(domain, new InetSocketAddress(InetAddress.getLoopbackAddress(),
                 port))) {
            if (listening != null) {
                listening.complete(listener.localAddress());
            } else {
                System.out.println("parameter server listening on " + listener.localAddress());
            }
            ByteBuffer info = ByteBuffer.allocate(12).order(ByteOrder.BIG_ENDIAN)
                .putLong(table.address()).putInt(table.rkey());
            var connection = listener.accept(QueuePairInitAttributes.of(queue),
                ConnectionParameters.defaults().withPrivateData(info.array()));
            try (var queuePair = connection.queuePair()) {
                // One-sided: the server's CPU does nothing until the client says it is done (a SEND).
                var receive = new io.jccl.verbs.ReceiveWorkRequest().wrId(1).noData();
                queuePair.postReceive(receive);
                ExampleSupport.awaitSuccess(queue, WorkCompletion.array(1));
            }
        } catch (RuntimeException e) {
            if (listening != null) {
                listening.completeExceptionally(e);
            }
            throw e;
        }
    }

    /** Pushes a record, pulls it back and checks it; returns a one-line report. */
    static String push(String device, int floats, InetSocketAddress server) {
        long bytes = (long) floats * Float.BYTES;
        try (Context context = Verbs.device(device).open();
             ProtectionDomain domain = context.allocateProtectionDomain();
             CompletionQueue queue = context.createCompletionQueue(64);
             MemoryRegion local = domain.allocateMemory(2 * bytes, AccessFlag.LOCAL_WRITE)) {
            var connection = ConnectionManager.connect(domain, QueuePairInitAttributes.of(queue), server,
                ConnectionParameters.defaults());
            ByteBuffer info = ByteBuffer.wrap(connection.remotePrivateData()).order(ByteOrder.BIG_ENDIAN);
            long tableAddress = info.getLong();
            int tableKey = info.getInt();
            WorkCompletion[] completions = WorkCompletion.array(1);
            try (var queuePair = connection.queuePair()) {
                for (int i = 0; i < floats; i++) {
                    local.segment().setAtIndex(ValueLayout.JAVA_FLOAT, i, i * 0.5f + 1);
                }
                SendWorkRequest request = new SendWorkRequest();
                long start = System.nanoTime();
                request.wrId(1).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED)
                    .remote(tableAddress, tableKey).local(local, 0, (int) bytes);
                queuePair.postSend(request);
                ExampleSupport.awaitSuccess(queue, completions);
                long pushed = System.nanoTime();
                request.wrId(2).opcode(SendOpcode.RDMA_READ).local(local, bytes, (int) bytes);
                queuePair.postSend(request);
                ExampleSupport.awaitSuccess(queue, completions);
                long pulled = System.nanoTime();
                long mismatch = local.segment().asSlice(0, bytes).mismatch(local.segment().asSlice(bytes, bytes));
                if (mismatch != -1) {
                    throw new IllegalStateException("pulled parameters differ from pushed ones at byte " + mismatch);
                }
                request.wrId(3).opcode(SendOpcode.SEND).noData();
                queuePair.postSend(request);
                ExampleSupport.awaitSuccess(queue, completions);
                return String.format("%s: pushed %d floats in %.1f us, pulled them back in %.1f us, identical",
                    device, floats, (pushed - start) / 1e3, (pulled - pushed) / 1e3);
            }
        }
    }
}
